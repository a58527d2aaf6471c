// sgd_update.cpp: one SGD step in place, with torch.optim.SGD's semantics, on the CPU.
//
//   d = g + weight_decay * p
//   if momentum != 0: buf = first_step ? d : momentum * buf + (1 - dampening) * d
//                     d   = nesterov ? d + momentum * buf : buf
//   p -= lr * d
//
// Each line is evaluated in the same order and precision (float) as PyTorch's
// single-tensor path, so results agree to a few ulps. It does not check that nesterov
// comes with dampening == 0 (PyTorch rejects that combination when the optimizer is
// built; the config does it here). No `maximize`, no foreach grouping.
#include "kernels/cpu/vectorize.hpp"
#include "kernels/ops.hpp"
#include "runtime/error.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void plain_step(std::int64_t n, float* __restrict param, const float* __restrict grad,
                float lr, float weight_decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = grad[i] + weight_decay * param[i];
    param[i] = param[i] - lr * d;
  }
}

// first_step and nesterov are loop-invariant: GCC unswitches them out of the loop.
TROUPE_VECTOR_CLONES
void momentum_step(std::int64_t n, float* __restrict param, const float* __restrict grad,
                   float* __restrict buffer, float lr, float weight_decay, float momentum,
                   float one_minus_dampening, bool nesterov, bool first_step) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = grad[i] + weight_decay * param[i];
    const float b = first_step ? d : momentum * buffer[i] + one_minus_dampening * d;
    buffer[i] = b;
    const float step = nesterov ? d + momentum * b : b;
    param[i] = param[i] - lr * step;
  }
}

void sgd_update(const context&, std::int64_t n, float* param, const float* grad,
                float* momentum_buffer, const sgd_hyper& hyper) {
  if (hyper.momentum == 0.0f) {
    plain_step(n, param, grad, hyper.lr, hyper.weight_decay);
    return;
  }
  TROUPE_CHECK(momentum_buffer != nullptr || n == 0,
               "sgd_update with momentum " << hyper.momentum << " needs a momentum buffer");
  momentum_step(n, param, grad, momentum_buffer, hyper.lr, hyper.weight_decay,
                hyper.momentum, 1.0f - hyper.dampening, hyper.nesterov, hyper.first_step);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::sgd_update, device_type::cpu, sgd_update);

}  // namespace troupe::kernels::cpu
