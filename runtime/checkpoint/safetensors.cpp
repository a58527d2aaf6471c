// safetensors.cpp: the writer and the hardened reader declared in safetensors.hpp.
//
// The reader checks, in order: the 8-byte length (present, within the file, at most
// 100 MB), the header's first byte, its nesting depth and JSON syntax (json_input.hpp),
// then each entry's fields, and last that the entries tile the data block exactly. Every
// refusal is a data_error that starts with "safetensors file '<source>': ". It does not
// convert dtypes or byte orders: troupe runs on little-endian machines only (checked below).
#include "runtime/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/base/json_input.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; troupe writes host memory as it is");

namespace troupe {

std::size_t size_of(safetensors_dtype type) {
  switch (type) {
    case safetensors_dtype::f32:
    case safetensors_dtype::i32:
      return 4;
    case safetensors_dtype::f64:
    case safetensors_dtype::i64:
      return 8;
    case safetensors_dtype::bf16:
      return 2;
  }
  return 0;
}

const char* to_string(safetensors_dtype type) {
  switch (type) {
    case safetensors_dtype::f32:
      return "F32";
    case safetensors_dtype::f64:
      return "F64";
    case safetensors_dtype::i32:
      return "I32";
    case safetensors_dtype::i64:
      return "I64";
    case safetensors_dtype::bf16:
      return "BF16";
  }
  return "?";
}

std::optional<safetensors_dtype> safetensors_dtype_named(const std::string& name) {
  for (auto type : {safetensors_dtype::f32, safetensors_dtype::f64, safetensors_dtype::i32,
                    safetensors_dtype::i64, safetensors_dtype::bf16})
    if (name == to_string(type))
      return type;
  return std::nullopt;
}

safetensors_dtype to_safetensors_dtype(dtype type) {
  switch (type) {
    case dtype::f32:
      return safetensors_dtype::f32;
    case dtype::i32:
      return safetensors_dtype::i32;
    case dtype::bf16:
      return safetensors_dtype::bf16;
  }
  TROUPE_CHECK(false, "dtype " << static_cast<int>(type) << " has no safetensors name");
}

// ---- writing ----

namespace {

// The padded header text for `tensors` (in their order) and `metadata`, and the size of
// the data block that follows it.
std::pair<std::string, std::uint64_t> header_for(
    const std::vector<safetensors_tensor_ref>& tensors,
    const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order: "__metadata__" first, then the tensors in file
  // order, so the same tensors always give the same bytes.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    TROUPE_CHECK(!t.name.empty() && t.name != "__metadata__",
                 "a tensor to write is named '" << t.name << "'");
    TROUPE_CHECK(!header.contains(t.name), "two tensors to write are named '" << t.name << "'");
    TROUPE_CHECK(t.shape.size() <= safetensors_max_rank,
                 "tensor '" << t.name << "' has rank " << t.shape.size());
    std::uint64_t bytes = size_of(t.dtype);
    for (auto d : t.shape) {
      TROUPE_CHECK(d >= 0, "tensor '" << t.name << "' has shape " << shape_to_string(t.shape));
      TROUPE_CHECK(d == 0 || bytes <= std::numeric_limits<std::uint64_t>::max() /
                                          static_cast<std::uint64_t>(d),
                   "tensor '" << t.name << "' of shape " << shape_to_string(t.shape)
                              << " has more bytes than 64 bits count");
      bytes *= static_cast<std::uint64_t>(d);
    }
    TROUPE_CHECK(t.data != nullptr || bytes == 0, "tensor '" << t.name << "' has no data");
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    TROUPE_CHECK(false, "cannot write a safetensors header: " << e.what());
  }
  // Padding to a multiple of 8 puts the data block at an 8-byte boundary of the file.
  text.append((8 - text.size() % 8) % 8, ' ');
  return {std::move(text), offset};
}

void write_length(std::uint64_t length, std::uint8_t* out) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<std::uint8_t>(length >> (8 * i));
}

}  // namespace

std::vector<std::uint8_t> serialize_safetensors(
    const std::vector<safetensors_tensor_ref>& tensors,
    const std::map<std::string, std::string>& metadata) {
  const auto [header, data_bytes] = header_for(tensors, metadata);
  std::vector<std::uint8_t> out(8 + header.size());
  write_length(header.size(), out.data());
  std::memcpy(out.data() + 8, header.data(), header.size());
  out.reserve(out.size() + data_bytes);
  for (const auto& t : tensors) {
    const auto* begin = static_cast<const std::uint8_t*>(t.data);
    const auto bytes = static_cast<std::size_t>(element_count(t.shape)) * size_of(t.dtype);
    if (bytes > 0)
      out.insert(out.end(), begin, begin + bytes);
  }
  return out;
}

