// gemm_test.cpp: the CPU gemm against a naive double-precision product, for every transpose
// combination, padded leading dimensions, beta = 0 and beta = 1, through each library it
// may use ([run] cpu_gemm: OpenBLAS and oneDNN).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

namespace {

using namespace troupe;

struct gemm_case {
  bool transpose_a = false, transpose_b = false;
  int m = 1, n = 1, k = 1;
  float alpha = 1.0f, beta = 0.0f;
  int pad = 0;  // extra floats at the end of every stored row of A, B and C
};

// Runs one case through the dispatch table and checks every element of C (and that the
// padding of C is untouched). Returns the number of elements out of tolerance.
int run_gemm_case(const kernels::context& context, const gemm_case& g, std::uint32_t seed) {
  auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  // Stored shapes: A is (m, k), or (k, m) when transposed; likewise B.
  const int a_rows = g.transpose_a ? g.k : g.m, a_cols = g.transpose_a ? g.m : g.k;
  const int b_rows = g.transpose_b ? g.n : g.k, b_cols = g.transpose_b ? g.k : g.n;
  const int lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  auto a = test::random_floats(static_cast<std::size_t>(a_rows) * lda, seed);
  auto b = test::random_floats(static_cast<std::size_t>(b_rows) * ldb, seed + 1);
  auto c = test::random_floats(static_cast<std::size_t>(g.m) * ldc, seed + 2);
  const auto c_before = c;

  gemm(context, g.transpose_a, g.transpose_b, g.m, g.n, g.k, g.alpha, a.data(),
       lda, b.data(), ldb, g.beta, c.data(), ldc);

  auto a_at = [&](int i, int p) { return g.transpose_a ? a[p * lda + i] : a[i * lda + p]; };
  auto b_at = [&](int p, int j) { return g.transpose_b ? b[j * ldb + p] : b[p * ldb + j]; };
  int failures = 0;
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      for (int p = 0; p < g.k; ++p) {
        exact += static_cast<double>(a_at(i, p)) * b_at(p, j);
        magnitude += std::abs(static_cast<double>(a_at(i, p)) * b_at(p, j));
      }
      const double c0 = c_before[i * ldc + j];
      const double want = g.alpha * exact + g.beta * c0;
      // The classical bound for a float dot product of length k is gamma_k * sum|a||b|
      // with gamma_k ~ k * 2^-24, whatever the summation order (OpenBLAS blocks and uses
      // FMA); +2 covers the alpha and beta roundings.
      const double unit = std::numeric_limits<float>::epsilon() / 2;
      const double allowed =
          (g.k + 2) * unit * (std::abs(g.alpha) * magnitude + std::abs(g.beta * c0)) + 1e-30;
      const double got = c[i * ldc + j];
      if (!(std::abs(got - want) <= allowed)) {
        if (failures == 0)
          MESSAGE("C(" << i << ", " << j << ") = " << got << ", want " << want << " +- "
                       << allowed);
        ++failures;
      }
    }
    for (int j = g.n; j < ldc; ++j)
      failures += c[i * ldc + j] == c_before[i * ldc + j] ? 0 : 1;
  }
  return failures;
}

// A CPU context for each library the CPU gemm may use.
std::vector<kernels::context> gemm_contexts() {
  std::vector<kernels::context> contexts(2);
  contexts[0].gemm = kernels::cpu_gemm::openblas;
  contexts[1].gemm = kernels::cpu_gemm::onednn;
  return contexts;
}

const char* library_of(const kernels::context& context) {
  return context.gemm == kernels::cpu_gemm::onednn ? "onednn" : "openblas";
}

}  // namespace

TEST_CASE("gemm matches a double-precision reference for all four transpose cases") {
  // Non-square, a single row (batch 1), a single column, k = 1, and an MLP-sized shape.
  const int shapes[][3] = {{1, 1, 1},  {1, 10, 784}, {7, 5, 3},    {64, 33, 17},
                           {5, 1, 9},  {3, 200, 1},  {130, 10, 128}};
  std::uint32_t seed = 100;
  for (const auto& shape : shapes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (float beta : {0.0f, 1.0f}) {
        gemm_case g;
        g.m = shape[0];
        g.n = shape[1];
        g.k = shape[2];
        g.transpose_a = (transposes & 1) != 0;
        g.transpose_b = (transposes & 2) != 0;
        g.alpha = beta == 0.0f ? 1.0f : 0.5f;
        g.beta = beta;
        CAPTURE(g.m);
        CAPTURE(g.n);
        CAPTURE(g.k);
        CAPTURE(g.transpose_a);
        CAPTURE(g.transpose_b);
        CAPTURE(g.beta);
        for (const auto& context : gemm_contexts()) {
          CAPTURE(library_of(context));
          CHECK(run_gemm_case(context, g, seed += 3) == 0);
        }
      }
    }
  }
}

