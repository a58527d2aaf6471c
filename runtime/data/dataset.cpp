// dataset.cpp: the IDX reader (raw or gzip), the Fashion-MNIST loader and the synthetic
// source declared in dataset.hpp.
//
// Every failure that a bad or missing file can cause is a data_error naming the file, the
// byte offset (in the decompressed stream) and what was expected there. Nothing here
// batches, shuffles or knows about actors; the data loader actor does that.
#include "runtime/data/dataset.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ios>
#include <istream>
#include <memory>
#include <numeric>
#include <sstream>

#include <zlib.h>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "runtime/base/limits.hpp"
#include "runtime/base/random.hpp"
#include "runtime/config/config.hpp"
#include "troupe/error.hpp"

namespace troupe {

void dataset::gather(const std::int64_t* picked, std::size_t first, std::size_t last,
                     float* out, std::int64_t epoch) const {
  if (rows && epoch >= 0) {
    rows->gather_in_epoch(picked, first, last, out, epoch);
    return;
  }
  if (rows) {
    rows->gather(picked, first, last, out);
    return;
  }
  const auto row_bytes = static_cast<std::size_t>(features) * sizeof(float);
  for (std::size_t i = first; i < last; ++i)
    std::memcpy(out + (i - first) * static_cast<std::size_t>(features),
                images.data() + picked[i] * features, row_bytes);
}

void dataset::gather_labels(const std::int64_t* picked, std::size_t count, std::int32_t* out,
                            std::int64_t epoch) const {
  if (rows && rows->holds_labels()) {
    if (epoch >= 0)
      rows->gather_labels_in_epoch(picked, 0, count, out, epoch);
    else
      rows->gather_labels(picked, 0, count, out);
    return;
  }
  const auto width = static_cast<std::size_t>(positions);
  for (std::size_t i = 0; i < count; ++i)
    std::copy_n(labels.begin() + picked[i] * positions, width, out + i * width);
}

namespace {

// Limits that no real IDX image set comes near; a header beyond them is corrupt (or not
// IDX at all), and saying so beats trying to allocate terabytes.
constexpr std::int64_t max_sample_count = limits::max_samples;
constexpr std::int64_t max_image_size = limits::max_sample_features;  // rows * cols

constexpr std::uint32_t idx_images_magic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t idx_labels_magic = 0x00000801;  // unsigned bytes, 1 dimension

// Read granularity: big enough that the per-call cost of the stream and the gzip filter
// vanishes, small enough that a lying header cannot make us allocate far beyond the data.
constexpr std::int64_t read_chunk = std::int64_t{1} << 22;

std::string hex32(std::uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << value;
  return out.str();
}

/// Boost's what() is just "gzip error"; the error codes say what actually went wrong.
std::string describe_gzip_failure(const std::exception& e) {
  namespace bio = boost::iostreams;
  auto describe_zlib = [](int code) -> std::string {
    if (code == bio::zlib::data_error)
      return "the compressed data is corrupt";
    if (code == bio::zlib::buf_error)
      return "the compressed stream ends early";
    if (code == bio::zlib::mem_error)
      return "zlib ran out of memory";
    return "zlib error " + std::to_string(code);
  };
  if (auto gzip = dynamic_cast<const bio::gzip_error*>(&e)) {
    switch (gzip->error()) {
      case bio::gzip::zlib_error: return describe_zlib(gzip->zlib_error_code());
      case bio::gzip::bad_crc: return "the CRC in the gzip footer does not match the data";
      case bio::gzip::bad_length: return "the length in the gzip footer does not match the data";
      case bio::gzip::bad_header: return "the gzip header is malformed";
      case bio::gzip::bad_footer: return "the gzip footer is missing or malformed";
      case bio::gzip::bad_method: return "the gzip compression method is not deflate";
      default: return "gzip error " + std::to_string(gzip->error());
    }
  }
  if (auto zlib = dynamic_cast<const bio::zlib_error*>(&e))
    return describe_zlib(zlib->error());
  return e.what();
}

/// Where inflating the gzip file at `path` fails: the offset in the file of the first
/// compressed byte zlib could not use, and how many bytes it had decompressed by then.
/// Boost's filter decompresses a 64 KiB buffer before it hands out a byte, so the offset
/// it reaches says nothing (it is 0 for damage anywhere in the first buffer); this second
/// pass, run only once a read has failed, feeds zlib 4 KiB at a time and asks it.
struct gzip_failure {
  std::int64_t compressed = 0;
  std::int64_t decompressed = 0;
};

gzip_failure locate_gzip_failure(const std::string& path) {
  gzip_failure out;
  std::ifstream file(path, std::ios::binary);
  z_stream z{};
  if (!file || inflateInit2(&z, 15 + 16) != Z_OK)  // 15 + 16: a gzip wrapper
    return out;
  std::array<unsigned char, 4096> in{};
  std::array<unsigned char, 1 << 16> scratch{};
  std::int64_t fed = 0;  // bytes of the file handed to zlib
  int status = Z_OK;
  while (status == Z_OK) {
    if (z.avail_in == 0) {
      file.read(reinterpret_cast<char*>(in.data()), in.size());
      const auto got = file.gcount();
      if (got <= 0)
        break;  // the file ends inside the stream
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(got);
      fed += got;
    }
    z.next_out = scratch.data();
    z.avail_out = static_cast<uInt>(scratch.size());
    status = inflate(&z, Z_NO_FLUSH);
    out.decompressed += static_cast<std::int64_t>(scratch.size() - z.avail_out);
    if (status == Z_STREAM_END) {  // one member done: a concatenated file goes on
      if (z.avail_in == 0 && file.peek() == std::ifstream::traits_type::eof())
        break;
      status = inflateReset(&z);
    }
  }
  out.compressed = fed - static_cast<std::int64_t>(z.avail_in);
  inflateEnd(&z);
  return out;
}

/// A file opened for sequential reading, through a gzip decompressor when its first two
/// bytes are gzip's magic. Tracks the offset in the (decompressed) stream so errors can
/// name it, and turns stream and zlib failures into data_error.
class idx_stream {
 public:
  explicit idx_stream(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw data_error("data file '" + path + "' does not exist");
    if (std::filesystem::is_directory(path, ec))
      throw data_error("data file '" + path + "' is a directory, expected an IDX file");
    file_.open(path, std::ios::binary);
    if (!file_)
      throw data_error("cannot open data file '" + path + "' for reading (check its permissions)");
    std::array<char, 2> head{};
    file_.read(head.data(), head.size());
    gzip_ = file_.gcount() == 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
            static_cast<unsigned char>(head[1]) == 0x8b;
    file_.clear();
    file_.seekg(0);
    if (gzip_) {
      gunzip_ = std::make_unique<boost::iostreams::filtering_istream>();
      // A large buffer: the default 4 KiB one makes the filter chain the bottleneck.
      gunzip_->push(boost::iostreams::gzip_decompressor(), 1 << 16);
      gunzip_->push(file_, 1 << 16);
      in_ = gunzip_.get();
    } else {
      in_ = &file_;
    }
    // badbit makes istream::read rethrow what the gzip filter threw (zlib_error,
    // gzip_error) instead of swallowing it; we turn it into data_error in read().
    in_->exceptions(std::ios::badbit);
  }

  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }
  std::int64_t offset() const { return offset_; }

