// npy.cpp: the .npy reader and the rows it gathers (npy.hpp).
//
// Rows are read through file_bytes: mapped, or read with pread where the address space does
// not allow a mapping (Note [rows from a file] in file_bytes.hpp).
#include "runtime/data/npy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "runtime/base/limits.hpp"
#include "runtime/base/unique_fd.hpp"
#include "runtime/data/file_bytes.hpp"
#include "troupe/error.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

namespace {

constexpr std::int32_t max_label = (1 << 24) - 1;

[[noreturn]] void fail(const std::string& path, std::int64_t offset, const std::string& what) {
  throw data_error(quote_user_path(path) + ": byte " + std::to_string(offset) + ": " + what);
}

[[noreturn]] void fail(const npy_array& array, std::int64_t offset, const std::string& what) {
  throw data_error(array.name + ": byte " + std::to_string(offset) + ": " + what);
}

/// The first `bytes` bytes of an array's data.
std::vector<unsigned char> read_data(const npy_array& array, std::int64_t bytes) {
  std::vector<unsigned char> out(static_cast<std::size_t>(bytes));
  if (array.memory != nullptr) {
    std::memcpy(out.data(), array.memory.get() + array.header.data_offset, out.size());
    return out;
  }
  auto file = open_for_reading(array.path);
  if (!read_at(file.get(), out.data(), out.size(), array.header.data_offset))
    fail(array, array.header.data_offset, "the data ends early");
  return out;
}

struct type_info {
  std::string_view descr;
  npy_type type;
  std::int64_t bytes;
};

// '|' (not applicable) for one-byte types, '<' little-endian: this machine's order.
constexpr type_info known_types[] = {
    {"|u1", npy_type::u8, 1},  {"|i1", npy_type::i8, 1},  {"<i2", npy_type::i16, 2},
    {"<i4", npy_type::i32, 4}, {"<i8", npy_type::i64, 8}, {"<u2", npy_type::u16, 2},
    {"<u4", npy_type::u32, 4}, {"<f2", npy_type::f16, 2},
    {"<f4", npy_type::f32, 4}, {"<f8", npy_type::f64, 8}};

/// The value of `key` in the header's dict text: the characters after "'key':" up to the
/// end of the value (a quoted string, a tuple, or a word). Empty when it is not there.
std::string dict_value(const std::string& dict, const std::string& key) {
  const auto at = dict.find("'" + key + "'");
  if (at == std::string::npos)
    return "";
  auto i = dict.find(':', at);
  if (i == std::string::npos)
    return "";
  ++i;
  while (i < dict.size() && dict[i] == ' ')
    ++i;
  if (i >= dict.size())
    return "";
  const char open = dict[i];
  std::size_t end;
  if (open == '\'' || open == '"')
    end = dict.find(open, i + 1);
  else if (open == '(')
    end = dict.find(')', i + 1);
  else
    end = dict.find_first_of(",}", i) - 1;
  if (end == std::string::npos || end < i)
    return "";
  return dict.substr(i, end - i + 1);
}

std::vector<std::int64_t> parse_shape(const std::string& path, std::int64_t offset,
                                      const std::string& text) {
  // "(3, 784)", "(3,)", "()"
  std::vector<std::int64_t> shape;
  std::size_t i = 1;
  while (i + 1 < text.size()) {
    while (i + 1 < text.size() && (text[i] == ' ' || text[i] == ','))
      ++i;
    if (i + 1 >= text.size())
      break;
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (i + 1 < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (value > limits::max_tensor_elements)
        fail(path, offset, "a dimension of 'shape' " + quote_user_text(text) +
                               " is larger than any troupe reads");
      value = value * 10 + (text[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0)
      fail(path, offset, "'shape' should be a tuple of integers, not " + quote_user_text(text));
    shape.push_back(value);
  }
  return shape;
}

/// The dict of a header, checked, into `out`.
void read_dict(const std::string& path, std::int64_t offset, const std::string& dict,
               npy_header& out) {
  const auto descr = dict_value(dict, "descr");
  const auto order = dict_value(dict, "fortran_order");
  const auto shape = dict_value(dict, "shape");
  if (descr.size() < 2 || order.empty() || shape.size() < 2 || shape.front() != '(')
    fail(path, offset,
         "the header should be a dict with 'descr', 'fortran_order' and 'shape', not " +
             quote_user_text(dict));
  const auto type = descr.substr(1, descr.size() - 2);
  const auto* known = std::find_if(std::begin(known_types), std::end(known_types),
                                   [&](const type_info& t) { return t.descr == type; });
  if (known == std::end(known_types)) {
    std::string why = "dtype " + quote_user_text(type) + " is not one troupe reads";
    if (!type.empty() && type.front() == '>')
      why += " (big-endian: save it little-endian, e.g. x.astype(x.dtype.newbyteorder('<')))";
    else if (type == "|O" || type == "O")
      why += " (an object array: save numbers, not Python objects)";
    fail(path, offset, why + "; expected uint8, uint16, uint32, int8, int16, int32, int64, "
                             "float16, float32 or float64");
  }
  out.type = known->type;
  out.item_bytes = known->bytes;
  if (order != "False")
    fail(path, offset, "fortran_order is " + quote_user_text(order) +
                           "; troupe reads C order (save np.ascontiguousarray(x))");
  out.shape = parse_shape(path, offset, shape);
  out.elements = 1;
  for (const auto d : out.shape) {
    const auto product = checked_multiply(out.elements, d);
    if (!product || *product > limits::max_data_elements)
      fail(path, offset, "'shape' " + quote_user_text(shape) + " holds more than " +
                             std::to_string(limits::max_data_elements) +
                             " values, the most troupe reads from one file");
    out.elements = *product;
  }
}

}  // namespace

npy_header read_npy_header(const std::string& path, std::int64_t base, std::int64_t length) {
  auto file = open_for_reading(path);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0)
    throw data_error(quote_user_path(path) + ": cannot read its size: " + std::strerror(errno));
  // Offsets below count from `base`; messages name them in the file.
  const std::int64_t size = length >= 0 ? std::min<std::int64_t>(length, info.st_size - base)
                                        : info.st_size - base;
  auto fail = [&path, base](std::int64_t offset, const std::string& what) {
    troupe::fail(path, base + offset, what);
  };
  auto read_at = [fd = file.get(), base](void* out, std::size_t bytes, std::int64_t offset) {
    return troupe::read_at(fd, out, bytes, base + offset);
  };
  unsigned char start[12] = {};
  if (size < 10 || !read_at(start, 10, 0) ||
      std::memcmp(start, "\x93NUMPY", 6) != 0)
    fail(0, "not a NumPy .npy file (it should start with \\x93NUMPY)");
  npy_header out;
  out.major_version = start[6];
  if (start[6] < 1 || start[6] > 3 || start[7] != 0)
    fail(6, "format version " + std::to_string(start[6]) + "." + std::to_string(start[7]) +
                      "; troupe reads 1.0, 2.0 and 3.0");
  std::int64_t header_bytes = start[8] | (start[9] << 8);
  std::int64_t dict_at = 10;
  if (start[6] >= 2) {
    if (size < 12 || !read_at(start + 10, 2, 10))
      fail(10, "the file ends inside the header's length");
    header_bytes = static_cast<std::int64_t>(start[8]) | (static_cast<std::int64_t>(start[9]) << 8) |
                   (static_cast<std::int64_t>(start[10]) << 16) |
                   (static_cast<std::int64_t>(start[11]) << 24);
    dict_at = 12;
  }
  constexpr std::int64_t max_header_bytes = 1 << 20;  // NumPy writes a few hundred
  if (header_bytes > max_header_bytes || dict_at + header_bytes > size)
    fail(dict_at, "the header claims " + std::to_string(header_bytes) + " bytes, but " +
                            (header_bytes > max_header_bytes
                                 ? "no .npy header is longer than " +
                                       std::to_string(max_header_bytes)
                                 : "the file has " + std::to_string(size - dict_at) +
                                       " after its start"));
  std::string dict(static_cast<std::size_t>(header_bytes), '\0');
  if (!read_at(dict.data(), dict.size(), dict_at))
    fail(dict_at, "the file ends inside the header");
  read_dict(path, base + dict_at, dict, out);
  out.data_offset = base + dict_at + header_bytes;
  const auto data_bytes = out.elements * out.item_bytes;  // <= 2^40 * 8: no overflow
  if (size - (out.data_offset - base) < data_bytes)
    fail(out.data_offset - base,
         "shape " + shape_to_string(out.shape) + " of " + std::to_string(out.item_bytes) +
             "-byte values needs " + std::to_string(data_bytes) + " bytes of data, but the file "
             "has " + std::to_string(size - (out.data_offset - base)) + " (is it truncated?)");
  return out;
}

namespace {

/// IEEE half to float (subnormals, infinities and NaN included).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

/// Calls `each(i, value)` for the `count` values of `type` at `in`, value a double.
template <class Each>
void for_each_value(npy_type type, const unsigned char* in, std::int64_t count, Each each) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < count; ++i) {
      T value;
      std::memcpy(&value, in + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
      each(i, static_cast<double>(value));
    }
  };
  switch (type) {
    case npy_type::u8: typed(std::uint8_t{}); return;
    case npy_type::i8: typed(std::int8_t{}); return;
    case npy_type::i16: typed(std::int16_t{}); return;
    case npy_type::u16: typed(std::uint16_t{}); return;
    case npy_type::u32: typed(std::uint32_t{}); return;
    case npy_type::i32: typed(std::int32_t{}); return;
    case npy_type::i64: typed(std::int64_t{}); return;
    case npy_type::f32: typed(float{}); return;
    case npy_type::f64: typed(double{}); return;
    case npy_type::f16:
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        each(i, static_cast<double>(half_to_float(h)));
      }
      return;
  }
}

