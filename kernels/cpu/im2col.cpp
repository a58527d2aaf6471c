// im2col.cpp: im2col and its adjoint col2im on the CPU, the two data movements around the
// GEMMs of a convolution (actors/layers/conv2d.cpp).
//
// im2col fills cols row by row: a row is one (channel, kernel row, kernel column) and runs
// over the output pixels, so the inner loop reads one image row with a fixed stride and
// writes contiguously (a plain copy at stride 1); the padding is written as zero spans, not
// tested per element.
// col2im walks the same order and adds into x, so every pixel's sum has one fixed order
// (the CUDA kernel gathers instead, in another order; its test allows that rounding).
// No GEMM here.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/vectorize.hpp"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

/// The output columns [first, last) of one kernel column j whose input column
/// ow sw - pw + j lies inside [0, W).
void valid_columns(const window2d& w, int j, int out_w, int& first, int& last) {
  // ow sw - pw + j >= 0  <=>  ow >= ceil((pw - j) / sw)
  const int low = w.pad_w - j;
  first = low <= 0 ? 0 : (low + w.stride_w - 1) / w.stride_w;
  // ow sw - pw + j <= W - 1  <=>  ow <= floor((W - 1 + pw - j) / sw)
  const int high = w.width - 1 + w.pad_w - j;
  last = high < 0 ? 0 : std::min(out_w, high / w.stride_w + 1);
  first = std::min(first, last);
}

TROUPE_VECTOR_CLONES
void add_into(int n, const float* __restrict source, float* __restrict target) {
  for (int k = 0; k < n; ++k)
    target[k] += source[k];
}

// One row of cols: n elements of a contiguous image row, or zeros (from == nullptr). A plain
// loop, not std::copy and std::fill: the rows are short (14 to 28 pixels in
// config/fashion_cnn.toml), and a library call per row was most of im2col's time (perf; this
// file is compiled with -fno-tree-loop-distribute-patterns so that GCC keeps the loops).
template <typename Element>
inline void copy_row(int n, const Element* __restrict from, Element* __restrict to) {
  if (from == nullptr)
    for (int k = 0; k < n; ++k)
      to[k] = Element{};
  else
    for (int k = 0; k < n; ++k)
      to[k] = from[k];
}

// Element is float, or std::uint16_t (bf16 bits) for im2col alone: the adjoint adds floats.
template <bool Adjoint, typename Element = float>
void unfold(int batch, const window2d& w, const Element* x_in, float* x_out, const float* cols_in,
            Element* cols_out) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t out_plane = static_cast<std::int64_t>(out_h) * out_w;
  const std::int64_t rows = static_cast<std::int64_t>(w.channels) * w.kernel_h * w.kernel_w;
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < w.channels; ++c) {
      const std::int64_t image = (static_cast<std::int64_t>(b) * w.channels + c) * plane;
      for (int i = 0; i < w.kernel_h; ++i) {
        for (int j = 0; j < w.kernel_w; ++j) {
          const std::int64_t row = (static_cast<std::int64_t>(c) * w.kernel_h + i) * w.kernel_w + j;
          const std::int64_t base = (b * rows + row) * out_plane;
          int first = 0, last = 0;
          valid_columns(w, j, out_w, first, last);
          for (int oh = 0; oh < out_h; ++oh) {
            const std::int64_t at = base + static_cast<std::int64_t>(oh) * out_w;
            const int ih = oh * w.stride_h - w.pad_h + i;
            if (ih < 0 || ih >= w.height) {
              if (!Adjoint)
                copy_row<Element>(out_w, nullptr, cols_out + at);
              continue;
            }
            const std::int64_t source = image + static_cast<std::int64_t>(ih) * w.width;
            // The first valid pixel; only formed when there is one (first < last).
            const std::int64_t pixel =
                first < last ? source + first * w.stride_w - w.pad_w + j : source;
            if constexpr (Adjoint) {
              if (w.stride_w == 1)
                add_into(last - first, cols_in + at + first, x_out + pixel);
              else
                for (int ow = first; ow < last; ++ow)
                  x_out[pixel + (ow - first) * w.stride_w] += cols_in[at + ow];
            } else {
              copy_row<Element>(first, nullptr, cols_out + at);
              if (w.stride_w == 1)
                copy_row(last - first, x_in + pixel, cols_out + at + first);
              else
                for (int ow = first; ow < last; ++ow)
                  cols_out[at + ow] = x_in[pixel + (ow - first) * w.stride_w];
              copy_row<Element>(out_w - last, nullptr, cols_out + at + last);
            }
          }
        }
      }
    }
  }
}

void im2col(const context&, int batch, const window2d& window, const float* x, float* cols) {
  check_window("im2col", batch, window);
  unfold<false>(batch, window, x, nullptr, nullptr, cols);
}

void im2col_bf16(const context&, int batch, const window2d& window, const std::uint16_t* x,
                 std::uint16_t* cols) {
  check_window("im2col_bf16", batch, window);
  unfold<false>(batch, window, x, nullptr, nullptr, cols);
}

void col2im(const context&, int batch, const window2d& window, const float* cols, float* x) {
  check_window("col2im", batch, window);
  std::fill(x, x + static_cast<std::int64_t>(batch) * window.channels * window.height * window.width,
            0.0f);
  unfold<true, float>(batch, window, nullptr, x, cols, nullptr);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::im2col, device_type::cpu, im2col);
TROUPE_REGISTER_KERNEL(ops::im2col_bf16, device_type::cpu, im2col_bf16);
TROUPE_REGISTER_KERNEL(ops::col2im, device_type::cpu, col2im);

}  // namespace troupe::kernels::cpu
