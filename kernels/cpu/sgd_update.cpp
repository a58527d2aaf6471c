// sgd_update.cpp: one SGD step, in place or out of place, with torch.optim.SGD's
// semantics, on the CPU.
//
//   d = g + weight_decay * p
//   if momentum != 0: buf = first_step ? d : momentum * buf + (1 - dampening) * d
//                     d   = nesterov ? d + momentum * buf : buf
//   p_out = p - lr * d
//
// Each line is evaluated in the same order and precision (float) as PyTorch's
// single-tensor path, so results agree to a few ulps. It does not check that nesterov
// comes with dampening == 0 (PyTorch rejects that combination when the optimizer is
// built; the config does it here). No `maximize`, no foreach grouping.
#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

// The arithmetic of one element, shared by the in-place and out-of-place loops so that
// both round identically. GCC inlines it into every clone below.
inline float plain_value(float p, float g, float lr, float weight_decay) {
  const float d = g + weight_decay * p;
  return p - lr * d;
}

inline float momentum_value(float p, float g, float& buffer, float lr, float weight_decay,
                            float momentum, float one_minus_dampening, bool nesterov,
                            bool first_step) {
  const float d = g + weight_decay * p;
  const float b = first_step ? d : momentum * buffer + one_minus_dampening * d;
  buffer = b;
  const float step = nesterov ? d + momentum * b : b;
  return p - lr * step;
}

// Note [in place and out of place loops]: each step has two loops. The out-of-place one
// promises the compiler (__restrict) that param and param_out do not alias, which is
// false when they are the same buffer; so an update in place goes through a loop that
// takes one read-write pointer instead. Both vectorise, and both read and write the same
// number of streams; see include/troupe/ops.hpp, Note [out-of-place updates].

TROUPE_VECTOR_CLONES
void plain_step_in_place(std::int64_t n, float* __restrict param, const float* __restrict grad,
                         float lr, float weight_decay) {
  for (std::int64_t i = 0; i < n; ++i)
    param[i] = plain_value(param[i], grad[i], lr, weight_decay);
}

TROUPE_VECTOR_CLONES
void plain_step(std::int64_t n, const float* __restrict param, float* __restrict param_out,
                const float* __restrict grad, float lr, float weight_decay) {
  for (std::int64_t i = 0; i < n; ++i)
    param_out[i] = plain_value(param[i], grad[i], lr, weight_decay);
}

// first_step and nesterov are loop-invariant: GCC unswitches them out of both loops.
TROUPE_VECTOR_CLONES
void momentum_step_in_place(std::int64_t n, float* __restrict param,
                            const float* __restrict grad, float* __restrict buffer, float lr,
                            float weight_decay, float momentum, float one_minus_dampening,
                            bool nesterov, bool first_step) {
  for (std::int64_t i = 0; i < n; ++i)
    param[i] = momentum_value(param[i], grad[i], buffer[i], lr, weight_decay, momentum,
                              one_minus_dampening, nesterov, first_step);
}

TROUPE_VECTOR_CLONES
void momentum_step(std::int64_t n, const float* __restrict param, float* __restrict param_out,
                   const float* __restrict grad, float* __restrict buffer, float lr,
                   float weight_decay, float momentum, float one_minus_dampening,
                   bool nesterov, bool first_step) {
  for (std::int64_t i = 0; i < n; ++i)
    param_out[i] = momentum_value(param[i], grad[i], buffer[i], lr, weight_decay, momentum,
                                  one_minus_dampening, nesterov, first_step);
}

void sgd_update(const context&, std::int64_t n, const float* param, float* param_out,
                const float* grad, float* momentum_buffer, const sgd_hyper& hyper) {
  const bool in_place = param == param_out;
  TROUPE_CHECK(in_place || param + n <= param_out || param_out + n <= param,
               "sgd_update: param and param_out overlap partially (n=" << n << ")");
  if (hyper.momentum == 0.0f) {
    if (in_place)
      plain_step_in_place(n, param_out, grad, hyper.lr, hyper.weight_decay);
    else
      plain_step(n, param, param_out, grad, hyper.lr, hyper.weight_decay);
    return;
  }
  TROUPE_CHECK(momentum_buffer != nullptr || n == 0,
               "sgd_update with momentum " << hyper.momentum << " needs a momentum buffer");
  const float one_minus_dampening = 1.0f - hyper.dampening;
  if (in_place)
    momentum_step_in_place(n, param_out, grad, momentum_buffer, hyper.lr, hyper.weight_decay,
                           hyper.momentum, one_minus_dampening, hyper.nesterov,
                           hyper.first_step);
  else
    momentum_step(n, param, param_out, grad, momentum_buffer, hyper.lr, hyper.weight_decay,
                  hyper.momentum, one_minus_dampening, hyper.nesterov, hyper.first_step);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::sgd_update, device_type::cpu, sgd_update);

}  // namespace troupe::kernels::cpu
