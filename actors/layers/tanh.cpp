// tanh.cpp: the tanh activation layer, hyperbolic tangent.
#include "actors/layers/activation.hpp"

namespace troupe {

TROUPE_REGISTER_LAYER("tanh", "hyperbolic tangent (no settings)", [](layer_settings&) {
  using namespace kernels::ops;
  return std::make_unique<activation_layer<tanh_forward, tanh_backward, activation_reads::y>>(
      "tanh");
});

}  // namespace troupe
