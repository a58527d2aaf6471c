// bf16_test.cpp: ops::to_bf16 and ops::from_bf16 against a reference that rounds in double
// precision, over the whole float range; ops::gemm_bf16 against a double-precision product
// of the same bf16 values, every transpose case, padded rows, beta 0 and 1.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

namespace {

using namespace troupe;
using kernels::device_type;
using kernels::lookup;
namespace ops = kernels::ops;

using test::from_bits;

using test::bits_of;

float widen(std::uint16_t h) { return from_bits(static_cast<std::uint32_t>(h) << 16); }

// The nearest bfloat16 by comparing distances in double: of the two bf16 values around x
// (x's top 16 bits, and the next one away from zero) the nearer; at a tie, the one whose
// last bit is even. Past the largest finite bf16, by the same rule against 2^128 (IEEE's
// rounding to infinity). NaN: any NaN.
std::uint16_t reference_round(float x) {
  const std::uint32_t bits = bits_of(x);
  const std::uint16_t down = static_cast<std::uint16_t>(bits >> 16);
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);
  if ((bits & 0xFFFFu) == 0)
    return down;
  const double value = x;
  const double low = widen(down);
  // Above the largest finite, `up` is infinity: its distance is measured to 2^128.
  const double high = (up & 0x7F80u) == 0x7F80u ? std::copysign(std::ldexp(1.0, 128), value)
                                                 : static_cast<double>(widen(up));
  const double to_low = std::fabs(value - low), to_high = std::fabs(high - value);
  if (to_low < to_high)
    return down;
  if (to_high < to_low)
    return up;
  return (down & 1u) == 0 ? down : up;
}

std::vector<std::uint16_t> rounded(const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  lookup<ops::to_bf16>(device_type::cpu)(test::cpu_context(), std::int64_t(x.size()), x.data(),
                                          out.data());
  return out;
}

}  // namespace

TEST_CASE("to_bf16 rounds every float to the nearest bfloat16, ties to even") {
  std::vector<float> x;
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099)
    x.push_back(from_bits(static_cast<std::uint32_t>(bits)));
  // Ties both ways, the largest finite and its neighbours, zeros, denormals, infinities.
  for (std::uint32_t bits : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x7F7F7FFFu, 0x7F7F8000u,
                             0x7F7FFFFFu, 0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u,
                             0x00018000u, 0x007FFFFFu, 0x7F800000u, 0xFF800000u})
    x.push_back(from_bits(bits));
  const auto got = rounded(x);
  int wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      wrong += std::isnan(widen(got[i])) ? 0 : 1;
      continue;
    }
    if (got[i] != reference_round(x[i])) {
      if (wrong == 0)
        MESSAGE("bits " << std::hex << bits_of(x[i]) << ": got " << got[i] << ", want "
                        << reference_round(x[i]));
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  CHECK(x.size() > 1000000);
}

TEST_CASE("to_bf16 keeps NaN a NaN of its sign and infinities infinite") {
  const std::vector<float> x{std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::quiet_NaN(),
                             from_bits(0x7F800001u),  // a signalling NaN whose payload rounds away
                             from_bits(0x7FFFFFFFu), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
  const auto got = rounded(x);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(std::isnan(widen(got[i])));
    CHECK(std::signbit(widen(got[i])) == std::signbit(x[i]));
  }
  CHECK(widen(got[4]) == std::numeric_limits<float>::infinity());
  CHECK(widen(got[5]) == -std::numeric_limits<float>::infinity());
}

