// safetensors.hpp: writing and reading tensors in Hugging Face's safetensors format, the
// format of a checkpoint's shard files (DESIGN.md "Checkpoints").
//
// A file is: 8 bytes, the header's length N as a little-endian u64; N bytes of UTF-8 JSON,
//   {"__metadata__": {"key": "value"},
//    "fc1.weight": {"dtype": "F32", "shape": [256, 784], "data_offsets": [0, 802816]}, ...}
// padded with spaces to a multiple of 8 bytes; then the data block, each tensor's elements
// row-major and little-endian at [begin, end) counted from the start of the block, the
// tensors covering the block exactly (no holes, no overlaps). PyTorch reads our files with
// `safetensors.torch.load_file`, and we read theirs (of the dtypes below).
//
// The reader takes hostile input: every way a file can be malformed (a length past the
// end, JSON nested 100000 deep, a shape whose element count overflows, overlapping
// tensors, ...) is a data_error naming the file, what was expected and what was found.
// Not here: which tensors a checkpoint holds (manifest.hpp), devices, actors, tensor
// objects (the caller copies bytes in and out), other dtypes (F16, BF16, U8, BOOL, ...).
//
// Example:
//   std::vector<float> w(6, 0.5f);
//   write_safetensors("shard.safetensors", {{"fc1.weight", safetensors_dtype::f32, {2, 3},
//                                            w.data()}}, {{"step", "100"}});
//   auto file = read_safetensors("shard.safetensors");
//   std::vector<float> back = file.values<float>("fc1.weight");
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "troupe/error.hpp"
#include "runtime/checkpoint/atomic_file.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// The element types troupe writes and reads in safetensors files (bf16: weights exported
/// with `troupe export --dtype bf16`, and read by init_from).
enum class safetensors_dtype : std::uint8_t { f32, f64, i32, i64, bf16 };

/// Bytes per element: 2, 4 or 8.
std::size_t size_of(safetensors_dtype type);
/// The format's name for `type`: "F32", "F64", "I32", "I64", "BF16".
const char* to_string(safetensors_dtype type);
/// The dtype the format calls `name` ("F32", ...), or nothing for a name troupe does not read.
std::optional<safetensors_dtype> safetensors_dtype_named(const std::string& name);
/// The safetensors dtype of a troupe tensor's dtype.
safetensors_dtype to_safetensors_dtype(dtype type);

/// The largest file read_safetensors reads (checked with stat before reading): 16 GiB.
constexpr std::uint64_t safetensors_max_file_bytes = std::uint64_t{16} << 30;
/// The longest header accepted: 100 MB, as the reference implementation.
constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;
/// The highest rank of a tensor accepted.
constexpr std::size_t safetensors_max_rank = 8;

/// One tensor to write. Borrowed: `data` must hold element_count(shape) * size_of(dtype)
/// bytes, in host memory, until write_safetensors returns.
struct safetensors_tensor_ref {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  shape_t shape;
  const void* data = nullptr;
};

/// One tensor of a file read: where its bytes lie in the data block.
struct safetensors_entry {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  shape_t shape;
  std::uint64_t begin = 0;  // offset in the data block
  std::uint64_t bytes = 0;  // element_count(shape) * size_of(dtype)
};

/// The complete bytes of a safetensors file holding `tensors` in the given order, and
/// `metadata` (omitted from the header when empty). A name that is empty, repeated or
/// "__metadata__", a negative dimension, a rank above 8 or a null `data` with bytes to
/// write is a bug in the caller (TROUPE_CHECK).
std::vector<std::uint8_t> serialize_safetensors(
    const std::vector<safetensors_tensor_ref>& tensors,
    const std::map<std::string, std::string>& metadata = {});

