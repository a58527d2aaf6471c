// tensor.cpp: storage pools and tensor helpers.
//
// CPU storage comes from a process-wide pool of 64-byte aligned blocks, kept by device and
// size: a training step allocates the same shapes every time, so after the first step no
// allocation reaches malloc (Note [a pool by device]).
#include "troupe/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/base/limits.hpp"
#include "runtime/core/gpu.hpp"

namespace troupe {

std::size_t size_of(dtype type) {
  switch (type) {
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::bf16:
      return 2;
  }
  return 0;
}

const char* to_string(dtype type) {
  switch (type) {
    case dtype::f32:
      return "f32";
    case dtype::i32:
      return "i32";
    case dtype::bf16:
      return "bf16";
  }
  return "?";
}

std::string shape_to_string(const shape_t& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + ")";
}

std::int64_t element_count(const shape_t& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    return 0;  // before multiplying: the other dimensions may overflow together
  std::int64_t n = 1;
  for (auto d : shape)
    TROUPE_CHECK(!__builtin_mul_overflow(n, d, &n),
                 "shape " << shape_to_string(shape) << " has more elements than 64 bits count");
  return n;
}

namespace {

// The pool also counts each device's bytes held in tensors, now and at the most since a
// reset: under the lock it takes anyway, so counting costs an addition. A simulated run's
// devices (runtime/core/simulation.hpp) are counted as real ones: their jobs allocate
// what the run's would, which is how `troupe simulate` predicts memory.
class cpu_pool {
 public:
  void* allocate(const device_id& device, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      count(device, static_cast<std::int64_t>(bytes));
      auto it = free_.find(block_kind{device, bytes});
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      std::lock_guard<std::mutex> guard{mutex_};
      count(device, -static_cast<std::int64_t>(bytes));
      throw std::bad_alloc();
    }
    return p;
  }

  void release(const device_id& device, void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> guard{mutex_};
    count(device, -static_cast<std::int64_t>(bytes));
    free_[block_kind{device, bytes}].push_back(p);
  }

  std::int64_t peak(const device_id& device) {
    std::lock_guard<std::mutex> guard{mutex_};
    auto it = bytes_.find(device);
    return it == bytes_.end() ? 0 : it->second.peak;
  }

  void reset_peak(const device_id& device) {
    std::lock_guard<std::mutex> guard{mutex_};
    auto& b = bytes_[device];
    b.peak = b.live;
  }

 private:
  struct held {
    std::int64_t live = 0;
    std::int64_t peak = 0;
  };
  void count(const device_id& device, std::int64_t bytes) {  // under the lock
    auto& b = bytes_[device];
    b.live += bytes;
    b.peak = std::max(b.peak, b.live);
  }

  // Note [a pool by device]
  // A block goes back to the free list of its device, not to one list of its size that
  // every device takes from. With one list, two replicas of a data-parallel run, which
  // allocate the same sizes, swapped their blocks at every step: a device wrote its
  // activations and gradients into lines the other core had just written, fetched from
  // that core's cache. DP2 of config/fashion_mlp_dp2.toml (traced, 40 steps, medians):
  // the first layer's forward took 276-286 us against 260 us for the same 64 rows on one
  // device, the ReLU after it 7-9 us against 1.5, all layer jobs 1.07-1.10x; with a list
  // a device, 1.005-1.02x. Over 1500 steps the gain is smaller (+0.8% samples/s, five
  // alternating pairs): a long run's two replicas drift into taking their own blocks back
  // more often. Each device now keeps blocks of its own, so the bytes a process holds are
  // the sum of its devices' peaks (each device's held figure is unchanged).
  struct block_kind {
    device_id device;
    std::size_t bytes = 0;
    friend bool operator==(const block_kind& a, const block_kind& b) {
      return a.bytes == b.bytes && a.device == b.device;
    }
  };
  struct block_kind_hash {
    std::size_t operator()(const block_kind& k) const {
      const auto d = (static_cast<std::size_t>(k.device.node) << 20) ^
                     (static_cast<std::size_t>(k.device.type) << 16) ^
                     static_cast<std::size_t>(k.device.index);
      return std::hash<std::size_t>{}(k.bytes) ^ (d * 0x9e3779b97f4a7c15ull);
    }
  };