TEST_CASE("from_bf16 widens exactly, and a round trip of a bfloat16 value is the identity") {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t h = 0; h < 65536; ++h)
    all[h] = static_cast<std::uint16_t>(h);
  std::vector<float> wide(all.size());
  lookup<ops::from_bf16>(device_type::cpu)(test::cpu_context(), std::int64_t(all.size()),
                                            all.data(), wide.data());
  int wrong = 0;
  for (std::uint32_t h = 0; h < 65536; ++h)
    wrong += bits_of(wide[h]) == (h << 16) ? 0 : 1;
  CHECK(wrong == 0);
  const auto back = rounded(wide);
  for (std::uint32_t h = 0; h < 65536; ++h)
    if (!std::isnan(wide[h]))
      wrong += back[h] == all[h] ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE("add_to_bf16 rounds float(x) + y as to_bf16 rounds it, and keeps it in y if asked") {
  // x: bf16 values of every exponent; y: floats of many sizes, ties and specials among them.
  const std::size_t n = 200000;
  std::vector<std::uint16_t> x(n);
  std::vector<float> y(n);
  std::uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<std::uint16_t>(next() >> 16);
    y[i] = from_bits(next());
  }
  x[0] = 0x3F80u, y[0] = from_bits(0x00008000u);  // 1 + a denormal: rounds to 1
  x[1] = 0x3F80u, y[1] = std::ldexp(1.0f, -8);    // 1 + half an ulp of bf16: a tie, to even
  x[2] = 0x7F80u, y[2] = 1.0f;                    // infinity stays
  x[3] = 0x7F7Fu, y[3] = 3.0e38f;                 // past bf16's largest: infinity
  x[4] = 0x7FC0u, y[4] = 1.0f;                    // NaN stays NaN
  const auto add = lookup<ops::add_to_bf16>(device_type::cpu);
  for (const bool keep : {false, true}) {
    CAPTURE(keep);
    auto mine = y;
    std::vector<std::uint16_t> z(n);
    add(test::cpu_context(), std::int64_t(n), x.data(), mine.data(), z.data(), keep);
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float sum = widen(x[i]) + y[i];
      const bool nan = std::isnan(sum);
      const bool z_right = nan ? std::isnan(widen(z[i])) : z[i] == reference_round(sum);
      const bool y_right = keep ? bits_of(mine[i]) == (static_cast<std::uint32_t>(z[i]) << 16)
                                : bits_of(mine[i]) == bits_of(y[i]);
      if (!(z_right && y_right) && wrong++ == 0)
        MESSAGE("element " << i << ": x " << std::hex << x[i] << ", y " << bits_of(y[i]) << ": z "
                           << z[i] << ", y after " << bits_of(mine[i]));
    }
    CHECK(wrong == 0);
    CHECK(z[0] == 0x3F80u);
    CHECK(z[1] == 0x3F80u);
    CHECK(z[2] == 0x7F80u);
    CHECK(z[3] == 0x7F80u);
  }
}

TEST_CASE("gemm_bf16 matches a double-precision product of its bf16 operands") {
  // The operands are bf16 values; each product of two is exact in FP32 (8 + 8 significant
  // bits), so what is left is FP32 accumulation in some order: within (k + 2) u sum |a| |b|
  // of the exact value (Higham 3.1, +2 for alpha and beta), as the f32 gemm's test.
  const auto gemm = lookup<ops::gemm_bf16>(device_type::cpu);
  const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 33, 17}, {130, 10, 128}, {3, 200, 1}};
  std::uint32_t seed = 11;
  for (const auto& shape : shapes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (float beta : {0.0f, 1.0f}) {
        const int m = shape[0], n = shape[1], k = shape[2];
        const bool ta = (transposes & 1) != 0, tb = (transposes & 2) != 0;
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        const int a_rows = ta ? k : m, a_cols = ta ? m : k;
        const int b_rows = tb ? n : k, b_cols = tb ? k : n;
        const int lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
        const auto a = rounded(test::random_floats(std::size_t(a_rows) * lda, seed++));
        const auto b = rounded(test::random_floats(std::size_t(b_rows) * ldb, seed++));
        auto c = test::random_floats(std::size_t(m) * ldc, seed++);
        const auto before = c;
        gemm(test::cpu_context(), ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta,
             c.data(), ldc);
        int wrong = 0;
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double exact = 0, magnitude = 0;
            for (int l = 0; l < k; ++l) {
              const double p = double(widen(ta ? a[l * lda + i] : a[i * lda + l])) *
                               widen(tb ? b[j * ldb + l] : b[l * ldb + j]);
              exact += p;
              magnitude += std::fabs(p);
            }
            const double c0 = before[i * ldc + j];
            const double want = 0.5 * exact + beta * c0;
            const double allowed =
                (k + 2) * (std::numeric_limits<float>::epsilon() / 2) *
                    (0.5 * magnitude + std::fabs(beta * c0)) + 1e-30;
            wrong += std::fabs(c[i * ldc + j] - want) <= allowed ? 0 : 1;
          }
          for (int j = n; j < ldc; ++j)  // the padding is left alone
            wrong += c[i * ldc + j] == before[i * ldc + j] ? 0 : 1;
        }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("gemm_bf16 with k = 0 leaves beta * C, and rejects a narrow leading dimension") {
  const auto gemm = lookup<ops::gemm_bf16>(device_type::cpu);
  std::vector<float> c{1, 2, 3, 4};
  gemm(test::cpu_context(), false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 0.5f, c.data(),
       2);
  CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
  std::vector<std::uint16_t> a(12), b(12);
  CHECK_THROWS_AS(gemm(test::cpu_context(), false, false, 3, 3, 4, 1.0f, a.data(), 3, b.data(),
                       3, 0.0f, c.data(), 3),
                  check_failure);
}
