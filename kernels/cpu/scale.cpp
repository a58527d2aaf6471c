// scale.cpp: x *= alpha over n elements, on the CPU.
//
// A plain multiply: alpha = 0 keeps NaN and infinities as NaN (use fill to clear).
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void scale_loop(std::int64_t n, float alpha, float* __restrict x) {
  for (std::int64_t i = 0; i < n; ++i)
    x[i] *= alpha;
}

void scale(const context&, std::int64_t n, float alpha, float* x) { scale_loop(n, alpha, x); }

}  // namespace

TROUPE_REGISTER_KERNEL(ops::scale, device_type::cpu, scale);

}  // namespace troupe::kernels::cpu
