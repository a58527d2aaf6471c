// avg_pool2d.cpp: average pooling forward and backward on the CPU, dividing by the full
// window KH KW (padding counts as zeros: torch's default count_include_pad = True).
//
// Backward spreads each output's dy / (KH KW) over its window, output by output, so every
// pixel's sum has one fixed order.
#include <algorithm>
#include <cstdint>

#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

/// Calls visit(plane, out_index, h_first, h_last, w_first, w_last) for every output with the
/// clipped bounds of its window.
template <class Visit>
void for_each_window(int batch, const window2d& w, Visit visit) {
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
  for (std::int64_t p = 0; p < planes; ++p)
    for (int oh = 0; oh < out_h; ++oh) {
      const int h0 = oh * w.stride_h - w.pad_h;
      const int h_first = std::max(h0, 0), h_last = std::min(h0 + w.kernel_h, w.height);
      for (int ow = 0; ow < out_w; ++ow) {
        const int w0 = ow * w.stride_w - w.pad_w;
        const int w_first = std::max(w0, 0), w_last = std::min(w0 + w.kernel_w, w.width);
        visit(p, (p * out_h + oh) * out_w + ow, h_first, h_last, w_first, w_last);
      }
    }
}

void avg_pool2d_forward(const context&, int batch, const window2d& w, const float* x, float* y) {
  check_window("avg_pool2d_forward", batch, w);
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const float scale = 1.0f / static_cast<float>(w.kernel_h * w.kernel_w);
  for_each_window(batch, w, [&](std::int64_t p, std::int64_t out, int h_first, int h_last,
                                int w_first, int w_last) {
    const float* image = x + p * plane;
    float sum = 0.0f;
    for (int h = h_first; h < h_last; ++h)
      for (int c = w_first; c < w_last; ++c)
        sum += image[h * w.width + c];
    y[out] = sum * scale;
  });
}

void avg_pool2d_backward(const context&, int batch, const window2d& w, const float* dy,
                         float* dx) {
  check_window("avg_pool2d_backward", batch, w);
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  std::fill(dx, dx + static_cast<std::int64_t>(batch) * w.channels * plane, 0.0f);
  const float scale = 1.0f / static_cast<float>(w.kernel_h * w.kernel_w);
  for_each_window(batch, w, [&](std::int64_t p, std::int64_t out, int h_first, int h_last,
                                int w_first, int w_last) {
    float* image = dx + p * plane;
    const float share = dy[out] * scale;
    for (int h = h_first; h < h_last; ++h)
      for (int c = w_first; c < w_last; ++c)
        image[h * w.width + c] += share;
  });
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::avg_pool2d_forward, device_type::cpu, avg_pool2d_forward);
TROUPE_REGISTER_KERNEL(ops::avg_pool2d_backward, device_type::cpu, avg_pool2d_backward);

}  // namespace troupe::kernels::cpu