written_file write_safetensors(const std::string& path,
                               const std::vector<safetensors_tensor_ref>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  const auto layout = header_for(tensors, metadata);
  const std::string& header = layout.first;
  return write_file_atomically(path, [&](atomic_file_writer& out) {
    std::uint8_t length[8];
    write_length(header.size(), length);
    out.write(length, sizeof length);
    out.write(header.data(), header.size());
    for (const auto& t : tensors)
      out.write(t.data, static_cast<std::size_t>(element_count(t.shape)) * size_of(t.dtype));
  });
}

// ---- reading ----

namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& message) {
  throw data_error("safetensors file '" + source + "': " + message);
}

std::string tensor_label(const std::string& name) { return "tensor " + quote_user_text(name); }

// The length N in the first 8 bytes of a file of `file_size` bytes, checked against it.
std::uint64_t checked_header_length(const std::uint8_t* first8, std::uint64_t file_size,
                                    const std::string& source) {
  if (file_size < 8)
    refuse(source, "is " + std::to_string(file_size) +
                       " bytes long; expected at least the 8-byte header length that starts "
                       "every safetensors file (is the file truncated?)");
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= std::uint64_t{first8[i]} << (8 * i);
  if (length > safetensors_max_header_bytes)
    refuse(source, "header length " + std::to_string(length) + " is above the limit of " +
                       std::to_string(safetensors_max_header_bytes) +
                       " bytes; is this a safetensors file?");
  if (length > file_size - 8)
    refuse(source, "header length " + std::to_string(length) + " runs past the end of the " +
                       std::to_string(file_size) + "-byte file (room for " +
                       std::to_string(file_size - 8) +
                       " bytes); the file is truncated or not a safetensors file");
  return length;
}

// A JSON value that must be a non-negative integer fitting `max`; nothing if it is not.
std::optional<std::uint64_t> non_negative_integer(const nlohmann::json& value, std::uint64_t max) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    return v <= max ? std::optional<std::uint64_t>{v} : std::nullopt;
  }
  // A parsed non-negative integer is always unsigned in nlohmann; a built one may not be.
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

safetensors_entry parse_entry(const std::string& name, const nlohmann::json& value,
                              std::uint64_t data_bytes, const std::string& source) {
  const auto label = tensor_label(name);
  if (!value.is_object())
    refuse(source, label + " is " + describe_json_value(value) +
                       "; expected an object with dtype, shape and data_offsets");
  for (const auto& field : value.items())
    if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets")
      refuse(source, label + " has the field " + quote_user_text(field.key()) +
                         "; expected only dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!value.contains(field))
      refuse(source, label + " has no field '" + field + "'");
  safetensors_entry entry;
  entry.name = name;

  const auto& type = value["dtype"];
  if (!type.is_string())
    refuse(source, label + ": dtype is " + describe_json_value(type) + "; expected a string");
  const auto known = safetensors_dtype_named(type.get<std::string>());
  if (!known)
    refuse(source, label + ": dtype " + quote_user_text(type.get<std::string>()) +
                       " is not one troupe reads; expected F32, F64, I32, I64 or BF16");
  entry.dtype = *known;

  const auto& shape = value["shape"];
  if (!shape.is_array())
    refuse(source, label + ": shape is " + describe_json_value(shape) +
                       "; expected an array of dimensions");
  if (shape.size() > safetensors_max_rank)
    refuse(source, label + ": shape has " + std::to_string(shape.size()) +
                       " dimensions; expected at most " + std::to_string(safetensors_max_rank));
  std::uint64_t bytes = size_of(entry.dtype);
  bool overflow = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto d = non_negative_integer(shape[i], std::numeric_limits<std::int64_t>::max());
    if (!d)
      refuse(source, label + ": dimension " + std::to_string(i) + " of the shape is " +
                         describe_json_value(shape[i]) + "; expected a non-negative integer");
    entry.shape.push_back(static_cast<std::int64_t>(*d));
    if (*d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / *d)
      overflow = true;
    else
      bytes *= *d;
  }
  // A zero dimension anywhere makes the tensor empty, even after others overflowed.
  if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
    bytes = 0;
    overflow = false;
  }
  if (overflow || bytes > data_bytes)
    refuse(source, label + ": shape " + shape_to_string(entry.shape) + " of " +
                       to_string(entry.dtype) + " needs " +
                       (overflow ? std::string{"more bytes than 64 bits count"}
                                 : std::to_string(bytes) + " bytes") +
                       "; the data block holds " + std::to_string(data_bytes));
  entry.bytes = bytes;

  const auto& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    refuse(source, label + ": data_offsets is " + describe_json_value(offsets) +
                       "; expected an array [begin, end]");
  const auto begin = non_negative_integer(offsets[0], data_bytes);
  const auto end = non_negative_integer(offsets[1], data_bytes);
  if (!begin || !end || *begin > *end)
    refuse(source, label + ": data_offsets " + offsets.dump() + " are not [begin, end] with " +
                       "0 <= begin <= end <= " + std::to_string(data_bytes) +
                       " (the size of the data block)");
  if (*end - *begin != bytes)
    refuse(source, label + ": data_offsets " + offsets.dump() + " hold " +
                       std::to_string(*end - *begin) + " bytes; expected " + std::to_string(bytes) +
                       " (shape " + shape_to_string(entry.shape) + " of " + to_string(entry.dtype) +
                       ", " + std::to_string(size_of(entry.dtype)) + " bytes each)");
  entry.begin = *begin;
  return entry;
}