  /// " (offsets are in the decompressed stream)" for gzip files, "" otherwise.
  std::string offset_note() const {
    return gzip_ ? " (offsets are in the decompressed gzip stream)" : std::string{};
  }

  /// Reads up to `size` bytes into `out`; returns how many arrived (fewer only at the end).
  std::int64_t read(std::uint8_t* out, std::int64_t size) {
    std::int64_t done = 0;
    while (done < size) {
      auto want = std::min(size - done, read_chunk);
      std::streamsize got = 0;
      try {
        in_->read(reinterpret_cast<char*>(out + done), want);
        got = in_->gcount();
      } catch (const std::exception& e) {
        auto at = std::to_string(offset_ + done);
        if (gzip_) {
          const auto failure = locate_gzip_failure(path_);
          throw data_error("file '" + path_ +
                           "' is not a valid gzip stream: decompression "
                           "fails at byte " +
                           std::to_string(failure.compressed) + " of the file, after " +
                           std::to_string(failure.decompressed) +
                           " bytes of decompressed data: " + describe_gzip_failure(e) +
                           "; the file may be damaged, `gzip -t` on it will tell");
        }
        throw data_error("cannot read file '" + path_ + "': I/O error after " + at +
                         " bytes: " + e.what());
      }
      done += got;
      if (got < want)
        break;
    }
    offset_ += done;
    return done;
  }

