// im2col.cu: the CUDA backend of ops::im2col and its adjoint ops::col2im.
//
// im2col: one thread per (image, channel, output pixel) writes that pixel's KH KW column
// entries (Caffe's layout and approach). col2im: one thread per input pixel gathers the
// column entries that read it, in a fixed order (no atomics; see window2d.cuh).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/window2d.cuh"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

// Element: float, or std::uint16_t (bf16 bits, ops::im2col_bf16).
template <typename Element>
__global__ void im2col_kernel(std::int64_t n, window2d w, const Element* x, Element* cols) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t out_plane = static_cast<std::int64_t>(out_h) * out_w;
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t kernel_area = static_cast<std::int64_t>(w.kernel_h) * w.kernel_w;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < n; index += stride) {
    // index = (image-channel, oh, ow); image-channel = b C + c.
    const int ow = static_cast<int>(index % out_w);
    const int oh = static_cast<int>((index / out_w) % out_h);
    const std::int64_t image_channel = index / out_plane;
    const std::int64_t b = image_channel / w.channels;
    const std::int64_t c = image_channel % w.channels;
    const Element* image = x + image_channel * plane;
    // cols[b][(c KH + i) KW + j][oh OW + ow]
    Element* column = cols + (b * w.channels + c) * kernel_area * out_plane +
                      static_cast<std::int64_t>(oh) * out_w + ow;
    for (int i = 0; i < w.kernel_h; ++i) {
      const int ih = oh * w.stride_h - w.pad_h + i;
      for (int j = 0; j < w.kernel_w; ++j) {
        const int iw = ow * w.stride_w - w.pad_w + j;
        const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
        *column = inside ? image[static_cast<std::int64_t>(ih) * w.width + iw] : Element{};
        column += out_plane;
      }
    }
  }
}

__global__ void col2im_kernel(std::int64_t n, window2d w, const float* cols, float* x) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t out_plane = static_cast<std::int64_t>(out_h) * out_w;
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t kernel_area = static_cast<std::int64_t>(w.kernel_h) * w.kernel_w;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < n; index += stride) {
    const int iw = static_cast<int>(index % w.width);
    const int ih = static_cast<int>((index / w.width) % w.height);
    const std::int64_t image_channel = index / plane;
    const float* channel_cols = cols + image_channel * kernel_area * out_plane;
    int oh_first, oh_last, ow_first, ow_last;
    covering_outputs(ih, w.kernel_h, w.stride_h, w.pad_h, out_h, oh_first, oh_last);
    covering_outputs(iw, w.kernel_w, w.stride_w, w.pad_w, out_w, ow_first, ow_last);
    float sum = 0.0f;
    for (int oh = oh_first; oh < oh_last; ++oh) {
      const int i = ih - (oh * w.stride_h - w.pad_h);
      for (int ow = ow_first; ow < ow_last; ++ow) {
        const int j = iw - (ow * w.stride_w - w.pad_w);
        sum += channel_cols[(static_cast<std::int64_t>(i) * w.kernel_w + j) * out_plane +
                            static_cast<std::int64_t>(oh) * out_w + ow];
      }
    }
    x[index] = sum;
  }
}

}  // namespace

// ---- launchers ----

template <typename Element>
void unfold(const char* op, const context& ctx, int batch, const window2d& window, const Element* x,
            Element* cols) {
  check_window(op, batch, window);
  const std::int64_t n = static_cast<std::int64_t>(batch) * window.channels * window.out_h() *
                         window.out_w();
  if (n == 0)
    return;
  im2col_kernel<Element>
      <<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, window, x, cols);
  TROUPE_CHECK_LAUNCH();
}

void im2col(const context& ctx, int batch, const window2d& window, const float* x, float* cols) {
  unfold("im2col", ctx, batch, window, x, cols);
}

void im2col_bf16(const context& ctx, int batch, const window2d& window, const std::uint16_t* x,
                 std::uint16_t* cols) {
  unfold("im2col_bf16", ctx, batch, window, x, cols);
}

void col2im(const context& ctx, int batch, const window2d& window, const float* cols, float* x) {
  check_window("col2im", batch, window);
  const std::int64_t n =
      static_cast<std::int64_t>(batch) * window.channels * window.height * window.width;
  if (n == 0)
    return;
  col2im_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, window, cols,
                                                                                 x);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::im2col, device_type::cuda, im2col);
TROUPE_REGISTER_KERNEL(ops::im2col_bf16, device_type::cuda, im2col_bf16);
TROUPE_REGISTER_KERNEL(ops::col2im, device_type::cuda, col2im);

}  // namespace troupe::kernels::cuda_backend
