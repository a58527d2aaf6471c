// embedding_test.cpp: the CPU embedding kernels against a naive lookup and scatter: embedding_rows
// with and without the position term, repeated tokens summing their gradients, beta 0
// overwriting and 1 accumulating, and ids that are not tokens refused.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

const std::int64_t vocab = 5, dim = 3, period = 4,
                   embedding_rows = 8;  // two samples of 4 positions

std::vector<float> table() {
  std::vector<float> t(vocab * dim);
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = 0.5f * static_cast<float>(i) - 3.0f;
  return t;
}

std::vector<float> positions() {
  std::vector<float> p(period * dim);
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = 0.25f * static_cast<float>(i * i % 7);
  return p;
}

const std::vector<float> ids = {0, 3, 3, 4, 1, 3, 0, 2};

}  // namespace

TEST_CASE("embedding_forward looks up each id's row and adds its position's") {
  auto forward = kernels::lookup<kernels::ops::embedding_forward>(kernels::device_type::cpu);
  const auto t = table(), p = positions();
  for (bool with_positions : {true, false}) {
    CAPTURE(with_positions);
    std::vector<float> y(embedding_rows * dim, -1.0f);
    forward(test::cpu_context(), embedding_rows, dim, vocab, period, ids.data(), t.data(),
            with_positions ? p.data() : nullptr, y.data());
    for (std::int64_t r = 0; r < embedding_rows; ++r)
      for (std::int64_t d = 0; d < dim; ++d) {
        const auto token = static_cast<std::int64_t>(ids[static_cast<std::size_t>(r)]);
        float want = t[static_cast<std::size_t>(token * dim + d)];
        if (with_positions)
          want += p[static_cast<std::size_t>((r % period) * dim + d)];
        CHECK(y[static_cast<std::size_t>(r * dim + d)] == want);
      }
  }
}

TEST_CASE("embedding_backward sums each token's and position's embedding_rows of dy") {
  auto backward = kernels::lookup<kernels::ops::embedding_backward>(kernels::device_type::cpu);
  std::vector<float> dy(embedding_rows * dim);
  for (std::size_t i = 0; i < dy.size(); ++i)
    dy[i] = 0.1f * static_cast<float>(i) - 1.0f;
  std::vector<float> want_table(vocab * dim, 0.0f), want_positions(period * dim, 0.0f);
  for (std::int64_t r = 0; r < embedding_rows; ++r)
    for (std::int64_t d = 0; d < dim; ++d) {
      const auto token = static_cast<std::int64_t>(ids[static_cast<std::size_t>(r)]);
      want_table[static_cast<std::size_t>(token * dim + d)] += dy[static_cast<std::size_t>(r * dim + d)];
      want_positions[static_cast<std::size_t>((r % period) * dim + d)] +=
          dy[static_cast<std::size_t>(r * dim + d)];
    }
  std::vector<float> dtable(vocab * dim, 7.0f), dpositions(period * dim, 7.0f);
  backward(test::cpu_context(), embedding_rows, dim, vocab, period, ids.data(), dy.data(), 0.0f,
           dtable.data(), dpositions.data());
  TROUPE_CHECK_CLOSE(dtable, want_table, 1e-6, 1e-6);
  TROUPE_CHECK_CLOSE(dpositions, want_positions, 1e-6, 1e-6);
  // Token 1's row is dy's row 4 alone; token 3 sums embedding_rows 1, 2 and 5.
  CHECK(dtable[1 * dim] == dy[4 * dim]);
  // beta = 1 adds a second pass to the first; no position table leaves it alone.
  backward(test::cpu_context(), embedding_rows, dim, vocab, period, ids.data(), dy.data(), 1.0f,
           dtable.data(), nullptr);
  for (auto& v : want_table)
    v *= 2;
  TROUPE_CHECK_CLOSE(dtable, want_table, 1e-6, 1e-6);
  TROUPE_CHECK_CLOSE(dpositions, want_positions, 1e-6, 1e-6);
}

TEST_CASE("embedding kernels refuse ids that are not tokens") {
  auto forward = kernels::lookup<kernels::ops::embedding_forward>(kernels::device_type::cpu);
  const auto t = table();
  std::vector<float> y(dim);
  for (float bad : {-1.0f, 5.0f, 1.5f}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(forward(test::cpu_context(), 1, dim, vocab, period, &bad, t.data(),
                              nullptr, y.data()),
                      doctest::Contains("is not an integer in [0, 5)"));
  }
}
