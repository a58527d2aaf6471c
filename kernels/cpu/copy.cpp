// copy.cpp: copies bytes within host memory (the CPU device).
//
// Source and destination must not overlap (as for cudaMemcpyAsync); an overlap is a
// programmer error and is checked. Crossing devices is the runtime's job, not this op's.
#include <cstdint>
#include <cstring>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void copy(const context&, std::int64_t bytes, const void* src, void* dst) {
  if (bytes <= 0)
    return;
  const auto from = reinterpret_cast<std::uintptr_t>(src);
  const auto to = reinterpret_cast<std::uintptr_t>(dst);
  const auto size = static_cast<std::uintptr_t>(bytes);
  TROUPE_CHECK(from + size <= to || to + size <= from,
               "copy of " << bytes << " bytes between overlapping buffers");
  std::memcpy(dst, src, static_cast<std::size_t>(bytes));
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::copy, device_type::cpu, copy);

}  // namespace troupe::kernels::cpu