// The entries and metadata of the header text [text, text + length), checked against a
// data block of `data_bytes` bytes.
std::pair<std::vector<safetensors_entry>, std::map<std::string, std::string>> parse_header(
    const char* text, std::uint64_t length, std::uint64_t data_bytes, const std::string& source) {
  if (length == 0 || text[0] != '{')
    refuse(source, "the header " +
                       (length == 0 ? std::string{"is empty"}
                                    : "starts with " + quote_user_text(std::string(text, 1))) +
                       "; expected a JSON object starting with '{'");
  const auto header =
      parse_untrusted_json(text, text + length, "safetensors file '" + source + "': header");
  if (!header.is_object())
    refuse(source, "the header is " + describe_json_value(header) + "; expected a JSON object");

  std::vector<safetensors_entry> entries;
  std::map<std::string, std::string> metadata;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object())
        refuse(source, "__metadata__ is " + describe_json_value(item.value()) +
                           "; expected an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string())
          refuse(source, "__metadata__ value of " + quote_user_text(m.key()) + " is " +
                             describe_json_value(m.value()) + "; expected a string");
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (item.key().empty())
      refuse(source, "a tensor has an empty name; expected a name such as 'fc1.weight'");
    entries.push_back(parse_entry(item.key(), item.value(), data_bytes, source));
  }

  // Note [entries tile the data block]: the format requires the tensors to cover the
  // data block exactly, in some order. Sorted by offset, each must begin where the one
  // before ended; a gap is a hole (bytes no tensor owns), a step back is an overlap.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.begin, a.bytes) < std::make_pair(b.begin, b.bytes);
  });
  std::uint64_t expected = 0;
  const safetensors_entry* previous = nullptr;
  for (const auto& e : entries) {
    if (e.begin > expected)
      refuse(source, "bytes [" + std::to_string(expected) + ", " + std::to_string(e.begin) +
                         ") of the data block belong to no tensor (a hole before " +
                         tensor_label(e.name) + "); expected the tensors to cover it exactly");
    if (e.begin < expected)
      refuse(source, tensor_label(e.name) + " at [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.begin + e.bytes) + ") overlaps " +
                         tensor_label(previous->name) + " at [" + std::to_string(previous->begin) +
                         ", " + std::to_string(expected) +
                         "); expected each byte to belong to one tensor");
    expected = e.begin + e.bytes;
    previous = &e;
  }
  if (expected != data_bytes)
    refuse(source, "bytes [" + std::to_string(expected) + ", " + std::to_string(data_bytes) +
                       ") at the end of the data block belong to no tensor; expected the "
                       "tensors to cover it exactly (is the file two files joined?)");
  return {std::move(entries), std::move(metadata)};
}

// The size of the regular file at `path`, checked against the limit.
std::uint64_t checked_file_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto status = fs::status(path, error);
  if (error && status.type() == fs::file_type::none)
    refuse(path, "cannot look at it: " + error.message());
  if (!fs::exists(status))
    refuse(path, "does not exist");
  if (!fs::is_regular_file(status))
    refuse(path,
           fs::is_directory(status) ? "is a directory; expected a file" : "is not a regular file");
  const auto size = fs::file_size(path, error);
  if (error)
    refuse(path, "cannot read its size: " + error.message());
  if (size > safetensors_max_file_bytes)
    refuse(path, "is " + std::to_string(size) +
                     " bytes; troupe reads safetensors files of at most " +
                     std::to_string(safetensors_max_file_bytes) + " bytes (16 GiB)");
  return size;
}

