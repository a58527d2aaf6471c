// embedding.cpp: token (and position) embedding lookup and its gradients on the CPU
// (the contract is in include/troupe/ops.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

std::int64_t token_of(const float* ids, std::int64_t r, std::int64_t vocab) {
  const float id = ids[r];
  TROUPE_CHECK(id >= 0.0f && id < static_cast<float>(vocab) && std::floor(id) == id,
               "embedding: token id " << id << " of row " << r << " is not an integer in [0, "
                                      << vocab << ")");
  return static_cast<std::int64_t>(id);
}

void embedding_forward(const context&, std::int64_t rows, std::int64_t dim, std::int64_t vocab,
                       std::int64_t period, const float* ids, const float* table,
                       const float* positions, float* y) {
  TROUPE_CHECK(rows >= 0 && dim > 0 && vocab > 0 && period > 0,
               "embedding sizes: rows=" << rows << " dim=" << dim << " vocab=" << vocab
                                        << " period=" << period);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = table + token_of(ids, r, vocab) * dim;
    float* out = y + r * dim;
    if (positions == nullptr) {
      std::copy_n(row, dim, out);
      continue;
    }
    const float* position = positions + (r % period) * dim;
    for (std::int64_t d = 0; d < dim; ++d)
      out[d] = row[d] + position[d];
  }
}

void embedding_backward(const context&, std::int64_t rows, std::int64_t dim, std::int64_t vocab,
                        std::int64_t period, const float* ids, const float* dy, float beta,
                        float* dtable, float* dpositions) {
  TROUPE_CHECK(rows >= 0 && dim > 0 && vocab > 0 && period > 0,
               "embedding sizes: rows=" << rows << " dim=" << dim << " vocab=" << vocab
                                        << " period=" << period);
  if (beta == 0.0f) {
    std::fill_n(dtable, vocab * dim, 0.0f);
    if (dpositions != nullptr)
      std::fill_n(dpositions, period * dim, 0.0f);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = dtable + token_of(ids, r, vocab) * dim;
    const float* g = dy + r * dim;
    for (std::int64_t d = 0; d < dim; ++d)
      row[d] += g[d];
    if (dpositions != nullptr) {
      float* position = dpositions + (r % period) * dim;
      for (std::int64_t d = 0; d < dim; ++d)
        position[d] += g[d];
    }
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::embedding_forward, device_type::cpu, embedding_forward);
TROUPE_REGISTER_KERNEL(ops::embedding_backward, device_type::cpu, embedding_backward);

}  // namespace troupe::kernels::cpu