  /// Reads a 4-byte big-endian unsigned integer; `what` names it for the error message.
  std::uint32_t read_u32(const char* what) {
    std::array<std::uint8_t, 4> bytes{};
    auto at = offset_;
    auto got = read(bytes.data(), 4);
    if (got < 4)
      throw data_error("file '" + path_ + "' is truncated: expected 4 bytes of the " + what +
                       " at offset " + std::to_string(at) + ", found only " +
                       std::to_string(got) + offset_note());
    return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
           (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
  }

  /// Reads exactly `size` bytes into a new vector, `what` naming them ("pixel data").
  std::vector<std::uint8_t> read_payload(std::int64_t size, const char* what) {
    std::vector<std::uint8_t> out;
    // Grow as the data arrives rather than trusting the header with one huge allocation;
    // reserving up to 64 MiB covers the real data sets without any reallocation.
    out.reserve(static_cast<std::size_t>(std::min(size, std::int64_t{1} << 26)));
    auto start = offset_;
    std::int64_t done = 0;
    while (done < size) {
      auto want = std::min(size - done, read_chunk);
      out.resize(static_cast<std::size_t>(done + want));
      auto got = read(out.data() + done, want);
      done += got;
      if (got < want)
        throw data_error("file '" + path_ + "' is truncated: expected " + std::to_string(size) +
                         " bytes of " + what + " after offset " + std::to_string(start) +
                         ", found only " + std::to_string(done) + offset_note());
    }
    return out;
  }

  /// Throws if anything follows the data. Reading to the end also makes the gzip filter
  /// check the stream's CRC and length footer.
  void expect_end(const char* what) {
    auto end = offset_;
    std::array<std::uint8_t, 4096> scratch{};
    std::int64_t extra = 0;
    for (;;) {
      auto got = read(scratch.data(), scratch.size());
      extra += got;
      if (got < static_cast<std::int64_t>(scratch.size()))
        break;
    }
    if (extra > 0)
      throw data_error("file '" + path_ + "' has " + std::to_string(extra) +
                       " trailing bytes after the " + what + ": expected it to end at offset " +
                       std::to_string(end) + offset_note() +
                       "; is it the right file, or two files concatenated?");
  }

 private:
  std::string path_;
  std::ifstream file_;
  std::unique_ptr<boost::iostreams::filtering_istream> gunzip_;
  std::istream* in_ = nullptr;
  bool gzip_ = false;
  std::int64_t offset_ = 0;
};

/// Checks the magic number at offset 0 and explains the likely mix-up when it is wrong.
void check_magic(const idx_stream& in, std::uint32_t found, std::uint32_t expected,
                 const char* expected_kind) {
  if (found == expected)
    return;
  std::string hint;
  if ((found & 0xffffff00u) == 0x00000800u)
    hint = "; it is an IDX file of unsigned bytes with " + std::to_string(found & 0xffu) +
           " dimensions" +
           (found == idx_labels_magic   ? " (a label file)"
            : found == idx_images_magic ? " (an image file)"
                                        : "") +
           ", expected " + std::to_string(expected & 0xffu);
  else if ((found & 0xffff0000u) == 0)
    hint = "; it is IDX with element type " + hex32((found >> 8) & 0xffu) +
           ", expected 0x08 (unsigned byte)";
  else
    hint = "; this does not look like an IDX file at all";
  throw data_error("file '" + in.path() + "': wrong magic number at offset 0: expected " +
                   hex32(expected) + " (" + expected_kind + "), found " + hex32(found) + hint);
}

/// Checks a header count or size read at `offset` against [1, limit].
std::int64_t check_dimension(const idx_stream& in, std::uint32_t value, std::int64_t offset,
                             const char* what, std::int64_t limit) {
  if (value == 0 || value > limit)
    throw data_error("file '" + in.path() + "': " + what + " at offset " +
                     std::to_string(offset) + " is " + std::to_string(value) +
                     ", expected between 1 and " + std::to_string(limit) + in.offset_note() +
                     "; the header is corrupt");
  return value;
}

std::string find_idx_file(const std::filesystem::path& directory, const std::string& name) {
  auto found = find_data_file(directory.string(), name);  // the loader's probe too
  if (!found.empty())
    return found;
  auto gz = directory / (name + ".gz");
  auto raw = directory / name;
  std::error_code ec;
  std::string where = std::filesystem::is_directory(directory, ec)
                          ? std::string{}
                          : " (the directory '" + directory.string() + "' does not exist)";
  throw data_error("Fashion-MNIST file not found: tried '" + gz.string() + "' and '" +
                   raw.string() + "'" + where +
                   "; install Debian's dataset-fashion-mnist or use [data] source = "
                   "\"synthetic\"");
}

constexpr std::int64_t fashion_classes = 10;

dataset load_fashion_split(const std::filesystem::path& directory, const std::string& prefix) {
  auto images_path = find_idx_file(directory, prefix + "-images-idx3-ubyte");
  auto labels_path = find_idx_file(directory, prefix + "-labels-idx1-ubyte");
  auto images = read_idx_images(images_path);
  auto labels = read_idx_labels(labels_path);
  if (images.count != static_cast<std::int64_t>(labels.size()))
    throw data_error("'" + images_path + "' holds " + std::to_string(images.count) +
                     " images but '" + labels_path + "' holds " +
                     std::to_string(labels.size()) +
                     " labels; they must agree (are the files from the same release?)");

  dataset out;
  out.count = images.count;
  out.features = images.rows * images.cols;
  out.classes = fashion_classes;
  out.labels.resize(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= fashion_classes)
      throw data_error("file '" + labels_path + "': label " + std::to_string(labels[i]) +
                       " of sample " + std::to_string(i) + " (offset " + std::to_string(8 + i) +
                       ") is out of range, expected 0 to " +
                       std::to_string(fashion_classes - 1));
    out.labels[i] = labels[i];
  }
  // A byte has 256 values: normalise through a table, in double, rounded once to float.
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v)
    table[v] = static_cast<float>((v / 255.0 - fashion_mnist_mean) / fashion_mnist_std);
  out.images.resize(images.pixels.size());
  std::transform(images.pixels.begin(), images.pixels.end(), out.images.begin(),
                 [&table](std::uint8_t v) { return table[v]; });
  return out;
}

