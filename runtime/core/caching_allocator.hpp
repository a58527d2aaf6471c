// caching_allocator.hpp: device memory that is reused instead of freed.
//
// cudaMalloc and cudaFree are slow and synchronise the device, so a GPU's tensors never
// reach them once training runs: a block a tensor lets go of is kept, and the next request
// of its size (or a little less) gets it back. A training step asks for the same sizes
// every time, so after the first step nothing is allocated from the device (the
// raw_allocations figure stops growing; caching_allocator_test checks it). When the device
// has no memory left, every cached block is given back and the request tried once more.
//
// Stream safety: a block goes back to the cache when its last tensor goes, and a GPU job
// keeps the tensors it uses until the GPU has run it (Note [GPU streams] in gpu.hpp), so a
// cached block is never one the GPU still reads or writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

class caching_allocator {
 public:
  /// `raw` allocates from the device and throws when it has no memory; `give_back` frees.
  /// `name` ("cuda:0") is for messages.
  caching_allocator(std::string name, std::function<void*(std::size_t)> raw,
                    std::function<void(void*)> give_back);
  ~caching_allocator();  // gives every cached block back; blocks in use are the caller's
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// A block of at least `bytes` (a multiple of 512, at most twice the rounded request).
  void* allocate(std::size_t bytes);
  /// Returns a block allocate() gave.
  void release(void* block);
  /// Gives every cached block back to the device.
  void empty_cache();

  struct figures {
    std::int64_t current = 0;   // bytes of blocks in use
    std::int64_t peak = 0;      // the most at once since reset_peak()
    std::int64_t reserved = 0;  // bytes taken from the device: in use or cached
    std::int64_t raw_allocations = 0;
  };
  figures now() const;
  void reset_peak();

  /// Requests are rounded up to this.
  static constexpr std::size_t granule = 512;

 private:
  void empty_cache_locked();

  std::string name_;
  std::function<void*(std::size_t)> raw_;
  std::function<void(void*)> give_back_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;       // by size
  std::unordered_map<void*, std::size_t> in_use_;  // block -> its size
  figures figures_;
};

}  // namespace troupe
