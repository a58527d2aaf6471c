// dropout_test.cpp: the CPU dropout against its definition: the kept fraction, the scale,
// masks keyed by (key, global row) so that a slice of the batch drawn alone gets the same
// mask as inside the whole, and the backward as the same call on dy.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "kernels/dropout_hash.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("dropout keeps about 1 - p of the values, scaled, and p = 0 is the identity") {
  auto dropout = kernels::lookup<kernels::ops::dropout>(kernels::device_type::cpu);
  const std::int64_t rows = 64, cols = 500;
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = 1.0f + static_cast<float>(i % 7);  // never 0, so a 0 in y is a dropped value
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    CAPTURE(p);
    std::vector<float> y(x.size());
    dropout(test::cpu_context(), rows, cols, p, 1234, 0, x.data(), y.data());
    std::int64_t kept = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (y[i] == 0.0f)
        continue;
      ++kept;
      CHECK(y[i] == x[i] * (1.0f / (1.0f - p)));  // the same float operations: exact
    }
    // 32000 Bernoulli draws: the kept count's standard deviation is at most
    // sqrt(32000 / 4) ~ 90; allow 5 of them.
    const double expected = (1.0 - p) * static_cast<double>(x.size());
    CHECK(std::fabs(static_cast<double>(kept) - expected) <= 450.0);
    if (p == 0.0f)
      CHECK(y == x);
  }
}

TEST_CASE("dropout masks follow the key and the global row, not the call") {
  auto dropout = kernels::lookup<kernels::ops::dropout>(kernels::device_type::cpu);
  const std::int64_t rows = 12, cols = 33;
  const auto x = test::random_floats(rows * cols, 7);
  std::vector<float> whole(x.size()), again(x.size()), other_key(x.size());
  dropout(test::cpu_context(), rows, cols, 0.4f, 99, 0, x.data(), whole.data());
  dropout(test::cpu_context(), rows, cols, 0.4f, 99, 0, x.data(), again.data());
  CHECK(whole == again);
  dropout(test::cpu_context(), rows, cols, 0.4f, 100, 0, x.data(), other_key.data());
  CHECK(whole != other_key);
  // Rows 4..9 drawn alone (first_row = 4), as a micro-batch of a replica would: the same
  // values as rows 4..9 of the whole batch.
  std::vector<float> slice(6 * cols);
  dropout(test::cpu_context(), 6, cols, 0.4f, 99, 4, x.data() + 4 * cols, slice.data());
  CHECK(slice == std::vector<float>(whole.begin() + 4 * cols, whole.begin() + 10 * cols));
  // Backward is the same call on dy: dx is dy where kept (scaled), 0 where dropped.
  const auto dy = test::random_floats(x.size(), 8);
  std::vector<float> dx(x.size());
  dropout(test::cpu_context(), rows, cols, 0.4f, 99, 0, dy.data(), dx.data());
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK((dx[i] == 0.0f) == (whole[i] == 0.0f || dy[i] == 0.0f));
  // In place.
  auto in_place = x;
  dropout(test::cpu_context(), rows, cols, 0.4f, 99, 0, in_place.data(), in_place.data());
  CHECK(in_place == whole);
}
