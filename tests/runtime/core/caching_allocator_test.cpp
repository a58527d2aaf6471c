// The caching allocator under GPU tensors: reuse, figures, and giving memory back when the
// device runs out. Its device here is a counting fake (malloc), so the test runs anywhere.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "runtime/core/caching_allocator.hpp"
#include "troupe/check.hpp"

using namespace troupe;

namespace {

// A device of `capacity` bytes that counts its allocations and frees.
struct counting_device {
  std::size_t capacity = 1 << 30;
  std::size_t used = 0;
  int allocations = 0;
  int frees = 0;
  std::map<void*, std::size_t> blocks;

  caching_allocator make() {
    return caching_allocator{"cuda:0",
                             [this](std::size_t bytes) -> void* {
                               if (used + bytes > capacity)
                                 throw std::runtime_error("out of memory");
                               used += bytes;
                               ++allocations;
                               void* p = std::malloc(bytes);
                               blocks[p] = bytes;
                               return p;
                             },
                             [this](void* p) {
                               used -= blocks.at(p);
                               blocks.erase(p);
                               ++frees;
                               std::free(p);
                             }};
  }
};

}  // namespace

TEST_CASE("the caching allocator reuses a released block for the next request of its size") {
  counting_device device;
  auto pool = device.make();
  void* a = pool.allocate(1000);  // 1024 after rounding
  pool.release(a);
  CHECK(pool.allocate(1000) == a);
  CHECK(device.allocations == 1);
  // A smaller request takes a cached block that wastes at most half of it...
  void* big = pool.allocate(4096);
  pool.release(big);
  CHECK(pool.allocate(3000) == big);
  // ... and not one that would waste more.
  void* other = pool.allocate(6000);
  pool.release(other);
  void* small = pool.allocate(1000);
  CHECK(small != other);
  CHECK(device.allocations == 4);
  for (void* block : {a, big, small})  // in use: the caller's to give back
    pool.release(block);
}

TEST_CASE("after the first step of a loop of equal steps nothing reaches the device") {
  counting_device device;
  auto pool = device.make();
  const std::vector<std::size_t> step_sizes = {784 * 128 * 4, 128 * 4, 100352, 512 * 4, 40, 40};
  int after_first = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<void*> live;
    for (auto size : step_sizes)
      live.push_back(pool.allocate(size));
    for (void* p : live)
      pool.release(p);
    if (step == 0)
      after_first = device.allocations;
  }
  CHECK(device.allocations == after_first);
  CHECK(pool.now().raw_allocations == after_first);
}

TEST_CASE("the caching allocator's figures: in use, the most at once, taken from the device") {
  counting_device device;
  auto pool = device.make();
  void* a = pool.allocate(512);
  void* b = pool.allocate(2048);
  CHECK(pool.now().current == 2560);
  CHECK(pool.now().peak == 2560);
  pool.release(b);
  CHECK(pool.now().current == 512);
  CHECK(pool.now().peak == 2560);
  CHECK(pool.now().reserved == 2560);  // the cached block is still the device's
  pool.reset_peak();
  CHECK(pool.now().peak == 512);
  pool.empty_cache();
  CHECK(pool.now().reserved == 512);
  CHECK(device.frees == 1);
  pool.release(a);
}

TEST_CASE("out of device memory, the cache is given back and the request tried again") {
  counting_device device;
  device.capacity = 8192;
  auto pool = device.make();
  void* a = pool.allocate(3000);  // 3072
  void* b = pool.allocate(3000);
  pool.release(a);
  pool.release(b);
  // 5120 bytes: no cached block fits within 2x, and the device has 2048 left until the
  // cache goes back.
  void* c = pool.allocate(5000);
  CHECK(c != nullptr);
  CHECK(device.frees == 2);
  CHECK(pool.now().reserved == 5120);
  // With nothing cached, the device's own error comes through.
  CHECK_THROWS_WITH_AS(pool.allocate(5000), "out of memory", std::runtime_error);
  pool.release(c);
}

TEST_CASE(
    "the caching allocator refuses a block it did not give and frees its cache when it goes") {
  counting_device device;
  {
    auto pool = device.make();
    int not_ours = 0;
    CHECK_THROWS_AS(pool.release(&not_ours), check_failure);
    pool.release(pool.allocate(100));
    pool.release(pool.allocate(100000));
  }
  CHECK(device.frees == 2);
  CHECK(device.blocks.empty());
}
