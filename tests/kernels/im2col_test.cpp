// im2col_test.cpp: the CPU im2col and col2im against naive double references, on every
// geometry of window_reference.hpp, and col2im as im2col's adjoint (<im2col x, c> =
// <x, col2im c>, which is what makes conv2d's backward the transpose of its forward).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"
#include "window_reference.hpp"

using namespace troupe;

TEST_CASE("im2col copies every window element and zeroes the padding") {
  auto im2col = kernels::lookup<kernels::ops::im2col>(kernels::device_type::cpu);
  std::uint32_t seed = 40;
  for (const auto& w : test::window_geometries()) {
    for (int batch : {1, 3}) {
      CAPTURE(w.channels);
      CAPTURE(w.height);
      CAPTURE(w.width);
      CAPTURE(w.kernel_h);
      CAPTURE(w.stride_h);
      CAPTURE(w.pad_h);
      CAPTURE(batch);
      const auto x = test::random_floats(test::image_size(batch, w), ++seed);
      // NaN in the output buffer: every element must be written, padding included.
      std::vector<float> cols(test::columns_size(batch, w), std::numeric_limits<float>::quiet_NaN());
      im2col(test::cpu_context(), batch, w, x.data(), cols.data());
      // A copy: exact.
      TROUPE_CHECK_CLOSE(cols, test::reference_im2col(batch, w, x), 0.0, 0.0);
    }
  }
}

TEST_CASE("im2col_bf16 unfolds bf16 images as im2col then rounding does, bit for bit") {
  auto im2col = kernels::lookup<kernels::ops::im2col>(kernels::device_type::cpu);
  auto im2col_bf16 = kernels::lookup<kernels::ops::im2col_bf16>(kernels::device_type::cpu);
  auto to_bf16 = kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu);
  std::uint32_t seed = 140;
  for (const auto& w : test::window_geometries()) {
    for (int batch : {1, 3}) {
      CAPTURE(w.height);
      CAPTURE(w.kernel_h);
      CAPTURE(w.stride_h);
      CAPTURE(w.pad_h);
      CAPTURE(batch);
      const auto x = test::random_floats(test::image_size(batch, w), ++seed);
      std::vector<float> cols(test::columns_size(batch, w));
      im2col(test::cpu_context(), batch, w, x.data(), cols.data());
      std::vector<std::uint16_t> want(cols.size());
      to_bf16(test::cpu_context(), std::int64_t(cols.size()), cols.data(), want.data());
      std::vector<std::uint16_t> x_bits(x.size());
      to_bf16(test::cpu_context(), std::int64_t(x.size()), x.data(), x_bits.data());
      // 0xFFFF (a NaN) in the output: every element must be written, padding included.
      std::vector<std::uint16_t> got(cols.size(), 0xFFFFu);
      im2col_bf16(test::cpu_context(), batch, w, x_bits.data(), got.data());
      CHECK(got == want);
    }
  }
  CHECK_THROWS_WITH_AS(
      im2col_bf16(test::cpu_context(), -1, test::window_geometries().front(), nullptr, nullptr),
      doctest::Contains("im2col_bf16"), check_failure);
}

TEST_CASE("col2im sums every column entry into its pixel and is im2col's adjoint") {
  auto im2col = kernels::lookup<kernels::ops::im2col>(kernels::device_type::cpu);
  auto col2im = kernels::lookup<kernels::ops::col2im>(kernels::device_type::cpu);
  std::uint32_t seed = 60;
  for (const auto& w : test::window_geometries()) {
    const int batch = 2;
    CAPTURE(w.kernel_h);
    CAPTURE(w.stride_h);
    CAPTURE(w.pad_h);
    const auto cols = test::random_floats(test::columns_size(batch, w), ++seed);
    std::vector<float> x(test::image_size(batch, w), std::numeric_limits<float>::quiet_NaN());
    col2im(test::cpu_context(), batch, w, cols.data(), x.data());
    // A pixel sums at most KH KW terms in [-1, 1): float rounding <= KH KW * 2^-24 each.
    const double bound = w.kernel_h * w.kernel_w * w.kernel_h * w.kernel_w * 6e-8;
    TROUPE_CHECK_CLOSE(x, test::reference_col2im(batch, w, cols), bound, 0.0);

    const auto image = test::random_floats(test::image_size(batch, w), ++seed);
    std::vector<float> unfolded(cols.size());
    im2col(test::cpu_context(), batch, w, image.data(), unfolded.data());
    double left = 0, right = 0;
    for (std::size_t k = 0; k < cols.size(); ++k)
      left += static_cast<double>(unfolded[k]) * cols[k];
    for (std::size_t k = 0; k < image.size(); ++k)
      right += static_cast<double>(image[k]) * x[k];
    // Both sides in double from the same floats; only col2im's float sums differ.
    CHECK(std::fabs(left - right) <= 1e-4 * (1.0 + std::fabs(left)));
  }
}

TEST_CASE("im2col and col2im refuse a window that does not fit or a non-positive size") {
  auto im2col = kernels::lookup<kernels::ops::im2col>(kernels::device_type::cpu);
  std::vector<float> x(16), cols(256);
  const auto too_big = test::make_window2d(1, 4, 4, 7, 1, 1);
  CHECK_THROWS_WITH_AS(im2col(test::cpu_context(), 1, too_big, x.data(), cols.data()),
                       doctest::Contains("a 7x7 window does not fit a 4x4 image padded by 1x1"),
                       check_failure);
  auto zero_stride = test::make_window2d(1, 4, 4, 2, 1, 0);
  zero_stride.stride_w = 0;
  CHECK_THROWS_WITH_AS(im2col(test::cpu_context(), 1, zero_stride, x.data(), cols.data()),
                       doctest::Contains("sizes must be positive"), check_failure);
}
