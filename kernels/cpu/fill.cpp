// fill.cpp: x = value over n elements, on the CPU.
//
// std::fill_n compiles to vector stores (memset for 0); no clones needed.
#include <algorithm>

#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void fill(const context&, std::int64_t n, float value, float* x) {
  if (n > 0)
    std::fill_n(x, n, value);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::fill, device_type::cpu, fill);

}  // namespace troupe::kernels::cpu