TEST_CASE("gemm honours leading dimensions larger than the logical row width") {
  for (int transposes = 0; transposes < 4; ++transposes) {
    for (float beta : {0.0f, 1.0f}) {
      gemm_case g;
      g.m = 9;
      g.n = 6;
      g.k = 13;
      g.transpose_a = (transposes & 1) != 0;
      g.transpose_b = (transposes & 2) != 0;
      g.beta = beta;
      g.pad = 5;
      CAPTURE(g.transpose_a);
      CAPTURE(g.transpose_b);
      CAPTURE(g.beta);
      for (const auto& context : gemm_contexts()) {
        CAPTURE(library_of(context));
        CHECK(run_gemm_case(context, g, 7 + transposes) == 0);
      }
    }
  }
}

TEST_CASE("gemm with beta = 0 overwrites C even where C holds NaN") {
  auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  const std::vector<float> a{1, 2, 3, 4};  // (2, 2)
  const std::vector<float> b{5, 6, 7, 8};  // (2, 2)
  for (const auto& context : gemm_contexts()) {
    CAPTURE(library_of(context));
    std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
    gemm(context, false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
    // [1 2; 3 4] [5 6; 7 8] = [19 22; 43 50], exact in float.
    CHECK(c == std::vector<float>{19, 22, 43, 50});
  }
}

TEST_CASE("gemm through oneDNN gives the same bits on every call of a shape") {
  // Its primitives are cached per thread and shape (kernels/cpu/onednn_matmul.cpp): the
  // cached one must compute what a fresh one does, with the pointers of each call, and a
  // resumed run relies on the same inputs giving the same bits.
  auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  kernels::context context;
  context.gemm = kernels::cpu_gemm::onednn;
  const auto a = test::random_floats(64 * 96, 1), b = test::random_floats(96 * 32, 2);
  std::vector<float> first(64 * 32), again(64 * 32), moved(64 * 32 + 7);
  gemm(context, false, false, 64, 32, 96, 1.0f, a.data(), 96, b.data(), 32, 0.0f,
       first.data(), 32);
  gemm(context, false, false, 64, 32, 96, 1.0f, a.data(), 96, b.data(), 32, 0.0f,
       again.data(), 32);
  CHECK(first == again);
  auto a_copy = a;  // other pointers, same shape: the cached primitive with new handles
  gemm(context, false, false, 64, 32, 96, 1.0f, a_copy.data(), 96, b.data(), 32, 0.0f,
       moved.data() + 7, 32);
  CHECK(std::equal(first.begin(), first.end(), moved.begin() + 7));
  // alpha and beta are part of the cached shape: 2 * A B + 1 * C doubles and adds.
  auto twice = first;
  gemm(context, false, false, 64, 32, 96, 2.0f, a.data(), 96, b.data(), 32, 1.0f,
       twice.data(), 32);
  for (std::size_t i = 0; i < first.size(); ++i)
    REQUIRE(std::abs(twice[i] - 3 * first[i]) <= 1e-5f * (1 + std::abs(first[i])));
}

TEST_CASE("gemm with k = 0 leaves beta * C") {
  auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  for (const auto& context : gemm_contexts()) {
    CAPTURE(library_of(context));
    std::vector<float> c{1, 2, 3, 4, 5, 6};
    gemm(context, false, false, 2, 3, 0, 1.0f, nullptr, 0, nullptr, 3, 0.5f, c.data(), 3);
    CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3});
    gemm(context, false, false, 2, 3, 0, 1.0f, nullptr, 0, nullptr, 3, 0.0f, c.data(), 3);
    CHECK(c == std::vector<float>(6, 0.0f));
  }
}

TEST_CASE("gemm rejects a leading dimension narrower than the stored row") {
  auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  std::vector<float> a(12), b(12), c(12);
  for (const auto& context : gemm_contexts()) {
    CAPTURE(library_of(context));
    // A is (3, 4) untransposed, so lda must be >= 4.
    CHECK_THROWS_AS(gemm(context, false, false, 3, 3, 4, 1.0f, a.data(), 3, b.data(), 3, 0.0f,
                         c.data(), 3),
                    check_failure);
  }
}
