// adam_update.cu: the CUDA backend of ops::adam_update, one torch.optim.Adam or AdamW step,
// in place or out of place (include/troupe/ops.hpp, Note [out-of-place updates]).
//
// Exactly the semantics of adam_hyper (include/troupe/ops.hpp). The bias corrections depend only
// on the step, so the launcher computes them once in double on the host (as PyTorch does
// in Python floats) and passes step_size = lr / (1 - beta1^step),
// sqrt(1 - beta2^step) and AdamW's factor 1 - lr * weight_decay to the kernel.
// No multi-tensor fusion, no AMSGrad.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

// No __restrict__: param and param_out may be the same buffer. Each thread reads
// param[i] once before it writes param_out[i], so either way is correct.
__global__ void adam_update_kernel(std::int64_t n, const float* param, float* param_out,
                                   const float* grad, float* m, float* v, adam_hyper hyper,
                                   float step_size, float bias_correction2_sqrt, float decay) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    float p = param[i];
    float g = grad[i];
    if (hyper.weight_decay != 0.0f) {
      if (hyper.decoupled)
        p *= decay;  // AdamW
      else
        g += hyper.weight_decay * p;  // Adam: L2 penalty in the gradient
    }
    const float m_new = hyper.beta1 * m[i] + (1.0f - hyper.beta1) * g;
    const float v_new = hyper.beta2 * v[i] + (1.0f - hyper.beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;
    const float denominator = sqrtf(v_new) / bias_correction2_sqrt + hyper.eps;
    param_out[i] = p - step_size * (m_new / denominator);
  }
}

}  // namespace

// ---- launchers ----

void adam_update(const context& ctx, std::int64_t n, const float* param, float* param_out,
                 const float* grad, float* m, float* v, const adam_hyper& hyper) {
  TROUPE_CHECK(n >= 0, "adam_update size must not be negative: n=" << n);
  TROUPE_CHECK(param == param_out || param + n <= param_out || param_out + n <= param,
               "adam_update: param and param_out overlap partially (n=" << n << ")");
  TROUPE_CHECK(hyper.step >= 1, "adam_update step is 1-based, got " << hyper.step);
  if (n == 0)
    return;
  const double step = static_cast<double>(hyper.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(hyper.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(hyper.beta2), step);
  const auto step_size = static_cast<float>(hyper.lr / bias_correction1);
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(hyper.lr) * hyper.weight_decay);
  adam_update_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, param, param_out, grad, m, v, hyper, step_size, bias_correction2_sqrt, decay);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::adam_update, device_type::cuda, adam_update);

}  // namespace troupe::kernels::cuda_backend
