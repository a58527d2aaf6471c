// max_pool2d.cu: the CUDA backend of ops::max_pool2d_forward and ops::max_pool2d_backward.
//
// Forward: one thread per output scans its window in row-major order, keeping the first
// maximum (NaN wins), exactly as the CPU kernel, so argmax agrees bit for bit. Backward:
// one thread per input pixel gathers dy from the outputs whose argmax it is (no atomics;
// see window2d.cuh).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/window2d.cuh"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void max_pool2d_forward_kernel(std::int64_t n, window2d w, const float* x, float* y,
                                          std::int32_t* argmax) {
  const int out_h = w.out_h(), out_w = w.out_w();
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
    float best = -INFINITY;
    std::int32_t where = h_first * w.width + w_first;
    for (int h = h_first; h < h_last; ++h)
      for (int c = w_first; c < w_last; ++c) {
        const float value = image[h * w.width + c];
        if (value > best || (isnan(value) && !isnan(best))) {
          best = value;
          where = h * w.width + c;
        }
      }
    y[index] = best;
    argmax[index] = where;
  }
}

__global__ void max_pool2d_backward_kernel(std::int64_t n, window2d w, const float* dy,
                                           const std::int32_t* argmax, float* dx) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t out_plane = static_cast<std::int64_t>(out_h) * out_w;
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < n; index += stride) {
    const int iw = static_cast<int>(index % w.width);
    const int ih = static_cast<int>((index / w.width) % w.height);
    const std::int64_t first_output = (index / plane) * out_plane;
    const std::int32_t self = ih * w.width + iw;
    int oh_first, oh_last, ow_first, ow_last;
    covering_outputs(ih, w.kernel_h, w.stride_h, w.pad_h, out_h, oh_first, oh_last);
    covering_outputs(iw, w.kernel_w, w.stride_w, w.pad_w, out_w, ow_first, ow_last);
    float sum = 0.0f;
    for (int oh = oh_first; oh < oh_last; ++oh)
      for (int ow = ow_first; ow < ow_last; ++ow) {
        const std::int64_t out = first_output + static_cast<std::int64_t>(oh) * out_w + ow;
        if (argmax[out] == self)
          sum += dy[out];
      }
    dx[index] = sum;
  }
}

}  // namespace

// ---- launchers ----

void max_pool2d_forward(const context& ctx, int batch, const window2d& window, const float* x,
                        float* y, std::int32_t* argmax) {
  check_window("max_pool2d_forward", batch, window);
  TROUPE_CHECK(window.pad_h < window.kernel_h && window.pad_w < window.kernel_w,
               "max_pool2d_forward: padding " << window.pad_h << "x" << window.pad_w
                                              << " leaves windows with no pixel (kernel "
                                              << window.kernel_h << "x" << window.kernel_w
                                              << ")");
  const std::int64_t n = static_cast<std::int64_t>(batch) * window.channels * window.out_h() *
                         window.out_w();
  if (n == 0)
    return;
  max_pool2d_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, window, x, y, argmax);
  TROUPE_CHECK_LAUNCH();
}

void max_pool2d_backward(const context& ctx, int batch, const window2d& window, const float* dy,
                         const std::int32_t* argmax, float* dx) {
  check_window("max_pool2d_backward", batch, window);
  const std::int64_t n =
      static_cast<std::int64_t>(batch) * window.channels * window.height * window.width;
  if (n == 0)
    return;
  max_pool2d_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, window, dy, argmax, dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::max_pool2d_forward, device_type::cuda, max_pool2d_forward);
TROUPE_REGISTER_KERNEL(ops::max_pool2d_backward, device_type::cuda, max_pool2d_backward);

}  // namespace troupe::kernels::cuda_backend
