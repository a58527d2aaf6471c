// gpu.cpp: the installed GPU backend and each GPU's caching allocator (gpu.hpp).
#include "runtime/core/gpu.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/core/caching_allocator.hpp"
#include "troupe/error.hpp"

namespace troupe::kernels {
// kernels/dispatch.cpp: loads libtroupe_cuda once; "" when it is loaded, else why not.
std::string load_cuda_library();
}  // namespace troupe::kernels

namespace troupe::gpu {

namespace {

struct registry {
  std::mutex mutex;
  std::shared_ptr<backend> provided;   // libtroupe_cuda's
  std::shared_ptr<backend> installed;  // a test's, in its place
  backend* current() const { return installed ? installed.get() : provided.get(); }
  std::shared_ptr<backend> current_shared() const { return installed ? installed : provided; }
  // One allocator per GPU; made on first use, dropped when the backend changes.
  std::map<int, std::unique_ptr<caching_allocator>> allocators;
};

// Never destroyed, as the CPU pool (tensor.cpp): a tensor may be released while static
// objects are destroyed at exit.
registry& gpu_registry() {
  static auto* r = new registry;
  return *r;
}

constexpr int pinned_host = -1;  // the allocators' key of page-locked host memory

caching_allocator& allocator_of(int device) {
  auto& r = gpu_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  auto& slot = r.allocators[device];
  if (!slot && device == pinned_host) {
    std::weak_ptr<backend> owner = r.current_shared();
    std::string why;
    if (owner.expired() || owner.lock()->device_count(why) == 0) {
      // No GPU (a CUDA library without a driver, or none at all): plain host memory does.
      slot = std::make_unique<caching_allocator>(
          "host", [](std::size_t bytes) { return std::aligned_alloc(64, bytes); },
          [](void* block) { std::free(block); });
    } else {
      slot = std::make_unique<caching_allocator>(
          "pinned host", [owner](std::size_t bytes) { return owner.lock()->allocate_host(bytes); },
          [owner](void* block) {
            if (auto b = owner.lock())
              b->release_host(block);
          });
    }
  }
  if (!slot) {
    TROUPE_CHECK(r.current() != nullptr, "cuda:" << device << " memory without a GPU backend");
    std::weak_ptr<backend> owner = r.current_shared();
    slot = std::make_unique<caching_allocator>(
        "cuda:" + std::to_string(device),
        [owner, device](std::size_t bytes) { return owner.lock()->allocate(device, bytes); },
        [owner, device](void* block) {
          if (auto b = owner.lock())
            b->release(device, block);
        });
  }
  return *slot;
}

}  // namespace

void provide_backend(std::shared_ptr<backend> provided) {
  auto& r = gpu_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  if (!r.installed)
    r.allocators.clear();
  r.provided = std::move(provided);
}

std::shared_ptr<backend> install_backend(std::shared_ptr<backend> installed) {
  auto& r = gpu_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  r.allocators.clear();  // their cached blocks go back to the backend they came from
  std::swap(r.installed, installed);
  return installed;
}

backend& require_backend() {
  {
    auto& r = gpu_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    if (auto* b = r.current())
      return *b;
  }
  const auto why = kernels::load_cuda_library();  // its initialiser provides the backend
  auto& r = gpu_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  if (auto* b = r.current())
    return *b;
  throw user_error(why.empty() ? "the CUDA library loaded but provided no GPU backend" : why);
}

void require_device(int device) {
  backend* found = nullptr;
  try {
    found = &require_backend();
  } catch (const user_error& e) {  // no CUDA in this build, or its library did not load
    throw user_error("cuda:" + std::to_string(device) + " is not on this machine: " + e.what());
  }
  auto& b = *found;
  std::string why;
  const int count = b.device_count(why);
  if (device >= 0 && device < count)
    return;
  std::ostringstream out;
  out << "cuda:" << device << " is not on this machine: " << b.name() << " sees ";
  if (count <= 0) {
    out << "no GPU" << (why.empty() ? "" : " (" + why + ")");
  } else {
    out << count << (count == 1 ? " GPU" : " GPUs") << " (";
    for (int i = 0; i < count; ++i)
      out << (i > 0 ? ", " : "") << "cuda:" << i << " " << b.describe(i);
    out << ")";
  }
  throw user_error(out.str());
}

void* allocate_pinned(std::size_t bytes) {
  bool made = false;
  {
    auto& r = gpu_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    made = r.allocators.count(pinned_host) > 0;
  }
  if (!made) {
    try {
      require_backend();  // loads libtroupe_cuda, whose backend pins
    } catch (const user_error&) {
      // No GPU backend: the pool is of plain host memory (allocator_of).
    }
  }
  return allocator_of(pinned_host).allocate(bytes);
}

void release_pinned(void* memory) { allocator_of(pinned_host).release(memory); }

void* allocate(int device, std::size_t bytes) { return allocator_of(device).allocate(bytes); }

void release(int device, void* memory, std::size_t) { allocator_of(device).release(memory); }

memory_figures memory(int device) {
  {
    auto& r = gpu_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    if (r.allocators.count(device) == 0)
      return {};
  }
  const auto f = allocator_of(device).now();
  return memory_figures{f.current, f.peak, f.reserved, f.raw_allocations};
}

void reset_memory_peak(int device) {
  {
    auto& r = gpu_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    if (r.allocators.count(device) == 0)
      return;
  }
  allocator_of(device).reset_peak();
}

}  // namespace troupe::gpu