// ---- synthetic data, drawn from keyed_random (runtime/base/random.hpp): the same on every platform ----

// Note [synthetic margin]
// Centres are random unit vectors, made orthonormal (Gram-Schmidt) when classes <= features,
// so every pair of centres is sqrt(2) apart. Noise is N(0, synthetic_noise^2) per feature;
// along the line joining two centres it is N(0, 0.1^2), and the decision boundary of the
// nearest-centre (linear) classifier is sqrt(2)/2 ~ 0.707 away: 7 standard deviations,
// so the Bayes error is ~1e-12 per pair and any linear classifier can reach ~100%.
// With classes > features the centres cannot all be orthogonal and stay merely random.
constexpr double synthetic_noise = 0.1;

dataset draw_synthetic(const std::vector<double>& centres, std::int64_t count,
                       std::int64_t features, std::int64_t classes, keyed_random rng) {
  dataset out;
  out.count = count;
  out.features = features;
  out.classes = classes;
  out.images.resize(static_cast<std::size_t>(count * features));
  out.labels.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    auto label = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(classes)));
    out.labels[i] = static_cast<std::int32_t>(label);
    const double* centre = centres.data() + label * features;
    float* row = out.images.data() + i * features;
    for (std::int64_t d = 0; d < features; ++d)
      row[d] = static_cast<float>(centre[d] + synthetic_noise * rng.normal());
  }
  return out;
}

}  // namespace

