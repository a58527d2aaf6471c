// unflatten.cpp: (features) to an image (channels, height, width) or a sequence
// (positions, features), as torch.nn.Unflatten(1, ...): the data sets hand samples over
// flat, and image layers (conv2d, the pools) take images, sequence layers (attention)
// sequences. Settings: channels (default 1), height, width; or positions, features.
#include <string>

#include "actors/layers/reshape.hpp"

namespace troupe {
namespace {

constexpr std::int64_t max_side = std::int64_t{1} << 15;

std::unique_ptr<layer> make_unflatten(layer_settings& s) {
  const auto where = s.where();
  shape_t shape;
  if (s.has("positions") || s.has("features")) {
    shape = {s.integer("positions", 1, max_side), s.integer("features", 1, max_side)};
  } else {
    const auto channels = s.integer("channels", 1, 1, max_side);
    shape = {channels, s.integer("height", 1, max_side), s.integer("width", 1, max_side)};
  }
  return std::make_unique<reshape_layer>("unflatten", [=](const shape_t& input) -> shape_t {
    const auto features = element_count(shape);
    if (input.size() != 1 || input[0] != features)
      throw config_error(where, "layer 'unflatten' maps (" + std::to_string(features) +
                                    ") features to " + shape_to_string(shape) +
                                    ", found input " + shape_to_string(input));
    return shape;
  });
}

}  // namespace

TROUPE_REGISTER_LAYER("unflatten",
                      "(features) to (channels, height, width) or (positions, features) "
                      "(settings: channels, height, width; or positions, features)",
                      make_unflatten);

}  // namespace troupe
