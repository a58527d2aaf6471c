// max_pool2d_test.cpp: the CPU max pooling forward (values and argmax) and backward against
// naive references on every geometry of window_reference.hpp, plus ties and NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"
#include "window_reference.hpp"

using namespace troupe;

TEST_CASE("max_pool2d_forward takes each window's first maximum and its index") {
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::max_pool2d_backward>(kernels::device_type::cpu);
  std::uint32_t seed = 80;
  for (auto w : test::window_geometries()) {
    // Pooling pads at most half the kernel (as torch); clamp the shared geometries.
    w.pad_h = std::min(w.pad_h, w.kernel_h / 2);
    w.pad_w = std::min(w.pad_w, w.kernel_w / 2);
    const int batch = 2;
    CAPTURE(w.kernel_h);
    CAPTURE(w.stride_h);
    CAPTURE(w.pad_h);
    const auto x = test::random_floats(test::image_size(batch, w), ++seed);
    std::vector<float> y(test::output_size(batch, w), std::numeric_limits<float>::quiet_NaN());
    std::vector<std::int32_t> argmax(y.size(), -7);
    forward(test::cpu_context(), batch, w, x.data(), y.data(), argmax.data());
    std::vector<double> want;
    std::vector<std::int32_t> want_argmax;
    test::reference_max_pool(batch, w, x, want, want_argmax);
    TROUPE_CHECK_CLOSE(y, want, 0.0, 0.0);  // a selection: exact
    CHECK(argmax == want_argmax);

    // Backward: dx gets the sum of dy over the outputs that chose it.
    const auto dy = test::random_floats(y.size(), ++seed);
    std::vector<double> want_dx(test::image_size(batch, w), 0.0);
    const auto out_plane = static_cast<std::int64_t>(w.out_h()) * w.out_w();
    for (std::size_t o = 0; o < dy.size(); ++o)
      want_dx[(o / out_plane) * w.height * w.width + want_argmax[o]] += dy[o];
    std::vector<float> dx(want_dx.size(), std::numeric_limits<float>::quiet_NaN());
    backward(test::cpu_context(), batch, w, dy.data(), argmax.data(), dx.data());
    // At most KH KW windows choose one pixel: that many float additions of terms in [-1, 1).
    TROUPE_CHECK_CLOSE(dx, want_dx, w.kernel_h * w.kernel_w * 6e-8 * w.kernel_h * w.kernel_w, 0.0);
  }
}

TEST_CASE("max_pool2d_forward breaks ties by the first index and lets NaN win") {
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  const auto w = test::make_window2d(1, 2, 4, 2, 2, 0);  // two 2x2 windows
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{1, 3, 5, nan,  //
                             3, 2, 5, 9};
  std::vector<float> y(2);
  std::vector<std::int32_t> argmax(2);
  forward(test::cpu_context(), 1, w, x.data(), y.data(), argmax.data());
  CHECK(y[0] == 3.0f);
  CHECK(argmax[0] == 1);  // 3 at (0, 1) before 3 at (1, 0)
  CHECK(std::isnan(y[1]));
  CHECK(argmax[1] == 3);
}

TEST_CASE("max_pool2d_forward's 2x2 path keeps the first maximum and NaN's win, as a scan does") {
  // Values from {-1, 0, 1, NaN}: most windows hold ties, many a NaN or two. Even sides take
  // Note [2x2 pooling in two passes]; odd ones the sweeps; both against a row-major scan.
  // Output rows of 14, 7, 17 (a vector and one), 32 (two vectors) and 1.
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::uint32_t seed = 7;
  for (const auto& sides :
       std::vector<std::pair<int, int>>{{28, 28}, {14, 14}, {4, 34}, {4, 64}, {2, 2}, {7, 6}, {6, 9}}) {
    const int height = sides.first, width = sides.second;
    CAPTURE(height);
    CAPTURE(width);
    const int batch = 3, channels = 2;
    const auto w = test::make_window2d(channels, height, width, 2, 2, 0);
    std::vector<float> x(static_cast<std::size_t>(batch * channels * height * width));
    for (auto& v : x) {
      seed = seed * 1664525u + 1013904223u;
      const int pick = static_cast<int>(seed >> 29) % 5;
      v = pick == 4 ? nan : static_cast<float>(pick % 3 - 1);
    }
    std::vector<float> y(test::output_size(batch, w));
    std::vector<std::int32_t> argmax(y.size(), -1);
    forward(test::cpu_context(), batch, w, x.data(), y.data(), argmax.data());
    int wrong = 0;
    for (int p = 0; p < batch * channels; ++p)
      for (int oh = 0; oh < w.out_h(); ++oh)
        for (int ow = 0; ow < w.out_w(); ++ow) {
          float best = 0;
          int at = -1;
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
              const int index = (2 * oh + i) * width + 2 * ow + j;
              const float v = x[static_cast<std::size_t>(p * height * width + index)];
              if (at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                best = v;
                at = index;
              }
            }
          const auto o = static_cast<std::size_t>((p * w.out_h() + oh) * w.out_w() + ow);
          const bool same = std::isnan(best) ? std::isnan(y[o]) : y[o] == best;
          wrong += same && argmax[o] == at ? 0 : 1;
        }
    CHECK(wrong == 0);
  }
}

TEST_CASE("max_pool2d_forward refuses padding that leaves a window empty") {
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  const auto w = test::make_window2d(1, 4, 4, 2, 1, 2);
  std::vector<float> x(16), y(64);
  std::vector<std::int32_t> argmax(64);
  CHECK_THROWS_WITH_AS(forward(test::cpu_context(), 1, w, x.data(), y.data(), argmax.data()),
                       doctest::Contains("leaves windows with no pixel"), check_failure);
}

