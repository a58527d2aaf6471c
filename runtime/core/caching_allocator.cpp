// caching_allocator.cpp: see caching_allocator.hpp.
#include "runtime/core/caching_allocator.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "troupe/error.hpp"

namespace troupe {

caching_allocator::caching_allocator(std::string name, std::function<void*(std::size_t)> raw,
                                     std::function<void(void*)> give_back)
    : name_(std::move(name)), raw_(std::move(raw)), give_back_(std::move(give_back)) {}

caching_allocator::~caching_allocator() {
  std::lock_guard<std::mutex> guard{mutex_};
  empty_cache_locked();
}

void* caching_allocator::allocate(std::size_t bytes) {
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + granule - 1) / granule * granule;
  std::lock_guard<std::mutex> guard{mutex_};
  // The smallest cached block that fits, if it wastes at most half of itself.
  void* block = nullptr;
  std::size_t found = 0;
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first / 2 <= size) {
    block = it->second;
    found = it->first;
    cached_.erase(it);
  } else {
    try {
      block = raw_(size);
    } catch (const std::exception&) {
      if (cached_.empty())
        throw;
      empty_cache_locked();  // fragments of other sizes: give them back and try again
      block = raw_(size);
    }
    found = size;
    figures_.reserved += static_cast<std::int64_t>(size);
    ++figures_.raw_allocations;
  }
  in_use_.emplace(block, found);
  figures_.current += static_cast<std::int64_t>(found);
  figures_.peak = std::max(figures_.peak, figures_.current);
  return block;
}

void caching_allocator::release(void* block) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto it = in_use_.find(block);
  TROUPE_CHECK(it != in_use_.end(), name_ << ": a block this allocator did not give was released");
  figures_.current -= static_cast<std::int64_t>(it->second);
  cached_.emplace(it->second, block);
  in_use_.erase(it);
}

void caching_allocator::empty_cache() {
  std::lock_guard<std::mutex> guard{mutex_};
  empty_cache_locked();
}

void caching_allocator::empty_cache_locked() {
  for (const auto& [size, block] : cached_) {
    give_back_(block);
    figures_.reserved -= static_cast<std::int64_t>(size);
  }
  cached_.clear();
}

caching_allocator::figures caching_allocator::now() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return figures_;
}

void caching_allocator::reset_peak() {
  std::lock_guard<std::mutex> guard{mutex_};
  figures_.peak = figures_.current;
}

}  // namespace troupe
