// tokens.cpp: token files, their vocabulary check, and the windows over them (tokens.hpp).
#include "runtime/data/tokens.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/data/npy.hpp"
#include "troupe/error.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

namespace {

/// The largest vocabulary: ids travel as float32 features, exact below 2^24.
constexpr std::int64_t max_vocabulary = std::int64_t{1} << 24;

class memory_tokens final : public token_ids {
 public:
  explicit memory_tokens(std::vector<std::int32_t> ids) : ids_(std::move(ids)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(ids_.size()); }
  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const override {
    std::copy_n(ids_.begin() + first, count, out);
  }

 private:
  std::vector<std::int32_t> ids_;
};

/// Ids of one integer type at a byte offset of a file, each checked once when opened.
class file_tokens final : public token_ids {
 public:
  file_tokens(const std::string& path, std::int64_t offset, std::int64_t count, npy_type type,
              std::int64_t item_bytes, file_access access)
      : path_(path), offset_(offset), count_(count), type_(type), item_bytes_(item_bytes),
        file_(path, offset + count * item_bytes, access) {}

  std::int64_t size() const override { return count_; }

  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const override {
    thread_local std::vector<unsigned char> buffer;
    const auto* bytes = file_.at(offset_ + first * item_bytes_,
                                 static_cast<std::size_t>(count * item_bytes_), buffer);
    convert(bytes, count, out);
  }

  /// Throws data_error at the first id outside [0, vocabulary), naming its index and byte.
  void check(std::int64_t vocabulary) const {
    constexpr std::int64_t chunk = std::int64_t{1} << 20;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(std::min(chunk, count_)));
    std::vector<unsigned char> buffer;
    for (std::int64_t first = 0; first < count_; first += chunk) {
      const auto n = std::min(chunk, count_ - first);
      const auto* bytes = file_.at(offset_ + first * item_bytes_,
                                   static_cast<std::size_t>(n * item_bytes_), buffer);
      widen(bytes, n, ids.data());
      for (std::int64_t i = 0; i < n; ++i) {
        const auto id = ids[static_cast<std::size_t>(i)];
        if (id < 0 || id >= vocabulary)
          throw data_error(
              quote_user_path(path_) + ": byte " +
              std::to_string(offset_ + (first + i) * item_bytes_) + ": token " +
              std::to_string(first + i) + " is " + std::to_string(id) +
              ", outside the vocabulary of " + std::to_string(vocabulary) + " (ids 0 .. " +
              std::to_string(vocabulary - 1) +
              "); is [data] vocab right, and dtype the one the file was written with?");
      }
    }
  }

 private:
  /// The ids at `bytes` as int64 (little-endian, sign-extended where the type is signed).
  void widen(const unsigned char* bytes, std::int64_t count, std::int64_t* out) const {
    auto typed = [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < count; ++i) {
        T value;
        std::memcpy(&value, bytes + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
        out[i] = static_cast<std::int64_t>(value);
      }
    };
    switch (type_) {
      case npy_type::u8: typed(std::uint8_t{}); return;
      case npy_type::i8: typed(std::int8_t{}); return;
      case npy_type::u16: typed(std::uint16_t{}); return;
      case npy_type::i16: typed(std::int16_t{}); return;
      case npy_type::u32: typed(std::uint32_t{}); return;
      case npy_type::i32: typed(std::int32_t{}); return;
      case npy_type::i64: typed(std::int64_t{}); return;
      case npy_type::f16:
      case npy_type::f32:
      case npy_type::f64: break;
    }
    TROUPE_CHECK(false, "token ids of a floating-point type");
  }

  /// The checked ids at `bytes` as int32 (every one is in [0, 2^24)).
  void convert(const unsigned char* bytes, std::int64_t count, std::int32_t* out) const {
    if (type_ == npy_type::u16) {  // nanoGPT's: the hot one
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t value;
        std::memcpy(&value, bytes + 2 * i, 2);
        out[i] = value;
      }
      return;
    }
    thread_local std::vector<std::int64_t> wide;
    wide.resize(static_cast<std::size_t>(count));
    widen(bytes, count, wide.data());
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = static_cast<std::int32_t>(wide[static_cast<std::size_t>(i)]);
  }

  std::string path_;
  std::int64_t offset_;      // bytes before the first id
  std::int64_t count_;       // ids
  npy_type type_;
  std::int64_t item_bytes_;
  file_bytes file_;
};

