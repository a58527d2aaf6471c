// causal_softmax.cpp: the masked softmax of causal self-attention, forward and backward, on
// the CPU.
//
// Row r is the query at position t = r mod cols and sees positions 0..t: the maximum of
// those is subtracted before exp (no overflow), the masked tail is written as zeros, and
// the backward only reads the visible part.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

/// The largest of scale x[j] over j < n (n >= 1), NaNs skipped unless x[0] is one (a row with a
/// NaN becomes all NaN either way, through exp). A select, not std::fmax: GCC calls libm's
/// fmaxf for that, and the call was 3% of config/char_lm.toml's bf16 step (perf, AMD EPYC VM,
/// 2026-12-07).
TROUPE_VECTOR_CLONES
float scaled_row_max(int n, float scale, const float* __restrict x) {
  float most = scale * x[0];
  for (int j = 1; j < n; ++j) {
    const float v = scale * x[j];
    most = v > most ? v : most;
  }
  return most;
}

void causal_softmax_forward(const context&, int rows, int cols, float scale, const float* x,
                            float* y) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "causal_softmax_forward sizes: rows=" << rows << " cols=" << cols);
  for (int r = 0; r < rows; ++r) {
    const int visible = r % cols + 1;
    const float* in = x + static_cast<std::int64_t>(r) * cols;
    float* out = y + static_cast<std::int64_t>(r) * cols;
    const float most = scaled_row_max(visible, scale, in);
    exp_shifted(visible, scale, most, in, out);  // vectorised (vector_math.hpp)
    float sum = 0.0f;
    for (int j = 0; j < visible; ++j)
      sum += out[j];
    const float inverse = 1.0f / sum;
    for (int j = 0; j < visible; ++j)
      out[j] *= inverse;
    for (int j = visible; j < cols; ++j)
      out[j] = 0.0f;
  }
}

void causal_softmax_backward(const context&, int rows, int cols, float scale, const float* y,
                             const float* dy, float* dx) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "causal_softmax_backward sizes: rows=" << rows << " cols=" << cols);
  for (int r = 0; r < rows; ++r) {
    const int visible = r % cols + 1;
    const std::int64_t at = static_cast<std::int64_t>(r) * cols;
    float dot = 0.0f;
    for (int j = 0; j < visible; ++j)
      dot += dy[at + j] * y[at + j];
    for (int j = 0; j < visible; ++j)
      dx[at + j] = scale * y[at + j] * (dy[at + j] - dot);
    for (int j = visible; j < cols; ++j)
      dx[at + j] = 0.0f;
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::causal_softmax_forward, device_type::cpu, causal_softmax_forward);
TROUPE_REGISTER_KERNEL(ops::causal_softmax_backward, device_type::cpu, causal_softmax_backward);

}  // namespace troupe::kernels::cpu
