// avg_pool2d.cu: the CUDA backend of ops::avg_pool2d_forward and ops::avg_pool2d_backward,
// dividing by the full window KH KW (count_include_pad = True, as the CPU kernel).
//
// Forward: one thread per output sums its window. Backward: one thread per input pixel
// gathers dy / (KH KW) from the windows covering it (no atomics; see window2d.cuh).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/window2d.cuh"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void avg_pool2d_forward_kernel(std::int64_t n, window2d w, const float* x, float* y) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const float scale = 1.0f / static_cast<float>(w.kernel_h * w.kernel_w);
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < n; index += stride) {
    const int ow = static_cast<int>(index % out_w);
    const int oh = static_cast<int>((index / out_w) % out_h);
    const float* image = x + (index / (static_cast<std::int64_t>(out_h) * out_w)) *
                                 (static_cast<std::int64_t>(w.height) * w.width);
    const int h0 = oh * w.stride_h - w.pad_h, w0 = ow * w.stride_w - w.pad_w;
    const int h_first = max(h0, 0), h_last = min(h0 + w.kernel_h, w.height);
    const int w_first = max(w0, 0), w_last = min(w0 + w.kernel_w, w.width);
    float sum = 0.0f;
    for (int h = h_first; h < h_last; ++h)
      for (int c = w_first; c < w_last; ++c)
        sum += image[h * w.width + c];
    y[index] = sum * scale;
  }
}

__global__ void avg_pool2d_backward_kernel(std::int64_t n, window2d w, const float* dy,
                                           float* dx) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t out_plane = static_cast<std::int64_t>(out_h) * out_w;
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const float scale = 1.0f / static_cast<float>(w.kernel_h * w.kernel_w);
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < n; index += stride) {
    const int iw = static_cast<int>(index % w.width);
    const int ih = static_cast<int>((index / w.width) % w.height);
    const float* plane_dy = dy + (index / plane) * out_plane;
    int oh_first, oh_last, ow_first, ow_last;
    covering_outputs(ih, w.kernel_h, w.stride_h, w.pad_h, out_h, oh_first, oh_last);
    covering_outputs(iw, w.kernel_w, w.stride_w, w.pad_w, out_w, ow_first, ow_last);
    float sum = 0.0f;
    for (int oh = oh_first; oh < oh_last; ++oh)
      for (int ow = ow_first; ow < ow_last; ++ow)
        sum += plane_dy[static_cast<std::int64_t>(oh) * out_w + ow] * scale;
    dx[index] = sum;
  }
}

}  // namespace

// ---- launchers ----

void avg_pool2d_forward(const context& ctx, int batch, const window2d& window, const float* x,
                        float* y) {
  check_window("avg_pool2d_forward", batch, window);
  const std::int64_t n = static_cast<std::int64_t>(batch) * window.channels * window.out_h() *
                         window.out_w();
  if (n == 0)
    return;
  avg_pool2d_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, window, x, y);
  TROUPE_CHECK_LAUNCH();
}

void avg_pool2d_backward(const context& ctx, int batch, const window2d& window, const float* dy,
                         float* dx) {
  check_window("avg_pool2d_backward", batch, window);
  const std::int64_t n =
      static_cast<std::int64_t>(batch) * window.channels * window.height * window.width;
  if (n == 0)
    return;
  avg_pool2d_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, window, dy, dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::avg_pool2d_forward, device_type::cuda, avg_pool2d_forward);
TROUPE_REGISTER_KERNEL(ops::avg_pool2d_backward, device_type::cuda, avg_pool2d_backward);

}  // namespace troupe::kernels::cuda_backend
