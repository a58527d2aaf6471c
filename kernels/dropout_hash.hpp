// dropout_hash.hpp: the counter-based hash every backend's dropout kernel draws its masks
// from, so that the CPU and CUDA kernels keep exactly the same elements.
//
// splitmix64's finaliser (as runtime/base/random.hpp, which kernels/ cannot include).
// Nothing else here.
#pragma once

#include <cstdint>

#include "troupe/ops.hpp"

namespace troupe::kernels {

TROUPE_HOST_DEVICE inline std::uint64_t dropout_mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// True if element `index` (row-major over the whole batch) is kept: its 24-bit uniform
/// draw is at least `threshold` = p 2^24.
TROUPE_HOST_DEVICE inline bool dropout_keeps(std::uint64_t key, std::uint64_t index,
                                             std::uint32_t threshold) {
  return static_cast<std::uint32_t>(dropout_mix(key ^ dropout_mix(index)) >> 40) >= threshold;
}

/// p as the threshold dropout_keeps compares with.
TROUPE_HOST_DEVICE inline std::uint32_t dropout_threshold(float p) {
  return static_cast<std::uint32_t>(static_cast<double>(p) * 16777216.0);
}

}  // namespace troupe::kernels
