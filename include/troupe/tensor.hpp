// tensor.hpp: n-dimensional arrays with shared, reference-counted storage.
//
// Copying a tensor copies a pointer: a tensor in a message within one process is never
// deep-copied, so a sender must not mutate a tensor after sending it (DESIGN.md). The
// data of a tensor may not be computed yet: `ready()` is the event of the job that
// writes it, and consumers on another stream wait for it; host code calls wait_ready()
// before reading values. Crossing a node serialises shape, dtype and raw bytes in one
// block, validated when loaded (tensor_header_problem here; the CAF inspect that uses it
// is in tensor_inspect.hpp, so that this header, and a layer plugin, needs no CAF).
//
// Not here: views with strides, broadcasting, autograd. Kernels work on raw buffers.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "troupe/device.hpp"
#include "troupe/error.hpp"

namespace troupe {

/// Element types: f32, i32 (ids, labels) and bf16 (bfloat16: f32's sign, exponent and top 7
/// mantissa bits, stored as std::uint16_t; [run] precision = "bf16").
enum class dtype : std::uint8_t { f32, i32, bf16 };

std::size_t size_of(dtype type);
const char* to_string(dtype type);

using shape_t = std::vector<std::int64_t>;

/// "(32, 784)".
std::string shape_to_string(const shape_t& shape);
std::int64_t element_count(const shape_t& shape);

/// A block of memory on one device, returned to its pool when the last owner lets go.
class storage {
 public:
  storage(device_id device, std::size_t bytes);
  /// Page-locked host memory (a CPU device's), which a GPU copies from and to while the
  /// host goes on; from the GPU backend's pinned pool, or plain host memory without one.
  struct pinned_t {};
  storage(device_id device, std::size_t bytes, pinned_t);
  /// Host memory it does not own (`owner` keeps it valid while the storage lives).
  storage(device_id device, void* data, std::size_t bytes, std::shared_ptr<void> owner);
  ~storage();
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const device_id& device() const { return device_; }

 private:
  device_id device_;
  std::size_t bytes_;
  void* data_;
  bool pinned_ = false;
  std::shared_ptr<void> owner_;  // set: borrowed memory, nothing to release
};

class tensor {
 public:
  tensor() = default;

  /// Uninitialised memory from the device's pool. Ready at once (nothing writes it yet).
  static tensor empty(shape_t shape, dtype type = dtype::f32, device_id device = {});
  /// Uninitialised page-locked host memory of cpu:0 of this node, for copies to and from
  /// a GPU that the host does not wait for (runtime/core/gpu.hpp); plain host memory where
  /// there is no GPU backend. Ready at once.
  static tensor empty_pinned(shape_t shape, dtype type = dtype::f32);
  /// Zero-filled, written on the calling thread (a GPU's: by a synchronous copy).
  static tensor zeros(shape_t shape, dtype type = dtype::f32, device_id device = {});
  /// A tensor over host memory it does not own, of `device` (a CPU's), ready at once;
  /// `owner` keeps `data` valid while any view of it lives (the shared-memory transport's
  /// slots, runtime/net/shared_memory.hpp).
  static tensor borrowing(void* data, shape_t shape, dtype type, device_id device,
                          std::shared_ptr<void> owner);
  /// A tensor holding a copy of `values`, written on the calling thread (as zeros()).
  static tensor from(const std::vector<float>& values, shape_t shape, device_id device = {});

  bool defined() const { return storage_ != nullptr; }
  const shape_t& shape() const { return shape_; }
  std::int64_t dim(std::size_t axis) const { return shape_.at(axis); }
  std::size_t rank() const { return shape_.size(); }
  std::int64_t numel() const { return element_count(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * size_of(type_); }
  dtype type() const { return type_; }
  const device_id& device() const;

  /// Raw data; checks the dtype. Writing is for the job that produces the tensor only.
  float* f32() const;
  std::int32_t* i32() const;
  std::uint16_t* bf16() const;
  void* raw() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }

  /// A tensor of `shape` over this one's storage, starting `element_offset` elements in:
  /// no copy. The view must lie inside the storage.
  tensor view(std::int64_t element_offset, shape_t shape) const;
  /// True if both views share one storage (one allocation).
  bool shares_storage_with(const tensor& other) const {
    return storage_ != nullptr && storage_ == other.storage_;
  }

  /// The event at which the data is written.
  const event& ready() const { return ready_; }
  void set_ready(event e) { ready_ = e; }
  /// Blocks until the data is written. Not for actor handlers (they may run on a stream's
  /// own thread, which would then wait for itself).
  void wait_ready() const { ready_.wait(); }

  /// A host copy of the values (waits first; a GPU's: a synchronous copy).
  std::vector<float> to_vector() const;
  std::vector<std::int32_t> to_int_vector() const;
  /// Waits until written; then this tensor if its bytes are host memory, else a copy on
  /// cpu:0 of this node (synchronous). Undefined stays undefined.
  tensor on_host() const;

  /// A tensor of the same storage with another shape of the same element count.
  tensor reshaped(shape_t shape) const;

  /// How many tensors share this storage (tests use it to prove zero-copy).
  long use_count() const { return storage_.use_count(); }

 private:
  shape_t shape_;
  dtype type_ = dtype::f32;
  std::shared_ptr<storage> storage_;
  std::size_t offset_ = 0;  // bytes into the storage (views)
  event ready_;
};

/// The most bytes of tensors a device of this process held at once since
/// reset_storage_peak (the run summary's peak memory; a simulated run's devices count too,
/// which is how `troupe simulate` predicts it). A block counts while a tensor holds it, not
/// while it waits in the pool for reuse.
std::int64_t storage_bytes_peak(const device_id& device);
void reset_storage_peak(const device_id& device);

/// The most elements one tensor of a run may have (docs/reference/input-limits.md): a layer
/// that would make a larger one refuses its input with this number.
std::int64_t max_tensor_elements();

/// The most bytes a tensor received from another process may claim (16 GiB): a header is
/// checked against it before anything is allocated, so a corrupt or hostile peer cannot
/// make a node allocate without bound. Larger tensors would be sent in pieces.
constexpr std::uint64_t max_received_tensor_bytes = std::uint64_t{1} << 34;

/// Checks a received tensor header before allocating: rank at most 8, a known dtype,
/// non-negative dimensions, no overflow in the element or byte count, at most
/// max_received_tensor_bytes, and `bytes` equal to what the shape needs. Returns what is
/// wrong, or "" when nothing is.
std::string tensor_header_problem(const shape_t& shape, std::uint8_t type, std::uint64_t bytes);

}  // namespace troupe