/// The rows of one features file (Note [rows from a file]).
class npy_rows final : public feature_rows {
 public:
  npy_rows(const npy_array& array, const feature_normalisation& n, file_access access)
      : path_(array.path), header_(array.header) {
    const auto& shape = header_.shape;
    if (shape.empty() || shape.front() < 1 || header_.elements < 1)
      fail(array, array.base + 8, "features of shape " + shape_to_string(shape) +
                                      "; expected (N, ...) with at least one sample of at least "
                                      "one value");
    count_ = shape.front();
    features_ = header_.elements / count_;
    if (features_ > limits::max_sample_features)
      fail(array, array.base + 8, "samples of " + std::to_string(features_) +
                                      " values; troupe reads at most " +
                                      std::to_string(limits::max_sample_features) + " a sample");
    row_bytes_ = features_ * header_.item_bytes;
    norm_ = resolve_normalisation(n, features_, array.name);
    build_byte_table();
    file_ = array.memory != nullptr
                ? std::make_unique<file_bytes>(array.memory, array.name)
                : std::make_unique<file_bytes>(path_, header_.data_offset + count_ * row_bytes_,
                                               access);
  }

  std::int64_t count() const { return count_; }
  std::int64_t features() const { return features_; }

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override {
    thread_local std::vector<unsigned char> buffer;  // a row read with pread
    for (std::size_t i = first; i < last; ++i, out += features_) {
      const unsigned char* bytes = file_->at(header_.data_offset + picked[i] * row_bytes_,
                                             static_cast<std::size_t>(row_bytes_), buffer);
      if (norm_.identity && header_.type == npy_type::u8)  // exact, and vectorised
        for (std::int64_t f = 0; f < features_; ++f)
          out[f] = static_cast<float>(bytes[f]);
      else if (!byte_table_.empty())  // one-byte values: what each of the 256 becomes
        for (std::int64_t f = 0; f < features_; ++f)
          out[f] = byte_table_[bytes[f]];
      else if (norm_.identity && header_.type == npy_type::f32)
        std::memcpy(out, bytes, static_cast<std::size_t>(row_bytes_));
      else if (norm_.identity)
        for_each_value(header_.type, bytes, features_,
                       [out](std::int64_t f, double v) { out[f] = static_cast<float>(v); });
      else  // in double, as the IDX source normalises its pixels (dataset.cpp)
        for_each_value(header_.type, bytes, features_,
                       [this, out](std::int64_t f, double v) { out[f] = norm_.apply(f, v); });
    }
  }