bool is_npy(const std::string& path) {
  auto file = open_for_reading(path);
  char magic[6] = {};
  return read_at(file.get(), magic, sizeof(magic), 0) && std::memcmp(magic, "\x93NUMPY", 6) == 0;
}

/// The windows of a split over ids [begin, end): features the ids, labels the next ids.
class window_rows final : public feature_rows {
 public:
  window_rows(std::shared_ptr<const token_ids> ids, std::int64_t begin, std::int64_t context,
              std::int64_t stride)
      : ids_(std::move(ids)), begin_(begin), context_(context), stride_(stride) {}

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override {
    thread_local std::vector<std::int32_t> ids;
    ids.resize(static_cast<std::size_t>(context_));
    for (std::size_t i = first; i < last; ++i, out += context_) {
      ids_->read(begin_ + picked[i] * stride_, context_, ids.data());
      std::transform(ids.begin(), ids.end(), out,
                     [](std::int32_t id) { return static_cast<float>(id); });
    }
  }

  bool holds_labels() const override { return true; }

  void gather_labels(const std::int64_t* picked, std::size_t first, std::size_t last,
                     std::int32_t* out) const override {
    for (std::size_t i = first; i < last; ++i, out += context_)
      ids_->read(begin_ + picked[i] * stride_ + 1, context_, out);
  }

 private:
  std::shared_ptr<const token_ids> ids_;
  std::int64_t begin_;    // the split's first id
  std::int64_t context_;  // T
  std::int64_t stride_;   // ids from one window's start to the next's: T tiled, 1 random
};

}  // namespace

std::shared_ptr<const token_ids> tokens_in_memory(std::vector<std::int32_t> ids) {
  return std::make_shared<memory_tokens>(std::move(ids));
}

std::shared_ptr<const token_ids> open_token_file(const std::string& path, const std::string& dtype,
                                                 std::int64_t vocabulary, file_access access) {
  TROUPE_CHECK(vocabulary >= 1 && vocabulary <= max_vocabulary, "vocabulary " << vocabulary);
  std::shared_ptr<file_tokens> out;
  if (is_npy(path)) {
    const auto header = read_npy_header(path);
    if (header.type == npy_type::f16 || header.type == npy_type::f32 ||
        header.type == npy_type::f64)
      throw data_error(quote_user_path(path) +
                       ": byte 8: token ids of a floating-point type; save "
                       "integers (np.uint16 or np.uint32)");
    if (header.elements < 1)
      throw data_error(quote_user_path(path) + ": byte 8: no token ids (shape " +
                       shape_to_string(header.shape) + ")");
    out = std::make_shared<file_tokens>(path, header.data_offset, header.elements, header.type,
                                        header.item_bytes, access);
  } else {
    const bool wide = dtype == "uint32";
    TROUPE_CHECK(wide || dtype == "uint16", "token dtype " << dtype);
    const std::int64_t item = wide ? 4 : 2;
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0)
      throw data_error(quote_user_path(path) + ": cannot read its size: " + std::strerror(errno));
    const std::int64_t size = info.st_size;
    if (size == 0 || size % item != 0)
      throw data_error(quote_user_path(path) + ": " + std::to_string(size) + " bytes, " +
                       (size == 0 ? std::string("no token ids")
                                  : "not a whole number of " + dtype + " ids (" +
                                        std::to_string(item) + " bytes each)") +
                       "; a token file holds ids one after another, as nanoGPT's "
                       "train.bin (is [data] dtype right?)");
    if (size / item > limits::max_data_elements)
      throw data_error(quote_user_path(path) + ": " + std::to_string(size / item) +
                       " token ids; troupe "
                       "reads at most " +
                       std::to_string(limits::max_data_elements) + " a file");
    out = std::make_shared<file_tokens>(path, 0, size / item, wide ? npy_type::u32 : npy_type::u16,
                                        item, access);
  }
  out->check(vocabulary);
  return out;
}

