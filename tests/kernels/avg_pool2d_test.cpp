// avg_pool2d_test.cpp: the CPU average pooling forward and backward against naive double
// references on every geometry of window_reference.hpp (padding counted, as torch).
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"
#include "window_reference.hpp"

using namespace troupe;

TEST_CASE("avg_pool2d divides each window's sum by the kernel area, forward and backward") {
  auto forward = kernels::lookup<kernels::ops::avg_pool2d_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::avg_pool2d_backward>(kernels::device_type::cpu);
  std::uint32_t seed = 100;
  for (auto w : test::window_geometries()) {
    w.pad_h = std::min(w.pad_h, w.kernel_h / 2);
    w.pad_w = std::min(w.pad_w, w.kernel_w / 2);
    const int batch = 3;
    CAPTURE(w.kernel_h);
    CAPTURE(w.stride_h);
    CAPTURE(w.pad_h);
    const auto x = test::random_floats(test::image_size(batch, w), ++seed);
    std::vector<float> y(test::output_size(batch, w), std::numeric_limits<float>::quiet_NaN());
    forward(test::cpu_context(), batch, w, x.data(), y.data());
    // KH KW float additions of terms in [-1, 1), then one rounding of the scale.
    const double area = static_cast<double>(w.kernel_h) * w.kernel_w;
    TROUPE_CHECK_CLOSE(y, test::reference_avg_pool(batch, w, x), (area + 2) * 6e-8, 0.0);

    const auto dy = test::random_floats(y.size(), ++seed);
    std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
    backward(test::cpu_context(), batch, w, dy.data(), dx.data());
    TROUPE_CHECK_CLOSE(dx, test::reference_avg_pool_backward(batch, w, dy), (area + 2) * 6e-8,
                       0.0);
  }
}