TEST_CASE(
    "max_pool2d_backward on 2x2 windows gives each pixel the dy of the outputs that chose it") {
  // Against the scatter's definition, with a NaN-filled dx (every pixel written), on the
  // argmax of values full of ties, even sides and odd.
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::max_pool2d_backward>(kernels::device_type::cpu);
  std::uint32_t seed = 17;
  for (const auto& sides :
       std::vector<std::pair<int, int>>{{28, 28}, {14, 14}, {4, 34}, {2, 2}, {7, 6}}) {
    const int height = sides.first, width = sides.second, batch = 2, channels = 3;
    CAPTURE(height);
    CAPTURE(width);
    const auto w = test::make_window2d(channels, height, width, 2, 2, 0);
    std::vector<float> x(static_cast<std::size_t>(batch * channels * height * width));
    for (auto& v : x) {
      seed = seed * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<int>(seed >> 29) % 3 - 1);
    }
    std::vector<float> y(test::output_size(batch, w));
    std::vector<std::int32_t> argmax(y.size());
    forward(test::cpu_context(), batch, w, x.data(), y.data(), argmax.data());
    const auto dy = test::random_floats(y.size(), ++seed);
    std::vector<float> want(x.size(), 0.0f);
    const auto out_plane = static_cast<std::size_t>(w.out_h() * w.out_w());
    for (std::size_t o = 0; o < dy.size(); ++o)
      want[(o / out_plane) * static_cast<std::size_t>(height * width) + argmax[o]] += dy[o];
    std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
    backward(test::cpu_context(), batch, w, dy.data(), argmax.data(), dx.data());
    CHECK(test::same_bits(dx, want));  // each pixel gets one dy or nothing: exact
  }
}

TEST_CASE("max pooling over bf16 is the f32 pooling of the widened values, in slices of planes") {
  // Note [max pooling in bf16]: the same maxima (bit for bit), the same argmax, and each
  // pixel's dy sum rounded once, by the slices where windows overlap and directly where not. Every
  // geometry of window_reference.hpp; 2x2 windows on 28 x 28 planes over 3 slices of 20; a plane of
  // 130 x 130 (more than a slice alone).
  auto forward = kernels::lookup<kernels::ops::max_pool2d_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::max_pool2d_backward>(kernels::device_type::cpu);
  auto forward16 =
      kernels::lookup<kernels::ops::max_pool2d_forward_bf16>(kernels::device_type::cpu);
  auto backward16 =
      kernels::lookup<kernels::ops::max_pool2d_backward_bf16>(kernels::device_type::cpu);
  auto round = kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu);
  auto geometries = test::window_geometries();
  geometries.push_back(test::make_window2d(16, 28, 28, 2, 2, 0));
  geometries.push_back(test::make_window2d(1, 130, 130, 3, 2, 1));
  std::uint32_t seed = 300;
  for (auto w : geometries) {
    w.pad_h = std::min(w.pad_h, w.kernel_h / 2);
    w.pad_w = std::min(w.pad_w, w.kernel_w / 2);
    const int batch = 3;
    CAPTURE(w.channels);
    CAPTURE(w.height);
    CAPTURE(w.kernel_h);
    CAPTURE(w.stride_h);
    CAPTURE(w.pad_h);
    auto noise = test::random_floats(test::image_size(batch, w), ++seed);
    noise[noise.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::uint16_t> x16(noise.size());
    std::vector<float> x(noise.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      x16[i] = test::top_half(noise[i]);
      x[i] = test::widened(x16[i]);
    }
    const auto outputs = static_cast<std::size_t>(test::output_size(batch, w));
    std::vector<float> y(outputs);
    std::vector<std::int32_t> argmax(outputs), argmax16(outputs, -7);
    forward(test::cpu_context(), batch, w, x.data(), y.data(), argmax.data());
    std::vector<std::uint16_t> y16(outputs, 0x1234), want(outputs);
    forward16(test::cpu_context(), batch, w, x16.data(), y16.data(), argmax16.data());
    for (std::size_t o = 0; o < outputs; ++o)
      want[o] = test::top_half(y[o]);
    CHECK(y16 == want);
    CHECK(argmax16 == argmax);

    std::vector<std::uint16_t> dy16(outputs);
    std::vector<float> dy(outputs);
    const auto dy_noise = test::random_floats(outputs, ++seed);
    for (std::size_t o = 0; o < outputs; ++o)
      dy16[o] = test::top_half(dy_noise[o]);
    // -0, a NaN without its quiet bit, infinity, a denormal: as float(0) + dy rounds them.
    const std::uint16_t specials[] = {0x8000, 0x7F81, 0xFF80, 0x0001};
    for (std::size_t k = 0; k < std::size(specials) && k < outputs; ++k)
      dy16[outputs - 1 - k] = specials[k];
    for (std::size_t o = 0; o < outputs; ++o)
      dy[o] = test::widened(dy16[o]);
    std::vector<float> dx(x.size());
    backward(test::cpu_context(), batch, w, dy.data(), argmax.data(), dx.data());
    std::vector<std::uint16_t> want_dx(x.size()), dx16(x.size(), 0x1234);
    round(test::cpu_context(), static_cast<std::int64_t>(dx.size()), dx.data(), want_dx.data());
    backward16(test::cpu_context(), batch, w, dy16.data(), argmax.data(), dx16.data());
    CHECK(dx16 == want_dx);
  }
}