std::int64_t read_vocabulary_size(const std::string& path) {
  const auto text = read_file_capped(path, std::int64_t{1} << 20, "vocabulary file");
  // Nesting, syntax and repeated keys checked, its message bounded (json_input.hpp).
  const auto json =
      parse_untrusted_json(text.data(), text.data() + text.size(), quote_user_path(path));
  for (const char* key : {"vocab_size", "size"}) {
    if (!json.is_object() || !json.contains(key))
      continue;
    const auto& value = json.at(key);
    if (!value.is_number_integer() || value.get<std::int64_t>() < 2 ||
        value.get<std::int64_t>() > max_vocabulary)
      throw data_error(quote_user_path(path) + ": \"" + key + "\" is " +
                       quote_user_text(value.dump()) + "; expected an integer from 2 to " +
                       std::to_string(max_vocabulary));
    return value.get<std::int64_t>();
  }
  throw data_error(quote_user_path(path) +
                   ": expected an object with \"vocab_size\" (or \"size\"): the "
                   "vocabulary's size");
}

dataset token_dataset(std::shared_ptr<const token_ids> ids, std::int64_t begin, std::int64_t end,
                      std::int64_t context, std::int64_t vocabulary, token_windows windows,
                      const std::string& what) {
  const auto length = end - begin;
  if (length < context + 1)
    throw data_error(what + " holds " + std::to_string(length) +
                     " token(s); a window needs context + 1 = " + std::to_string(context + 1) +
                     " (more tokens, or a smaller [data] context)");
  dataset d;
  d.features = context;
  d.positions = context;
  d.classes = vocabulary;
  const auto tiled = (length - 1) / context;
  if (windows == token_windows::random) {
    d.count = length - context;  // every start offset
    d.draws_per_epoch = tiled;
  } else {
    d.count = tiled;
  }
  d.rows = std::make_shared<window_rows>(std::move(ids), begin, context,
                                         windows == token_windows::random ? 1 : context);
  return d;
}

std::int64_t vocabulary_of(const token_source& source) {
  if (source.vocabulary > 0)
    return source.vocabulary;
  const auto json = (std::filesystem::path(source.train_path).parent_path() / "vocab.json").string();
  std::error_code error;
  if (!std::filesystem::is_regular_file(json, error))
    throw data_error(
        "[data] source = \"tokens\" needs the vocabulary's size: [data] vocab = N, "
        "or " +
        quote_user_path(json) + " holding {\"vocab_size\": N}");
  return read_vocabulary_size(json);
}

dataset_split load_tokens(const token_source& source) {
  const auto vocabulary = vocabulary_of(source);
  auto train = open_token_file(source.train_path, source.dtype, vocabulary);
  dataset_split split;
  const auto n = train->size();
  if (!source.test_path.empty()) {
    auto test = open_token_file(source.test_path, source.dtype, vocabulary);
    const auto m = test->size();
    split.test = token_dataset(std::move(test), 0, m, source.context, vocabulary,
                               token_windows::tiled, quote_user_path(source.test_path));
    split.train = token_dataset(std::move(train), 0, n, source.context, vocabulary, source.windows,
                                quote_user_path(source.train_path));
    return split;
  }
  // The last share of the ids, as nanoGPT's prepare scripts cut val.bin from the end.
  const auto held = static_cast<std::int64_t>(std::llround(source.validation * static_cast<double>(n)));
  const auto what = quote_user_path(source.train_path);
  split.validation = token_dataset(train, n - held, n, source.context, vocabulary,
                                   token_windows::tiled,
                                   "the validation share ([data] validation) of " + what);
  split.train = token_dataset(std::move(train), 0, n - held, source.context, vocabulary,
                              source.windows, what + " without its validation share");
  split.test = split.validation;
  split.test.count = 0;
  return split;
}

}  // namespace troupe