 private:
  /// One-byte values normalised alike (one scale, mean and std for every feature): a table
  /// of the 256 results, computed by the same double arithmetic as each would be, as the IDX
  /// source does for its pixels. A gather is then a lookup a value (it was 0.18 GB/s of
  /// floats computed one by one; `troupe calibrate`'s "a batch's gather"). Unnormalised
  /// bytes skip it: a plain conversion, which the compiler vectorises, read 1.6 M rows of 784 a
  /// second through the table and 2.5-3.0 M without it (bench/data_loader.py).
  void build_byte_table() {
    if (header_.type != npy_type::u8 && header_.type != npy_type::i8)
      return;
    if (!norm_.uniform)
      return;
    byte_table_.resize(256);
    for (int b = 0; b < 256; ++b) {
      const double v = header_.type == npy_type::u8
                           ? static_cast<double>(b)
                           : static_cast<double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(b)));
      byte_table_[static_cast<std::size_t>(b)] =
          norm_.identity ? static_cast<float>(v) : norm_.apply(0, v);
    }
  }

  std::string path_;
  npy_header header_;
  std::unique_ptr<file_bytes> file_;
  std::int64_t count_ = 0;     // N
  std::int64_t features_ = 0;  // D
  std::int64_t row_bytes_ = 0;
  per_feature_normalisation norm_;
  std::vector<float> byte_table_;  // (256) for one-byte values normalised alike; else empty
};

}  // namespace

