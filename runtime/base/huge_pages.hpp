// huge_pages.hpp: an allocator for large arrays read at random rows (a data set's samples).
//
// Note [huge pages for data sets]
// A data loader gathers each batch from random rows of its data set (Fashion-MNIST: 60 000
// rows of 3 KB, 188 MB), so nearly every row it reads is a TLB miss on 4 KB pages. On the
// virtual machines we build on, such a miss became 10x dearer once the process had
// unmapped another large block, as loading does when it frees the file's bytes: 32 rows
// took 100-140 us instead of 11 us (a micro-benchmark: fill two 188 MB arrays, free one,
// gather 32 random rows from the other), and the loader's gather jobs on the first device took
// as long as the first layer's GEMMs (251 us against 165 us a micro-batch in a traced PP2
// run of config/fashion_mlp_pp2_1f1b.toml). On 2 MB pages the array is 94 entries and the
// gather stays at 11-12 us. So blocks of 2 MiB or more are 2 MiB aligned and offered to the
// kernel as huge pages (madvise MADV_HUGEPAGE: transparent huge pages in Debian's default
// "madvise" mode); where it declines, they are ordinary memory and only slower.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace troupe {

/// Allocates 2 MiB-aligned blocks advised as huge pages for 2 MiB or more, and ordinary
/// ones below that.
void* allocate_maybe_huge(std::size_t bytes);
void release_maybe_huge(void* p) noexcept;

template <class T>
struct huge_page_allocator {
  using value_type = T;
  huge_page_allocator() = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T))
      throw std::bad_array_new_length();
    return static_cast<T*>(allocate_maybe_huge(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { release_maybe_huge(p); }
  template <class U>
  bool operator==(const huge_page_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const huge_page_allocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace troupe
