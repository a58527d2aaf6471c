// flatten.cpp: (C, H, W) or any per-sample shape to (C H W), as torch.nn.Flatten (the
// values keep their row-major order, so a linear layer after it sees torch's layout).
#include "actors/layers/reshape.hpp"

namespace troupe {

TROUPE_REGISTER_LAYER("flatten", "any per-sample shape to (features) (no settings)",
                      [](layer_settings&) {
                        return std::make_unique<reshape_layer>("flatten", [](const shape_t& in) {
                          return shape_t{element_count(in)};
                        });
                      });

}  // namespace troupe
