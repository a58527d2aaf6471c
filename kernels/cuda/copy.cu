// copy.cu: the CUDA backend of ops::copy, bytes within one device.
//
// cudaMemcpyAsync device-to-device, ordered on the context's stream like every kernel.
// Copies between devices or to and from the host are the runtime's business (traced,
// with events), not this op's.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {

// ---- launchers ----

void copy(const context& ctx, std::int64_t bytes, const void* src, void* dst) {
  TROUPE_CHECK(bytes >= 0, "copy size must not be negative: bytes=" << bytes);
  if (bytes == 0)
    return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice,
                             stream_of(ctx)));
}

TROUPE_REGISTER_KERNEL(ops::copy, device_type::cuda, copy);

}  // namespace troupe::kernels::cuda_backend