  std::mutex mutex_;
  std::unordered_map<block_kind, std::vector<void*>, block_kind_hash> free_;
  std::map<device_id, held> bytes_;
};

// Never destroyed: a thread that outlives main (a gloo worker waiting out its timeout
// for a peer that never came, detached by design) may still release a tensor while
// static objects are destroyed at exit. TSan saw that race with a destructor here. The
// blocks stay reachable through the pointer, so leak checkers do not count them.
cpu_pool& the_cpu_pool() {
  static auto* pool = new cpu_pool;
  return *pool;
}

}  // namespace

storage::storage(device_id device, std::size_t bytes) : device_(device), bytes_(bytes) {
  data_ = device.type == device_type::cuda ? gpu::allocate(device.index, bytes)
                                           : the_cpu_pool().allocate(device_, bytes);
}

storage::storage(device_id device, std::size_t bytes, pinned_t)
    : device_(device), bytes_(bytes), data_(gpu::allocate_pinned(bytes)), pinned_(true) {}

storage::storage(device_id device, void* data, std::size_t bytes, std::shared_ptr<void> owner)
    : device_(device), bytes_(bytes), data_(data), owner_(std::move(owner)) {}

storage::~storage() {
  if (owner_)
    return;
  if (pinned_)
    gpu::release_pinned(data_);
  else if (device_.type == device_type::cuda)
    gpu::release(device_.index, data_, bytes_);
  else
    the_cpu_pool().release(device_, data_, bytes_);
}

std::int64_t storage_bytes_peak(const device_id& device) {
  return device.type == device_type::cuda ? gpu::memory(device.index).peak
                                          : the_cpu_pool().peak(device);
}

void reset_storage_peak(const device_id& device) {
  if (device.type == device_type::cuda)
    gpu::reset_memory_peak(device.index);
  else
    the_cpu_pool().reset_peak(device);
}

namespace {

// Host bytes into a tensor made on the calling thread: a GPU's through a synchronous copy.
void write_from_host(const tensor& t, const void* bytes) {
  if (t.device().type == device_type::cuda)
    gpu::require_backend().copy_now(t.raw(), bytes, t.bytes());
  else
    std::memcpy(t.raw(), bytes, t.bytes());
}

// A written tensor's bytes on the host: a GPU's through a synchronous copy.
template <class T>
std::vector<T> read_to_host(const tensor& t, const T* p) {
  t.wait_ready();
  if (t.device().type != device_type::cuda)
    return std::vector<T>(p, p + t.numel());
  std::vector<T> out(static_cast<std::size_t>(t.numel()));
  gpu::require_backend().copy_now(out.data(), p, t.bytes());
  return out;
}

// The bytes a new tensor of `shape` takes, refusing negative dimensions and overflow.
std::size_t bytes_of_new(const shape_t& shape, dtype type) {
  for (auto d : shape)
    TROUPE_CHECK(d >= 0, "negative dimension in shape " << shape_to_string(shape));
  std::size_t bytes = 0;
  TROUPE_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(element_count(shape)),
                                       size_of(type), &bytes),
               "shape " << shape_to_string(shape) << " has more bytes than 64 bits count");
  return bytes;
}

}  // namespace

tensor tensor::empty(shape_t shape, dtype type, device_id device) {
  const auto bytes = bytes_of_new(shape, type);
  tensor t;
  t.type_ = type;
  t.storage_ = std::make_shared<storage>(device, bytes);
  t.shape_ = std::move(shape);
  return t;
}

tensor tensor::borrowing(void* data, shape_t shape, dtype type, device_id device,
                         std::shared_ptr<void> owner) {
  const auto bytes = bytes_of_new(shape, type);
  TROUPE_CHECK(device.type == device_type::cpu && owner != nullptr,
               "borrowing: host memory with an owner, not " << device.to_string());
  tensor t;
  t.type_ = type;
  t.storage_ = std::make_shared<storage>(device, data, bytes, std::move(owner));
  t.shape_ = std::move(shape);
  return t;
}

tensor tensor::empty_pinned(shape_t shape, dtype type) {
  const auto bytes = bytes_of_new(shape, type);
  tensor t;
  t.type_ = type;
  t.storage_ = std::make_shared<storage>(device_id{device_type::cpu, 0, this_node()}, bytes,
                                         storage::pinned_t{});
  t.shape_ = std::move(shape);
  return t;
}

