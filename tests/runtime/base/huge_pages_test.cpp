// huge_page_allocator (runtime/base/huge_pages.hpp): large blocks 2 MiB aligned, small ones
// ordinary, and a vector over it behaves as any vector.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "runtime/base/huge_pages.hpp"

using namespace troupe;

TEST_CASE("the huge-page allocator aligns large blocks to 2 MiB and keeps small ones ordinary") {
  constexpr std::size_t two_mib = std::size_t{2} << 20;
  for (std::size_t bytes : {two_mib, two_mib + 1, 3 * two_mib + 12345}) {
    void* p = allocate_maybe_huge(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % two_mib == 0);
    auto* bytes_p = static_cast<unsigned char*>(p);
    bytes_p[0] = 1;
    bytes_p[bytes - 1] = 2;  // the whole block is ours
    CHECK(bytes_p[bytes - 1] == 2);
    release_maybe_huge(p);
  }
  void* small = allocate_maybe_huge(100);
  REQUIRE(small != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(small) % alignof(std::max_align_t) == 0);
  release_maybe_huge(small);

  std::vector<float, huge_page_allocator<float>> v(1 << 20);  // 4 MiB
  CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % two_mib == 0);
  std::iota(v.begin(), v.end(), 0.0f);
  auto copy = v;
  CHECK(copy == v);
  CHECK(copy[12345] == 12345.0f);
  v.resize(10);
  v.resize(3 << 20);  // past its capacity: reallocated through the allocator
  CHECK(v[9] == 9.0f);
  CHECK_THROWS_AS(huge_page_allocator<float>{}.allocate(static_cast<std::size_t>(-1) / 2),
                  std::bad_array_new_length);
}
