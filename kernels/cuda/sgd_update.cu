// sgd_update.cu: the CUDA backend of ops::sgd_update, one torch.optim.SGD step, in place
// or out of place (include/troupe/ops.hpp, Note [out-of-place updates]).
//
// Exactly the semantics of sgd_hyper (include/troupe/ops.hpp): weight decay added to the
// gradient, optional momentum (the first step copies d into the buffer, undamped, as
// PyTorch does), optional Nesterov, then p_out = p - lr * d. Terms whose coefficient is 0 are
// skipped, as PyTorch skips them, so an inf/NaN parameter is not turned into a NaN
// gradient by a 0 * inf. No multi-tensor fusion; one launch per parameter tensor.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

// No __restrict__: param and param_out may be the same buffer. Each thread reads
// param[i] once before it writes param_out[i], so either way is correct.
__global__ void sgd_update_kernel(std::int64_t n, const float* param, float* param_out,
                                  const float* grad, float* momentum_buffer, sgd_hyper hyper) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float p = param[i];
    float d = grad[i];
    if (hyper.weight_decay != 0.0f)
      d += hyper.weight_decay * p;
    if (hyper.momentum != 0.0f) {
      const float buffer =
          hyper.first_step ? d
                           : hyper.momentum * momentum_buffer[i] + (1.0f - hyper.dampening) * d;
      momentum_buffer[i] = buffer;
      d = hyper.nesterov ? d + hyper.momentum * buffer : buffer;
    }
    param_out[i] = p - hyper.lr * d;
  }
}

}  // namespace

// ---- launchers ----

void sgd_update(const context& ctx, std::int64_t n, const float* param, float* param_out,
                const float* grad, float* momentum_buffer, const sgd_hyper& hyper) {
  TROUPE_CHECK(n >= 0, "sgd_update size must not be negative: n=" << n);
  TROUPE_CHECK(param == param_out || param + n <= param_out || param_out + n <= param,
               "sgd_update: param and param_out overlap partially (n=" << n << ")");
  TROUPE_CHECK(hyper.momentum == 0.0f || momentum_buffer != nullptr || n == 0,
               "sgd_update with momentum " << hyper.momentum << " needs a momentum buffer");
  if (n == 0)
    return;
  sgd_update_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, param, param_out, grad, momentum_buffer, hyper);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::sgd_update, device_type::cuda, sgd_update);

}  // namespace troupe::kernels::cuda_backend
