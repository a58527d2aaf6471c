// gelu.cpp: the gelu activation layer, x * Phi(x), the exact erf form of torch.nn.GELU.
#include "actors/layers/activation.hpp"

namespace troupe {

TROUPE_REGISTER_LAYER("gelu", "x * Phi(x), the exact erf form of torch.nn.GELU (no settings)", [](layer_settings&) {
  using namespace kernels::ops;
  return std::make_unique<activation_layer<gelu_forward, gelu_backward, activation_reads::x>>(
      "gelu");
});

}  // namespace troupe
