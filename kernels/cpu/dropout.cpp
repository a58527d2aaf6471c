// dropout.cpp: keyed dropout on the CPU (the mask rule is in include/troupe/ops.hpp).
//
// The mask is drawn per element from its global index, so a sample gets the same mask in a
// micro-batch of 4 as in the whole batch, on any replica (DESIGN.md "Equivalence").
#include <cstdint>

#include "kernels/dropout_hash.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void dropout(const context&, std::int64_t rows, std::int64_t cols, float p, std::uint64_t key,
             std::int64_t first_row, const float* x, float* y) {
  TROUPE_CHECK(rows >= 0 && cols >= 0 && first_row >= 0,
               "dropout sizes: rows=" << rows << " cols=" << cols << " first_row=" << first_row);
  TROUPE_CHECK(p >= 0.0f && p < 1.0f, "dropout p must be in [0, 1), got " << p);
  const std::uint32_t threshold = dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const std::int64_t n = rows * cols;
  const auto first = static_cast<std::uint64_t>(first_row) * static_cast<std::uint64_t>(cols);
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = dropout_keeps(key, first + static_cast<std::uint64_t>(i), threshold) ? x[i] * scale
                                                                                 : 0.0f;
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::dropout, device_type::cpu, dropout);

}  // namespace troupe::kernels::cpu
