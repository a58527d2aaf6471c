// relu.cpp: the relu activation layer, max(x, 0).
#include "actors/layers/activation.hpp"

namespace troupe {

TROUPE_REGISTER_LAYER("relu", "max(x, 0) (no settings)", [](layer_settings&) {
  using namespace kernels::ops;
  return std::make_unique<activation_layer<relu_forward, relu_backward, activation_reads::y,
                                           relu_forward_bf16, relu_backward_bf16>>("relu");
});

}  // namespace troupe