npy_array memory_array(const std::string& name, const std::string& descr,
                       const std::vector<std::int64_t>& shape,
                       std::shared_ptr<const unsigned char> memory) {
  // Checked by the same reader as a file's header dict, written as NumPy writes it.
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  npy_array out;
  out.path = name;
  out.name = quote_user_path(name);
  read_dict(name, 0, dict, out.header);
  out.header.data_offset = 0;
  out.memory = std::move(memory);
  return out;
}

npy_array npy_file_array(const std::string& path) {
  return npy_array{path, read_npy_header(path), quote_user_path(path), 0};
}

std::shared_ptr<const feature_rows> open_npy_rows(const std::string& path,
                                                  const feature_normalisation& normalisation,
                                                  file_access access) {
  return open_npy_rows(npy_file_array(path), normalisation, access);
}

std::shared_ptr<const feature_rows> open_npy_rows(const npy_array& array,
                                                  const feature_normalisation& normalisation,
                                                  file_access access) {
  return std::make_shared<npy_rows>(array, normalisation, access);
}

std::vector<std::int32_t> read_npy_labels(const npy_array& array) {
  const auto& header = array.header;
  const auto at = array.base + 8;  // the header's dict
  if (header.shape.empty() || header.shape.size() > 2 ||
      (header.shape.size() == 2 && header.shape[1] != 1))
    fail(array, at, "targets of shape " + shape_to_string(header.shape) +
                        "; expected (N) or (N, 1): one class label a sample (K float targets a "
                        "sample are for a loss such as \"mse\" or \"bce_with_logits\")");
  if (header.type == npy_type::f16 || header.type == npy_type::f32 ||
      header.type == npy_type::f64)
    fail(array, at, "targets of a floating-point type; class labels are integers (float "
                    "targets are for a loss such as \"mse\" or \"bce_with_logits\")");
  const auto count = header.shape.front();
  if (count > limits::max_samples)
    fail(array, at, std::to_string(count) + " targets; troupe reads at most " +
                        std::to_string(limits::max_samples) + " samples");
  const auto bytes = read_data(array, count * header.item_bytes);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t value = 0;
    std::memcpy(&value, bytes.data() + i * header.item_bytes,
                static_cast<std::size_t>(header.item_bytes));
    // Sign-extend the narrower signed types (little-endian: the low bytes came first).
    const auto bits = 8 * header.item_bytes;
    const bool is_unsigned = header.type == npy_type::u8 || header.type == npy_type::u16 ||
                             header.type == npy_type::u32;
    if (!is_unsigned && bits < 64 && (value >> (bits - 1)) & 1)
      value -= std::int64_t{1} << bits;
    if (value < 0 || value > max_label)
      fail(array, header.data_offset + i * header.item_bytes,
           "target " + std::to_string(i) + " is " + std::to_string(value) +
               "; class labels are in 0 .. " + std::to_string(max_label));
    labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(value);
  }
  return labels;
}

std::vector<std::int32_t> read_npy_labels(const std::string& path) {
  return read_npy_labels(npy_file_array(path));
}