idx_images read_idx_images(const std::string& path) {
  idx_stream in(path);
  check_magic(in, in.read_u32("magic number"), idx_images_magic, "IDX3 unsigned-byte images");
  idx_images out;
  out.count = check_dimension(in, in.read_u32("image count"), 4, "image count", max_sample_count);
  out.rows = check_dimension(in, in.read_u32("row count"), 8, "row count", max_image_size);
  out.cols = check_dimension(in, in.read_u32("column count"), 12, "column count", max_image_size);
  if (out.rows * out.cols > max_image_size)
    throw data_error("file '" + path + "': images of " + std::to_string(out.rows) + " x " +
                     std::to_string(out.cols) + " pixels (offsets 8 and 12) exceed the limit of " +
                     std::to_string(max_image_size) + " pixels; the header is corrupt");
  // The images become one tensor of floats: refused before any pixel is read (a small gzip
  // file can hold gigabytes of zeros).
  const auto values = out.count * out.rows * out.cols;  // at most 2^48: no overflow
  if (values > limits::max_tensor_elements)
    throw data_error("file '" + path + "': " + std::to_string(out.count) + " images of " +
                     std::to_string(out.rows) + " x " + std::to_string(out.cols) +
                     " pixels (offsets 4 to 12) are " + std::to_string(values) +
                     " values, more than the limit of " +
                     std::to_string(limits::max_tensor_elements) + " values in one tensor");
  out.pixels = in.read_payload(values, "pixel data");
  in.expect_end("pixel data");
  return out;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  idx_stream in(path);
  check_magic(in, in.read_u32("magic number"), idx_labels_magic, "IDX1 unsigned-byte labels");
  auto count = check_dimension(in, in.read_u32("label count"), 4, "label count", max_sample_count);
  auto labels = in.read_payload(count, "label data");
  in.expect_end("label data");
  return labels;
}

dataset_split load_fashion_mnist(const std::string& directory) {
  dataset_split out;
  out.train = load_fashion_split(directory, "train");
  out.test = load_fashion_split(directory, "t10k");
  if (out.train.features != out.test.features)
    throw data_error("Fashion-MNIST in '" + directory + "': training images have " +
                     std::to_string(out.train.features) + " pixels but test images have " +
                     std::to_string(out.test.features) + "; they must agree");
  return out;
}

dataset_split make_synthetic(std::int64_t train_count, std::int64_t test_count,
                             std::int64_t features, std::int64_t classes, std::uint64_t seed) {
  if (train_count < 1 || test_count < 0 || features < 1 || classes < 1 ||
      train_count > max_sample_count || test_count > max_sample_count ||
      features > max_image_size || classes > max_sample_count)
    throw data_error("synthetic data needs 1 <= train count <= " +
                     std::to_string(max_sample_count) + " (got " + std::to_string(train_count) +
                     "), 0 <= test count <= " + std::to_string(max_sample_count) + " (got " +
                     std::to_string(test_count) + "), 1 <= features <= " +
                     std::to_string(max_image_size) + " (got " + std::to_string(features) +
                     ") and at least 1 class (got " + std::to_string(classes) + ")");

  // Three independent streams, so the test set does not change when train_count does.
  constexpr std::uint64_t synthetic_key = 0x5717;
  keyed_random rng{seed, synthetic_key, 0};
  std::vector<double> centres(static_cast<std::size_t>(classes * features));  // (classes, D)
  for (std::int64_t c = 0; c < classes; ++c) {
    double* centre = centres.data() + c * features;
    for (std::int64_t d = 0; d < features; ++d)
      centre[d] = rng.normal();
    // See Note [synthetic margin]: orthogonalise against the earlier centres while we can.
    if (c < features) {
      for (std::int64_t k = 0; k < c; ++k) {
        const double* other = centres.data() + k * features;
        double dot = 0.0;
        for (std::int64_t d = 0; d < features; ++d)
          dot += centre[d] * other[d];
        for (std::int64_t d = 0; d < features; ++d)
          centre[d] -= dot * other[d];
      }
    }
    double norm = 0.0;
    for (std::int64_t d = 0; d < features; ++d)
      norm += centre[d] * centre[d];
    norm = std::sqrt(norm);
    for (std::int64_t d = 0; d < features; ++d)
      centre[d] /= norm;
  }

  dataset_split out;
  out.train =
      draw_synthetic(centres, train_count, features, classes, keyed_random{seed, synthetic_key, 1});
  out.test =
      draw_synthetic(centres, test_count, features, classes, keyed_random{seed, synthetic_key, 2});
  return out;
}