// Reads exactly `size` bytes from `fd` into `out`; a short read means the file shrank.
void read_exactly(int fd, std::uint8_t* out, std::uint64_t size, const std::string& path) {
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, out + done, static_cast<std::size_t>(size - done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      refuse(path, "read failed after " + std::to_string(done) + " bytes: " + std::strerror(errno));
    if (got == 0)
      refuse(path, "ended after " + std::to_string(done) + " bytes while " + std::to_string(size) +
                       " were expected (did it change while read?)");
    done += static_cast<std::uint64_t>(got);
  }
}

class read_only_fd {
 public:
  explicit read_only_fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0)
      refuse(path, std::string{"cannot open it for reading: "} + std::strerror(errno));
  }
  ~read_only_fd() { ::close(fd_); }
  read_only_fd(const read_only_fd&) = delete;
  read_only_fd& operator=(const read_only_fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

safetensors_file parse_safetensors(std::vector<std::uint8_t> bytes, const std::string& source) {
  const std::uint64_t length = checked_header_length(bytes.data(), bytes.size(), source);
  safetensors_file file;
  std::tie(file.entries_, file.metadata_) = parse_header(
      reinterpret_cast<const char*>(bytes.data() + 8), length, bytes.size() - 8 - length, source);
  file.source_ = source;
  file.bytes_ = std::move(bytes);
  file.data_start_ = 8 + length;
  file.has_data_ = true;
  return file;
}

safetensors_file parse_safetensors(const std::uint8_t* data, std::size_t size,
                                   const std::string& source) {
  return parse_safetensors(std::vector<std::uint8_t>(data, data + size), source);
}

safetensors_file read_safetensors(const std::string& path) {
  const auto size = checked_file_size(path);
  read_only_fd fd{path};
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  read_exactly(fd.get(), bytes.data(), size, path);
  return parse_safetensors(std::move(bytes), path);
}

safetensors_file read_safetensors_header(const std::string& path) {
  const auto size = checked_file_size(path);
  read_only_fd fd{path};
  std::uint8_t first8[8] = {};
  read_exactly(fd.get(), first8, std::min<std::uint64_t>(size, 8), path);
  const auto length = checked_header_length(first8, size, path);
  std::string header(static_cast<std::size_t>(length), '\0');
  read_exactly(fd.get(), reinterpret_cast<std::uint8_t*>(header.data()), length, path);
  safetensors_file file;
  std::tie(file.entries_, file.metadata_) =
      parse_header(header.data(), length, size - 8 - length, path);
  file.source_ = path;
  file.data_start_ = 8 + length;
  return file;
}

const safetensors_entry* safetensors_file::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name)
      return &e;
  return nullptr;
}

const safetensors_entry& safetensors_file::at(const std::string& name) const {
  if (const auto* e = find(name))
    return *e;
  std::vector<std::string> names;
  std::string listed;
  for (const auto& e : entries_) {
    names.push_back(e.name);
    if (names.size() <= 10)
      listed += (names.size() > 1 ? ", " : "") + quote_user_text(e.name);
  }
  if (names.size() > 10)
    listed += ", ... (" + std::to_string(names.size()) + " in all)";
  refuse(source_, "has no tensor " + quote_user_text(name) + did_you_mean(name, names) +
                      (names.empty() ? "; it holds no tensors" : "; it holds " + listed));
}

const std::uint8_t* safetensors_file::data(const safetensors_entry& entry) const {
  TROUPE_CHECK(has_data_, "safetensors file '" << source_ << "' was read without its data");
  TROUPE_CHECK(data_start_ + entry.begin + entry.bytes <= bytes_.size(),
               "tensor '" << entry.name << "' is not an entry of '" << source_ << "'");
  return bytes_.data() + data_start_ + entry.begin;
}

std::vector<float> safetensors_file::floats(const std::string& name) const {
  const auto& entry = at(name);
  if (entry.dtype != safetensors_dtype::bf16)
    return values<float>(name);  // checks for F32
  std::vector<float> out(static_cast<std::size_t>(entry.bytes / 2));
  const std::uint8_t* bytes = data(entry);
  for (std::size_t i = 0; i < out.size(); ++i) {
    // A bfloat16 is the top half of a float32 (little-endian, as the format is).
    const std::uint32_t bits =
        (static_cast<std::uint32_t>(bytes[2 * i]) | static_cast<std::uint32_t>(bytes[2 * i + 1]) << 8)
        << 16;
    std::memcpy(&out[i], &bits, sizeof bits);
  }
  return out;
}

void safetensors_file::check_dtype(const safetensors_entry& entry, safetensors_dtype wanted) const {
  if (entry.dtype != wanted)
    refuse(source_, tensor_label(entry.name) + " is " + to_string(entry.dtype) + "; expected " +
                        to_string(wanted));
}

}  // namespace troupe
