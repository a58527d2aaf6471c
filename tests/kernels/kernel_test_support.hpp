// kernel_test_support.hpp: small helpers the kernel tests share: seeded random buffers and
// an element-by-element comparison that reports the worst element.
//
// Header-only and test-only; it holds no references (each test writes its own naive
// double-precision reference next to the check, so the arithmetic is in view).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

namespace troupe::test {

/// Whether `a` and `b` hold the same floats, bit for bit. (Empty ones: no memcmp, whose
/// pointers must not be null even for 0 bytes, as UBSan holds it to.)
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// The float whose IEEE bits are `bits`.
inline float from_bits(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// The IEEE bits of `f`.
inline std::uint32_t bits_of(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

/// The top half of `f`'s bits: its bfloat16 pattern, when `f` is a bf16 value.
inline std::uint16_t top_half(float f) { return static_cast<std::uint16_t>(bits_of(f) >> 16); }

/// The float a bfloat16 pattern stands for (exact).
inline float widened(std::uint16_t h) { return from_bits(static_cast<std::uint32_t>(h) << 16); }

/// `count` floats uniform in [low, high), the same for the same seed on every machine
/// (mt19937 is specified exactly; we map its raw output ourselves instead of trusting the
/// implementation-defined uniform_real_distribution).
inline std::vector<float> random_floats(std::size_t count, std::uint32_t seed,
                                        float low = -1.0f, float high = 1.0f) {
  std::mt19937 engine{seed};
  std::vector<float> out(count);
  for (auto& x : out) {
    const double unit = static_cast<double>(engine()) / 4294967296.0;  // [0, 1)
    x = static_cast<float>(low + (high - low) * unit);
  }
  return out;
}

/// `count` labels uniform in [0, classes).
inline std::vector<std::int32_t> random_labels(std::size_t count, int classes,
                                               std::uint32_t seed) {
  std::mt19937 engine{seed};
  std::vector<std::int32_t> out(count);
  for (auto& label : out)
    label = static_cast<std::int32_t>(engine() % static_cast<std::uint32_t>(classes));
  return out;
}

/// The worst element of `got` against `want` under |got - want| <= atol + rtol * |want|.
struct comparison {
  bool ok = true;
  std::size_t worst_index = 0;
  double worst_excess = -1.0;  // error / allowed; <= 1 passes
  double got = 0.0, want = 0.0;

  std::string describe() const {
    return "worst element " + std::to_string(worst_index) + ": got " + std::to_string(got) +
           ", want " + std::to_string(want) + " (error is " +
           std::to_string(worst_excess) + " x the tolerance)";
  }
};

template <class Got, class Want>
comparison compare(const Got& got, const Want& want, double atol, double rtol) {
  comparison result;
  if (got.size() != want.size()) {
    result.ok = false;
    return result;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    const double allowed = atol + rtol * std::abs(w);
    const double excess = std::isfinite(g) ? std::abs(g - w) / allowed : HUGE_VAL;
    if (excess > result.worst_excess) {
      result.worst_excess = excess;
      result.worst_index = i;
      result.got = g;
      result.want = w;
    }
  }
  result.ok = result.worst_excess <= 1.0;
  return result;
}

/// A CPU kernel ignores its context; one shared empty context serves every test.
inline const kernels::context& cpu_context() {
  static const kernels::context context{};
  return context;
}

/// The whole text of a file of the source tree (`relative` to its root).
inline std::string source_text(const std::string& relative) {
  std::ifstream file{std::string{TROUPE_SOURCE_DIR} + "/" + relative};
  if (!file)
    throw std::runtime_error("cannot read " + relative + " under " TROUPE_SOURCE_DIR);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// Every op include/troupe/ops.hpp declares, by name, in declaration order: the one list of ops
/// that the dispatch table, the kernels and the tests all go by. Tests that enumerate ops
/// iterate this, so a new op cannot slip past them. (The dispatch table itself cannot be
/// listed: it has no enumeration call, only lookups by name. ops_coverage_test.cpp checks
/// this list against the table and against every registration line.)
/// An op is a struct with `static constexpr const char* name = "...";`, or a pair
/// X_forward / X_backward from TROUPE_ACTIVATION_OP(X);.
inline std::vector<std::string> declared_ops() {
  static const std::vector<std::string> ops = [] {
    const auto text = source_text("include/troupe/ops.hpp");
    const std::regex declaration{
        R"re(static constexpr const char\* name = "([a-z0-9_]+)";|\bTROUPE_ACTIVATION_OP\(([a-z0-9_]+)\);)re"};
    std::vector<std::string> out;
    for (std::sregex_iterator it{text.begin(), text.end(), declaration}, end; it != end; ++it) {
      if ((*it)[1].matched) {
        out.push_back((*it)[1].str());
      } else {
        out.push_back((*it)[2].str() + "_forward");
        out.push_back((*it)[2].str() + "_backward");
      }
    }
    return out;
  }();
  return ops;
}

/// Whether ops.hpp declares `op` CPU only (kernels::ops::cpu_only_ops).
inline bool is_cpu_only_op(const std::string& op) {
  for (const char* cpu_only : kernels::ops::cpu_only_ops)
    if (op == cpu_only)
      return true;
  return false;
}

}  // namespace troupe::test

/// CHECKs that `got` matches `want` element by element and prints the worst element if not.
#define TROUPE_CHECK_CLOSE(got, want, atol, rtol)                                    \
  do {                                                                               \
    const auto troupe_comparison_ = ::troupe::test::compare((got), (want), (atol), (rtol)); \
    INFO(troupe_comparison_.describe());                                             \
    CHECK(troupe_comparison_.ok);                                                    \
  } while (false)

namespace troupe::test {

/// The forward test every elementwise activation shares: for n in {1, 7, 1000, 4099}, the
/// CPU kernel `Op` on n floats uniform in [low, high) (seeded `seed + n`) matches the
/// double `reference` within atol + rtol * |want|, and run in place gives bit for bit what
/// it gave out of place. Each caller says next to its call why its tolerance holds.
template <class Op, class Reference>
void check_elementwise_forward(Reference reference, std::uint32_t seed, float low, float high,
                               double atol, double rtol) {
  auto forward = kernels::lookup<Op>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    CAPTURE(n);
    const auto x = random_floats(n, static_cast<std::uint32_t>(seed + n), low, high);
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = reference(x[i]);
    std::vector<float> y(n);
    forward(cpu_context(), n, x.data(), y.data());
    TROUPE_CHECK_CLOSE(y, want, atol, rtol);
    auto in_place = x;
    forward(cpu_context(), n, in_place.data(), in_place.data());
    CHECK(in_place == y);
  }
}

}  // namespace troupe::test
