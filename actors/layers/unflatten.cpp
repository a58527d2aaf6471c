// unflatten.cpp: (features) to (channels, height, width), as torch.nn.Unflatten(1, (C, H,
// W)): the data sets hand samples over flat, and image layers (conv2d, the pools) take
// them as images. Settings: channels (default 1), height, width (required).
#include <string>

#include "actors/layers/reshape.hpp"

namespace troupe {
namespace {

constexpr std::int64_t max_side = std::int64_t{1} << 15;

std::unique_ptr<layer> make_unflatten(layer_settings& s) {
  const auto where = s.where();
  const auto channels = s.integer("channels", 1, 1, max_side);
  const auto height = s.integer("height", 1, max_side);
  const auto width = s.integer("width", 1, max_side);
  return std::make_unique<reshape_layer>(
      "unflatten", [=](const shape_t& input) -> shape_t {
        const shape_t image{channels, height, width};
        if (input.size() != 1 || input[0] != channels * height * width)
          throw config_error(where, "layer 'unflatten' maps (" +
                                        std::to_string(channels * height * width) +
                                        ") features to " + shape_to_string(image) +
                                        ", found input " + shape_to_string(input));
        return image;
      });
}

}  // namespace

TROUPE_REGISTER_LAYER("unflatten",
                      "(features) to (channels, height, width) (settings: channels, height, "
                      "width)",
                      make_unflatten);

}  // namespace troupe
