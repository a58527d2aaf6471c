// huge_pages.cpp: Note [huge pages for data sets] in huge_pages.hpp.
#include "runtime/base/huge_pages.hpp"

#include <sys/mman.h>

namespace troupe {

namespace {
constexpr std::size_t huge_page = std::size_t{2} << 20;
}

void* allocate_maybe_huge(std::size_t bytes) {
  if (bytes < huge_page) {
    if (void* p = std::malloc(bytes == 0 ? 1 : bytes))
      return p;
    throw std::bad_alloc();
  }
  const auto rounded = (bytes + huge_page - 1) / huge_page * huge_page;
  void* p = std::aligned_alloc(huge_page, rounded);
  if (p == nullptr)
    throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice: a kernel without THP keeps small pages
#endif
  return p;
}

void release_maybe_huge(void* p) noexcept {
  std::free(p);  // aligned_alloc's blocks go back with free, as malloc's do
}

}  // namespace troupe