/// Writes the file serialize_safetensors describes to `path` atomically (atomic_file.hpp),
/// streaming each tensor from its memory. Its size and CRC-32, for the manifest. Throws
/// user_error (exit_code::run_failed) when the file cannot be written.
written_file write_safetensors(const std::string& path,
                               const std::vector<safetensors_tensor_ref>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

/// A parsed safetensors file: its entries and metadata, and (unless only the header was
/// read) the whole file's bytes, which the entries point into.
class safetensors_file {
 public:
  /// The file or buffer it came from, as errors name it.
  const std::string& source() const { return source_; }
  /// The tensors in the order of their data (ascending begin).
  const std::vector<safetensors_entry>& entries() const { return entries_; }
  /// The `__metadata__` strings (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The entry named `name`, or nullptr.
  const safetensors_entry* find(const std::string& name) const;
  /// The entry named `name`; throws data_error naming the file and the names it has.
  const safetensors_entry& at(const std::string& name) const;
  /// Where the data block starts in the file (8 + the header's length): an entry's bytes
  /// are at data_start() + begin.
  std::uint64_t data_start() const { return data_start_; }
  /// Whether the tensors' bytes are here (false after read_safetensors_header).
  bool has_data() const { return has_data_; }
  /// A view of the bytes of `entry` (an entry of this file), valid while this file lives.
  /// Not aligned: copy out with memcpy (values() does).
  const std::uint8_t* data(const safetensors_entry& entry) const;

  /// A copy of the elements of `name`, checked against its dtype (T = float, double,
  /// std::int32_t, std::int64_t); throws data_error when the file holds another dtype.
  template <typename T>
  std::vector<T> values(const std::string& name) const;

  /// The elements of `name` as floats: an F32 tensor's copied, a BF16 tensor's widened
  /// (exactly); throws data_error for another dtype.
  std::vector<float> floats(const std::string& name) const;

 private:
  friend safetensors_file parse_safetensors(std::vector<std::uint8_t> bytes,
                                            const std::string& source);
  friend safetensors_file read_safetensors_header(const std::string& path);
  void check_dtype(const safetensors_entry& entry, safetensors_dtype wanted) const;

  std::string source_;
  std::vector<std::uint8_t> bytes_;  // the whole file, when has_data_
  std::uint64_t data_start_ = 0;     // 8 + N: where the data block begins in bytes_
  bool has_data_ = false;
  std::vector<safetensors_entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Parses a whole file's bytes (the buffer-level entry point, also the fuzzer's). `source`
/// names the bytes in errors. Throws data_error for any malformed input.
safetensors_file parse_safetensors(std::vector<std::uint8_t> bytes,
                                   const std::string& source = "<buffer>");
/// The same for a borrowed buffer (copied).
safetensors_file parse_safetensors(const std::uint8_t* data, std::size_t size,
                                   const std::string& source = "<buffer>");

/// Reads and parses the file at `path`. Throws data_error: missing, not a regular file,
/// larger than safetensors_max_file_bytes, unreadable, or malformed.
safetensors_file read_safetensors(const std::string& path);

/// Reads only the length and the header of the file at `path` (the data block's size
/// comes from stat), checking everything but the tensors' values; has_data() is false.
safetensors_file read_safetensors_header(const std::string& path);

// ---- implementation of the template ----

namespace detail {
template <typename T>
constexpr safetensors_dtype safetensors_dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>,
                "safetensors_file::values<T> reads float, double, int32_t or int64_t");
  if constexpr (std::is_same_v<T, float>)
    return safetensors_dtype::f32;
  else if constexpr (std::is_same_v<T, double>)
    return safetensors_dtype::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return safetensors_dtype::i32;
  else
    return safetensors_dtype::i64;
}
}  // namespace detail

template <typename T>
std::vector<T> safetensors_file::values(const std::string& name) const {
  const auto& entry = at(name);
  check_dtype(entry, detail::safetensors_dtype_of<T>());
  std::vector<T> out(static_cast<std::size_t>(entry.bytes / sizeof(T)));
  if (entry.bytes > 0)
    std::memcpy(out.data(), data(entry), static_cast<std::size_t>(entry.bytes));
  return out;
}

}  // namespace troupe
