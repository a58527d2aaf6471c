// window_reference.hpp: naive double-precision references for the window ops (im2col,
// col2im, max and average pooling), written from the definitions in include/troupe/ops.hpp
// with one loop per index and a bounds test per element, and the geometries the tests and
// the CUDA comparison run them on.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "troupe/ops.hpp"

namespace troupe::test {

inline kernels::window2d make_window2d(int channels, int height, int width, int kernel,
                                       int stride, int pad) {
  kernels::window2d w;
  w.channels = channels;
  w.height = height;
  w.width = width;
  w.kernel_h = w.kernel_w = kernel;
  w.stride_h = w.stride_w = stride;
  w.pad_h = w.pad_w = pad;
  return w;
}

/// Geometries that cover the edge cases: 1x1 kernels, stride past the kernel (skipped
/// pixels), overlapping windows, padding, a rectangle, windows as large as the image.
inline std::vector<kernels::window2d> window_geometries() {
  std::vector<kernels::window2d> out{
      make_window2d(1, 5, 5, 1, 1, 0), make_window2d(2, 6, 7, 3, 1, 1),
      make_window2d(3, 7, 5, 3, 2, 1), make_window2d(2, 8, 8, 2, 2, 0),
      make_window2d(1, 9, 6, 2, 3, 0), make_window2d(4, 4, 4, 4, 1, 0),
      make_window2d(2, 5, 5, 5, 1, 2)};
  auto rectangle = make_window2d(2, 6, 9, 3, 1, 1);
  rectangle.kernel_w = 2;
  rectangle.stride_h = 2;
  rectangle.pad_w = 0;
  out.push_back(rectangle);
  return out;
}

/// Calls visit(b, c, oh, ow, i, j, ih, iw) for every window element, padding included
/// (ih, iw may lie outside the image).
template <class Visit>
void for_each_window_element(int batch, const kernels::window2d& w, Visit visit) {
  for (int b = 0; b < batch; ++b)
    for (int c = 0; c < w.channels; ++c)
      for (int oh = 0; oh < w.out_h(); ++oh)
        for (int ow = 0; ow < w.out_w(); ++ow)
          for (int i = 0; i < w.kernel_h; ++i)
            for (int j = 0; j < w.kernel_w; ++j)
              visit(b, c, oh, ow, i, j, oh * w.stride_h - w.pad_h + i,
                    ow * w.stride_w - w.pad_w + j);
}

inline bool inside(const kernels::window2d& w, int ih, int iw) {
  return ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
}

inline std::int64_t image_index(const kernels::window2d& w, int b, int c, int ih, int iw) {
  return ((static_cast<std::int64_t>(b) * w.channels + c) * w.height + ih) * w.width + iw;
}

inline std::int64_t output_index(const kernels::window2d& w, int b, int c, int oh, int ow) {
  return ((static_cast<std::int64_t>(b) * w.channels + c) * w.out_h() + oh) * w.out_w() + ow;
}

inline std::int64_t column_index(const kernels::window2d& w, int b, int c, int oh, int ow, int i,
                                 int j) {
  const std::int64_t row = (static_cast<std::int64_t>(c) * w.kernel_h + i) * w.kernel_w + j;
  const std::int64_t rows = static_cast<std::int64_t>(w.channels) * w.kernel_h * w.kernel_w;
  return ((b * rows) + row) * w.out_h() * w.out_w() + static_cast<std::int64_t>(oh) * w.out_w() +
         ow;
}

inline std::int64_t image_size(int batch, const kernels::window2d& w) {
  return static_cast<std::int64_t>(batch) * w.channels * w.height * w.width;
}
inline std::int64_t output_size(int batch, const kernels::window2d& w) {
  return static_cast<std::int64_t>(batch) * w.channels * w.out_h() * w.out_w();
}
inline std::int64_t columns_size(int batch, const kernels::window2d& w) {
  return static_cast<std::int64_t>(batch) * w.channels * w.kernel_h * w.kernel_w * w.out_h() *
         w.out_w();
}

inline std::vector<double> reference_im2col(int batch, const kernels::window2d& w,
                                            const std::vector<float>& x) {
  std::vector<double> cols(columns_size(batch, w), -1.0);
  for_each_window_element(batch, w, [&](int b, int c, int oh, int ow, int i, int j, int ih, int iw) {
    cols[column_index(w, b, c, oh, ow, i, j)] = inside(w, ih, iw) ? x[image_index(w, b, c, ih, iw)] : 0.0;
  });
  return cols;
}

inline std::vector<double> reference_col2im(int batch, const kernels::window2d& w,
                                            const std::vector<float>& cols) {
  std::vector<double> x(image_size(batch, w), 0.0);
  for_each_window_element(batch, w, [&](int b, int c, int oh, int ow, int i, int j, int ih, int iw) {
    if (inside(w, ih, iw))
      x[image_index(w, b, c, ih, iw)] += cols[column_index(w, b, c, oh, ow, i, j)];
  });
  return x;
}

/// Max pooling: the first maximum in row-major window order, padding skipped.
inline void reference_max_pool(int batch, const kernels::window2d& w, const std::vector<float>& x,
                               std::vector<double>& y, std::vector<std::int32_t>& argmax) {
  y.assign(output_size(batch, w), -std::numeric_limits<double>::infinity());
  argmax.assign(y.size(), -1);
  for_each_window_element(batch, w, [&](int b, int c, int oh, int ow, int, int, int ih, int iw) {
    if (!inside(w, ih, iw))
      return;
    const auto out = output_index(w, b, c, oh, ow);
    const double value = x[image_index(w, b, c, ih, iw)];
    if (argmax[out] < 0 || value > y[out]) {
      y[out] = value;
      argmax[out] = ih * w.width + iw;
    }
  });
}

inline std::vector<double> reference_avg_pool(int batch, const kernels::window2d& w,
                                              const std::vector<float>& x) {
  std::vector<double> y(output_size(batch, w), 0.0);
  for_each_window_element(batch, w, [&](int b, int c, int oh, int ow, int, int, int ih, int iw) {
    if (inside(w, ih, iw))
      y[output_index(w, b, c, oh, ow)] +=
          x[image_index(w, b, c, ih, iw)] / (static_cast<double>(w.kernel_h) * w.kernel_w);
  });
  return y;
}

inline std::vector<double> reference_avg_pool_backward(int batch, const kernels::window2d& w,
                                                       const std::vector<float>& dy) {
  std::vector<double> dx(image_size(batch, w), 0.0);
  for_each_window_element(batch, w, [&](int b, int c, int oh, int ow, int, int, int ih, int iw) {
    if (inside(w, ih, iw))
      dx[image_index(w, b, c, ih, iw)] +=
          dy[output_index(w, b, c, oh, ow)] / (static_cast<double>(w.kernel_h) * w.kernel_w);
  });
  return dx;
}

}  // namespace troupe::test