npy_values read_npy_values(const npy_array& array) {
  const auto& header = array.header;
  const auto at = array.base + 8;
  if (header.shape.empty() || header.shape.size() > 2 || header.elements == 0)
    fail(array, at, "targets of shape " + shape_to_string(header.shape) +
                        "; expected (N) or (N, K): K float targets a sample");
  npy_values out;
  out.count = header.shape.front();
  out.outputs = header.shape.size() == 2 ? header.shape[1] : 1;
  if (header.elements > limits::max_samples)
    fail(array, at, std::to_string(header.elements) + " target values; troupe reads at most " +
                        std::to_string(limits::max_samples));
  const auto bytes = read_data(array, header.elements * header.item_bytes);
  out.values.resize(static_cast<std::size_t>(header.elements));
  for_each_value(header.type, bytes.data(), header.elements, [&](std::int64_t i, double v) {
    const auto value = static_cast<float>(v);
    if (!std::isfinite(value))
      fail(array, header.data_offset + i * header.item_bytes,
           "target value " + std::to_string(i) + " is " + std::to_string(v) +
               "; targets must be finite float32 numbers");
    out.values[static_cast<std::size_t>(i)] = value;
  });
  return out;
}

npy_values read_npy_values(const std::string& path) {
  return read_npy_values(npy_file_array(path));
}

namespace {

dataset load_split(const npy_split_arrays& arrays, const feature_normalisation& normalisation,
                   target_kind kind) {
  auto rows = std::make_shared<npy_rows>(arrays.features, normalisation, file_access::automatic);
  dataset out;
  std::int64_t count = 0;
  if (kind == target_kind::values) {
    auto values = read_npy_values(arrays.targets);
    out.values = std::move(values.values);
    out.outputs = values.outputs;
    count = values.count;
  } else {
    out.labels = read_npy_labels(arrays.targets);
    count = static_cast<std::int64_t>(out.labels.size());
  }
  if (count != rows->count())
    throw data_error(arrays.features.name + " has " + std::to_string(rows->count()) +
                     " samples, but " + arrays.targets.name + " has " + std::to_string(count) +
                     " targets; they must agree");
  out.count = rows->count();
  out.features = rows->features();
  out.rows = std::move(rows);
  return out;
}

}  // namespace

dataset_split load_arrays(const npy_split_arrays& train, const npy_split_arrays* test,
                          const feature_normalisation& normalisation, target_kind targets) {
  dataset_split out;
  out.train = load_split(train, normalisation, targets);
  const auto& train_targets = train.targets.name;
  if (test == nullptr) {  // [data] validation instead
    leave_test_empty(out, targets == target_kind::class_ids, train_targets);
    return out;
  }
  out.test = load_split(*test, normalisation, targets);
  if (out.train.features != out.test.features)
    throw data_error(test->features.name + " has samples of " +
                     std::to_string(out.test.features) + " values, but " +
                     train.features.name + " has " + std::to_string(out.train.features) +
                     "; the splits must agree");
  if (targets == target_kind::values) {
    if (out.train.outputs != out.test.outputs)
      throw data_error(test->targets.name + " has " + std::to_string(out.test.outputs) +
                       " targets a sample, but " + train_targets + " has " +
                       std::to_string(out.train.outputs) + "; the splits must agree");
    return out;
  }
  count_classes(out, train_targets);
  return out;
}

dataset_split load_npy(const std::string& train_features, const std::string& train_targets,
                       const std::string& test_features, const std::string& test_targets,
                       const feature_normalisation& normalisation, target_kind targets) {
  const npy_split_arrays train{npy_file_array(train_features), npy_file_array(train_targets)};
  if (test_features.empty())
    return load_arrays(train, nullptr, normalisation, targets);
  const npy_split_arrays test{npy_file_array(test_features), npy_file_array(test_targets)};
  return load_arrays(train, &test, normalisation, targets);
}

std::string npy_float_header(const std::vector<std::int64_t>& shape) {
  std::string dims;
  for (const auto d : shape)
    dims += std::to_string(d) + ", ";
  if (!shape.empty())  // "(4, 2)", but "(4,)" for one dimension
    dims.resize(dims.size() - (shape.size() > 1 ? 2 : 1));
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + dict.size() + 1) % 64 != 0)
    dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  return out + dict;
}

}  // namespace troupe