tensor tensor::zeros(shape_t shape, dtype type, device_id device) {
  auto t = empty(std::move(shape), type, device);
  if (device.type == device_type::cuda)
    write_from_host(t, std::vector<char>(t.bytes(), 0).data());
  else
    std::memset(t.raw(), 0, t.bytes());
  return t;
}

tensor tensor::from(const std::vector<float>& values, shape_t shape, device_id device) {
  TROUPE_CHECK(static_cast<std::int64_t>(values.size()) == element_count(shape),
               values.size() << " values for shape " << shape_to_string(shape));
  auto t = empty(std::move(shape), dtype::f32, device);
  write_from_host(t, values.data());
  return t;
}

const device_id& tensor::device() const {
  TROUPE_CHECK(storage_ != nullptr, "device() of an undefined tensor");
  return storage_->device();
}

float* tensor::f32() const {
  TROUPE_CHECK(type_ == dtype::f32, "tensor " << shape_to_string(shape_) << " is "
                                              << to_string(type_) << ", not f32");
  return static_cast<float*>(raw());
}

std::int32_t* tensor::i32() const {
  TROUPE_CHECK(type_ == dtype::i32, "tensor " << shape_to_string(shape_) << " is "
                                              << to_string(type_) << ", not i32");
  return static_cast<std::int32_t*>(raw());
}

std::uint16_t* tensor::bf16() const {
  TROUPE_CHECK(type_ == dtype::bf16, "tensor " << shape_to_string(shape_) << " is "
                                               << to_string(type_) << ", not bf16");
  return static_cast<std::uint16_t*>(raw());
}

std::vector<float> tensor::to_vector() const { return read_to_host(*this, f32()); }

std::vector<std::int32_t> tensor::to_int_vector() const { return read_to_host(*this, i32()); }

tensor tensor::on_host() const {
  if (!defined())
    return *this;
  wait_ready();
  if (device().type != device_type::cuda)
    return *this;
  auto host = empty(shape_, type_, device_id{device_type::cpu, 0, this_node()});
  gpu::require_backend().copy_now(host.raw(), raw(), bytes());
  return host;
}

tensor tensor::view(std::int64_t element_offset, shape_t shape) const {
  TROUPE_CHECK(storage_ != nullptr, "view of an undefined tensor");
  auto begin = offset_ + static_cast<std::size_t>(element_offset) * size_of(type_);
  auto length = static_cast<std::size_t>(element_count(shape)) * size_of(type_);
  TROUPE_CHECK(element_offset >= 0 && begin + length <= storage_->bytes(),
               "view of " << shape_to_string(shape) << " at element " << element_offset
                          << " runs past a storage of " << storage_->bytes() << " bytes");
  tensor t = *this;
  t.offset_ = begin;
  t.shape_ = std::move(shape);
  return t;
}

tensor tensor::reshaped(shape_t shape) const {
  TROUPE_CHECK(element_count(shape) == numel(), "cannot reshape " << shape_to_string(shape_)
                                                                  << " to "
                                                                  << shape_to_string(shape));
  tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::string tensor_header_problem(const shape_t& shape, std::uint8_t type, std::uint64_t bytes) {
  if (shape.size() > 8)
    return "tensor rank above 8";
  if (type > static_cast<std::uint8_t>(dtype::bf16))
    return "unknown tensor dtype";
  // Signed, as element_count() multiplies: every partial product must fit an int64_t, even
  // when a later 0 makes the whole 0 (the message fuzzer sent {2^24, ~2^40, 0}).
  std::int64_t elements = 1;
  for (auto d : shape) {
    if (d < 0)
      return "negative tensor dimension in " + shape_to_string(shape);
    if (__builtin_mul_overflow(elements, d, &elements))
      return "tensor shape " + shape_to_string(shape) + " overflows its element count";
  }
  std::uint64_t needed = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(elements),
                             std::uint64_t{size_of(static_cast<dtype>(type))}, &needed) ||
      needed > max_received_tensor_bytes)
    return "tensor shape " + shape_to_string(shape) + " needs more than the " +
           std::to_string(max_received_tensor_bytes) + " bytes a received tensor may have";
  if (needed != bytes)
    return "tensor byte count " + std::to_string(bytes) + " does not match its shape " +
           shape_to_string(shape) + " (" + std::to_string(needed) + " bytes)";
  return {};
}

std::int64_t max_tensor_elements() { return limits::max_tensor_elements; }

}  // namespace troupe
