// vector_math.cpp: the loops of vector_math.hpp that several kernels share.
#include "kernels/cpu/vector_math.hpp"

#include "kernels/cpu/vectorize.hpp"

namespace troupe::kernels::cpu {

TROUPE_VECTOR_CLONES
void exp_shifted(std::int64_t n, float scale, float shift, const float* in, float* out) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = exp_nonpositive(scale * in[i] - shift);
}

}  // namespace troupe::kernels::cpu