void leave_test_empty(dataset_split& split, bool class_labels, const std::string& train_targets) {
  split.test.features = split.train.features;
  split.test.outputs = split.train.outputs;
  if (class_labels)
    count_classes(split, train_targets);
}

void count_classes(dataset_split& split, const std::string& train_targets) {
  std::int32_t largest = 0;
  for (const auto* part : {&split.train, &split.test})
    for (const auto label : part->labels)
      largest = std::max(largest, label);
  split.train.classes = split.test.classes = std::int64_t{largest} + 1;
  if (split.train.classes < 2)
    throw data_error(quote_user_path(train_targets) +
                     ": every target is 0; a classifier needs two classes at least");
}

namespace {

/// The rows of a file picked through an index: row i is the file's row index[i].
class indexed_rows final : public feature_rows {
 public:
  indexed_rows(std::shared_ptr<const feature_rows> rows, std::vector<std::int64_t> index)
      : rows_(std::move(rows)), index_(std::move(index)) {}

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override {
    std::vector<std::int64_t> mapped(last - first);
    for (std::size_t i = first; i < last; ++i)
      mapped[i - first] = index_[static_cast<std::size_t>(picked[i])];
    rows_->gather(mapped.data(), 0, mapped.size(), out);
  }

  void gather_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
                       std::int64_t epoch) const override {
    std::vector<std::int64_t> mapped(last - first);
    for (std::size_t i = first; i < last; ++i)
      mapped[i - first] = index_[static_cast<std::size_t>(picked[i])];
    rows_->gather_in_epoch(mapped.data(), 0, mapped.size(), out, epoch);
  }

 private:
  std::shared_ptr<const feature_rows> rows_;
  std::vector<std::int64_t> index_;
};

/// The samples `index` picks of `from`, in that order.
dataset pick(const dataset& from, const std::vector<std::int64_t>& index) {
  dataset out;
  out.count = static_cast<std::int64_t>(index.size());
  out.features = from.features;
  out.classes = from.classes;
  out.positions = from.positions;
  out.outputs = from.outputs;
  out.workers = from.workers;
  const auto d = static_cast<std::size_t>(from.features);
  const auto t = static_cast<std::size_t>(from.outputs > 0 ? from.outputs : from.positions);
  for (const auto row : index) {
    const auto r = static_cast<std::size_t>(row);
    if (from.rows == nullptr)
      out.images.insert(out.images.end(), from.images.begin() + r * d,
                        from.images.begin() + (r + 1) * d);
    if (from.outputs > 0)
      out.values.insert(out.values.end(), from.values.begin() + r * t,
                        from.values.begin() + (r + 1) * t);
    else
      out.labels.insert(out.labels.end(), from.labels.begin() + r * t,
                        from.labels.begin() + (r + 1) * t);
  }
  if (from.rows != nullptr)
    out.rows = std::make_shared<indexed_rows>(from.rows, index);
  return out;
}

}  // namespace

dataset hold_out(dataset& train, double fraction, std::uint64_t seed) {
  const auto n = train.count;
  auto held = static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n)));
  held = std::clamp<std::int64_t>(held, 1, n - 1);
  if (n < 2)
    throw data_error("[data] validation needs two training samples at least; the training "
                     "split has " + std::to_string(n));
  if (train.rows && train.rows->holds_labels())  // token windows hold out their own
    throw data_error("[data] validation holds out rows of a data set, but these rows bring "
                     "their own labels (a Python iterable's batches): give a test split instead");
  // A Fisher-Yates permutation keyed by the seed alone; its first `held` are validation.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  keyed_random random{seed, 0x7a11da7e};
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)],
              order[static_cast<std::size_t>(random.below(static_cast<std::uint64_t>(i + 1)))]);
  std::vector<std::int64_t> validation(order.begin(), order.begin() + held);
  std::vector<std::int64_t> kept(order.begin() + held, order.end());
  std::sort(validation.begin(), validation.end());
  std::sort(kept.begin(), kept.end());
  auto out = pick(train, validation);
  train = pick(train, kept);
  return out;
}

}  // namespace troupe
