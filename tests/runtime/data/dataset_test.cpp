// dataset_test.cpp: the IDX reader (raw and gzip), the Fashion-MNIST loader and the
// synthetic source. Every IDX file is written by the test itself into a temporary
// directory; the real data set is only checked when Debian's package is installed.
#include "runtime/data/dataset.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "tests/data_error_of.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"
#include "troupe/error.hpp"

namespace fs = std::filesystem;
using troupe::test::bytes;  // std::vector<unsigned char>
using troupe::test::data_error_of;
using troupe::test::temp_directory;

namespace {

void append_u32(bytes& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(value >> shift));
}

bytes idx_images_file(std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                      const bytes& pixels, std::uint32_t magic = 0x00000803) {
  bytes out;
  append_u32(out, magic);
  append_u32(out, count);
  append_u32(out, rows);
  append_u32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

bytes idx_labels_file(const bytes& labels) {
  bytes out;
  append_u32(out, 0x00000801);
  append_u32(out, static_cast<std::uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_raw(const std::string& path, const bytes& content) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(content.data()),
            static_cast<std::streamsize>(content.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const bytes& content) {
  std::ofstream file(path, std::ios::binary);
  {
    boost::iostreams::filtering_ostream out;
    out.push(boost::iostreams::gzip_compressor());
    out.push(file);
    out.write(reinterpret_cast<const char*>(content.data()),
              static_cast<std::streamsize>(content.size()));
  }  // the filter chain flushes the gzip footer when it is destroyed
  REQUIRE(file.good());
}

bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using troupe::test::contains;

bytes counting_pixels(std::size_t n) {
  bytes out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  return out;
}

/// Writes a consistent little Fashion-MNIST-shaped set (2x3 images) into `dir`.
void write_small_fashion(const temp_directory& dir, bool gzip) {
  auto write = [&](const std::string& name, const bytes& content) {
    if (gzip)
      write_gzip(dir / (name + ".gz"), content);
    else
      write_raw(dir / name, content);
  };
  write("train-images-idx3-ubyte", idx_images_file(4, 2, 3, counting_pixels(24)));
  write("train-labels-idx1-ubyte", idx_labels_file({0, 9, 3, 9}));
  write("t10k-images-idx3-ubyte", idx_images_file(2, 2, 3, {0, 255, 0, 255, 0, 255,  //
                                                            1, 2, 3, 4, 5, 6}));
  write("t10k-labels-idx1-ubyte", idx_labels_file({5, 1}));
}

/// CHECKs the IDX image file at `path` against the shape and pixels it was written with.
void check_images(const std::string& path, std::int64_t count, std::int64_t rows,
                  std::int64_t cols, const bytes& pixels) {
  auto images = troupe::read_idx_images(path);
  CHECK(images.count == count);
  CHECK(images.rows == rows);
  CHECK(images.cols == cols);
  CHECK(images.pixels == pixels);
}

}  // namespace

TEST_CASE("a raw IDX image file reads back exactly") {
  temp_directory dir;
  auto pixels = counting_pixels(3 * 4 * 5);
  write_raw(dir / "images", idx_images_file(3, 4, 5, pixels));
  check_images(dir / "images", 3, 4, 5, pixels);
}

TEST_CASE("a gzip IDX file reads back exactly, recognised by its magic bytes not its name") {
  temp_directory dir;
  auto pixels = counting_pixels(7 * 3 * 2);
  bytes labels = {1, 2, 3, 250, 0};
  // Gzip content without ".gz", and raw content with ".gz": the name must not matter.
  write_gzip(dir / "images", idx_images_file(7, 3, 2, pixels));
  write_raw(dir / "labels.gz", idx_labels_file(labels));
  write_gzip(dir / "labels2.gz", idx_labels_file(labels));
  check_images(dir / "images", 7, 3, 2, pixels);
  CHECK(troupe::read_idx_labels(dir / "labels.gz") == labels);
  CHECK(troupe::read_idx_labels(dir / "labels2.gz") == labels);
}

TEST_CASE("a gzip file larger than the read chunks reads back exactly") {
  temp_directory dir;
  // 300 x 100 x 200 = 6 MB: more than one 4 MiB read chunk and many gzip buffers.
  auto pixels = counting_pixels(300 * 100 * 200);
  write_gzip(dir / "images.gz", idx_images_file(300, 100, 200, pixels));
  auto images = troupe::read_idx_images(dir / "images.gz");
  CHECK(images.count == 300);
  CHECK(images.pixels == pixels);
}

TEST_CASE("a wrong magic number names expected and found in hex at offset 0") {
  temp_directory dir;
  write_raw(dir / "labels", idx_labels_file({1, 2, 3}));
  auto message = data_error_of([&] { troupe::read_idx_images(dir / "labels"); });
  CHECK(contains(message, dir / "labels"));
  CHECK(contains(message, "expected 0x00000803"));
  CHECK(contains(message, "found 0x00000801"));
  CHECK(contains(message, "offset 0"));
  CHECK(contains(message, "label file"));

  write_raw(dir / "text", bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'});
  message = data_error_of([&] { troupe::read_idx_labels(dir / "text"); });
  CHECK(contains(message, "expected 0x00000801"));
  CHECK(contains(message, "found 0x68656c6c"));
  CHECK(contains(message, "does not look like an IDX file"));
}

TEST_CASE("a truncated header is reported with the offset of the missing field") {
  temp_directory dir;
  auto full = idx_images_file(1, 2, 2, {1, 2, 3, 4});
  write_raw(dir / "images", bytes(full.begin(), full.begin() + 10));
  auto message = data_error_of([&] { troupe::read_idx_images(dir / "images"); });
  CHECK(contains(message, "is truncated"));
  CHECK(contains(message, "row count at offset 8, found only 2"));

  write_raw(dir / "empty", {});
  message = data_error_of([&] { troupe::read_idx_labels(dir / "empty"); });
  CHECK(contains(message, "magic number at offset 0, found only 0"));
}

TEST_CASE("truncated data is reported with the byte offset, in the decompressed stream for gzip") {
  temp_directory dir;
  auto full = idx_images_file(2, 3, 4, counting_pixels(24));
  bytes cut(full.begin(), full.end() - 4);
  write_raw(dir / "images", cut);
  auto message = data_error_of([&] { troupe::read_idx_images(dir / "images"); });
  CHECK(message == "file '" + (dir / "images") +
                       "' is truncated: expected 24 bytes of pixel data after offset 16, "
                       "found only 20");

  write_gzip(dir / "images.gz", cut);
  message = data_error_of([&] { troupe::read_idx_images(dir / "images.gz"); });
  CHECK(contains(message, "expected 24 bytes of pixel data after offset 16, found only 20"));
  CHECK(contains(message, "decompressed"));

  auto labels = idx_labels_file({1, 2, 3, 4, 5});
  write_raw(dir / "labels", bytes(labels.begin(), labels.end() - 2));
  message = data_error_of([&] { troupe::read_idx_labels(dir / "labels"); });
  CHECK(contains(message, "expected 5 bytes of label data after offset 8, found only 3"));
}

TEST_CASE("trailing bytes after the data are an error") {
  temp_directory dir;
  auto content = idx_images_file(1, 2, 2, {1, 2, 3, 4});
  content.push_back(0xaa);
  content.push_back(0xbb);
  write_raw(dir / "images", content);
  auto message = data_error_of([&] { troupe::read_idx_images(dir / "images"); });
  CHECK(contains(message, "2 trailing bytes"));
  CHECK(contains(message, "end at offset 20"));

  auto labels = idx_labels_file({1, 2});
  labels.push_back(7);
  write_gzip(dir / "labels.gz", labels);
  message = data_error_of([&] { troupe::read_idx_labels(dir / "labels.gz"); });
  CHECK(contains(message, "1 trailing bytes"));
  CHECK(contains(message, "end at offset 10"));
}

TEST_CASE("a corrupt gzip stream is a data_error naming the file, not a crash") {
  temp_directory dir;
  // Gzip's magic followed by nonsense.
  write_raw(dir / "garbage.gz", bytes{0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00,
                                      0x03, 0xff, 0xff, 0xff, 0xff, 0x12, 0x34, 0x56});
  auto message = data_error_of([&] { troupe::read_idx_images(dir / "garbage.gz"); });
  CHECK(contains(message, dir / "garbage.gz"));
  MESSAGE("gzip magic then nonsense: " << message);

  // A real gzip file with a damaged byte in the compressed body.
  write_gzip(dir / "good.gz", idx_images_file(10, 10, 10, counting_pixels(1000)));
  auto damaged = read_raw(dir / "good.gz");
  REQUIRE(damaged.size() > 40);
  damaged[damaged.size() / 2] ^= 0x55;
  write_raw(dir / "damaged.gz", damaged);
  message = data_error_of([&] { troupe::read_idx_images(dir / "damaged.gz"); });
  CHECK(contains(message, dir / "damaged.gz"));
  MESSAGE("damaged gzip: " << message);

  // The same file cut short: either the decompressor or the IDX length check notices.
  auto good = read_raw(dir / "good.gz");
  write_raw(dir / "short.gz", bytes(good.begin(), good.begin() + good.size() / 2));
  message = data_error_of([&] { troupe::read_idx_images(dir / "short.gz"); });
  CHECK(contains(message, dir / "short.gz"));
  MESSAGE("cut gzip: " << message);

  // Only the 8-byte footer (CRC and length) missing: the data is complete, the stream not.
  write_raw(dir / "nofooter.gz", bytes(good.begin(), good.end() - 8));
  message = data_error_of([&] { troupe::read_idx_images(dir / "nofooter.gz"); });
  CHECK(contains(message, dir / "nofooter.gz"));
  MESSAGE("gzip without footer: " << message);
}

TEST_CASE("header counts and sizes must be positive and sane") {
  temp_directory dir;
  write_raw(dir / "zero", idx_images_file(0, 28, 28, {}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "zero"); }),
                 "image count at offset 4 is 0"));
  write_raw(dir / "wide", idx_images_file(1, 2048, 2048, {}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "wide"); }),
                 "exceed the limit of 1048576 pixels"));
  // A huge count with no data behind it: a truncation error, not an attempt to allocate.
  write_raw(dir / "huge", idx_images_file(1u << 20, 32, 32, {1, 2, 3}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "huge"); }),
                 "found only 3"));
  // More values than one tensor holds, refused from the header before any pixel is read
  // (a 2 MB gzip file held 2^31 zero pixels, and took 10.5 GB to be read).
  write_raw(dir / "bomb", idx_images_file((1u << 20) + 1, 32, 32, {1, 2, 3}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "bomb"); }),
                 "1048577 images of 32 x 32 pixels (offsets 4 to 12) are 1073742848 values, "
                 "more than the limit of 1073741824 values in one tensor"));
  write_raw(dir / "tallest", idx_images_file(1u << 28, 1024, 1024, {1, 2, 3}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "tallest"); }),
                 "more than the limit of 1073741824 values"));
  write_raw(dir / "toomany", idx_images_file((1u << 28) + 1, 1, 1, {}));
  CHECK(contains(data_error_of([&] { troupe::read_idx_images(dir / "toomany"); }),
                 "image count at offset 4 is 268435457"));
}

TEST_CASE("a missing file names its path, and a missing data set says how to get one") {
  temp_directory dir;
  auto message = data_error_of([&] { troupe::read_idx_labels(dir / "nope"); });
  CHECK(contains(message, dir / "nope"));
  CHECK(contains(message, "does not exist"));

  message = data_error_of([&] { troupe::load_fashion_mnist(dir.string()); });
  CHECK(contains(message, dir / "train-images-idx3-ubyte.gz"));
  CHECK(contains(message, dir / "train-images-idx3-ubyte'"));
  CHECK(contains(message, "install Debian's dataset-fashion-mnist"));
  CHECK(contains(message, "[data] source = \"synthetic\""));
}

TEST_CASE("Fashion-MNIST from a directory: shapes, labels and normalised pixels") {
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    temp_directory dir;
    write_small_fashion(dir, gzip);
    auto split = troupe::load_fashion_mnist(dir.string());
    CHECK(split.train.count == 4);
    CHECK(split.train.features == 6);
    CHECK(split.train.classes == 10);
    CHECK(split.train.images.size() == 24);
    CHECK(split.train.labels == std::vector<std::int32_t>{0, 9, 3, 9});
    CHECK(split.test.count == 2);
    CHECK(split.test.features == 6);
    CHECK(split.test.labels == std::vector<std::int32_t>{5, 1});
    // The reference in double; the loader rounds the same double once to float, so the
    // only difference allowed is that one rounding (half an ulp, well inside 1e-6).
    auto pixels = counting_pixels(24);
    for (std::size_t i = 0; i < pixels.size(); ++i)
      CHECK(split.train.images[i] ==
            doctest::Approx((pixels[i] / 255.0 - 0.2860) / 0.3530).epsilon(1e-6));
    CHECK(split.test.images[0] == doctest::Approx(-0.2860 / 0.3530).epsilon(1e-6));
    CHECK(split.test.images[1] == doctest::Approx((1.0 - 0.2860) / 0.3530).epsilon(1e-6));
  }
}

TEST_CASE("Fashion-MNIST prefers the .gz file when both exist") {
  temp_directory dir;
  write_small_fashion(dir, true);
  // A broken raw copy next to the good .gz one: it must not be read.
  write_raw(dir / "train-labels-idx1-ubyte", bytes{0, 1, 2});
  CHECK(troupe::load_fashion_mnist(dir.string()).train.count == 4);
}

TEST_CASE("Fashion-MNIST images and labels must agree in count") {
  temp_directory dir;
  write_small_fashion(dir, false);
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_labels_file({1, 2, 3}));
  auto message = data_error_of([&] { troupe::load_fashion_mnist(dir.string()); });
  CHECK(contains(message, dir / "t10k-images-idx3-ubyte"));
  CHECK(contains(message, dir / "t10k-labels-idx1-ubyte"));
  CHECK(contains(message, "holds 2 images"));
  CHECK(contains(message, "holds 3 labels"));
}

TEST_CASE("Fashion-MNIST labels must be below 10") {
  temp_directory dir;
  write_small_fashion(dir, false);
  write_raw(dir / "train-labels-idx1-ubyte", idx_labels_file({0, 1, 10, 2}));
  auto message = data_error_of([&] { troupe::load_fashion_mnist(dir.string()); });
  CHECK(contains(message, dir / "train-labels-idx1-ubyte"));
  CHECK(contains(message, "label 10 of sample 2 (offset 10)"));
  CHECK(contains(message, "expected 0 to 9"));
}

TEST_CASE("synthetic data is deterministic in its seed and has the asked-for shapes") {
  auto a = troupe::make_synthetic(300, 100, 20, 4, 42);
  auto b = troupe::make_synthetic(300, 100, 20, 4, 42);
  auto c = troupe::make_synthetic(300, 100, 20, 4, 43);
  CHECK(a.train.count == 300);
  CHECK(a.test.count == 100);
  CHECK(a.train.features == 20);
  CHECK(a.test.features == 20);
  CHECK(a.train.classes == 4);
  CHECK(a.train.images.size() == 300 * 20);
  CHECK(a.test.images.size() == 100 * 20);
  CHECK(a.train.labels.size() == 300);
  CHECK(a.test.labels.size() == 100);
  for (auto label : a.train.labels)
    CHECK((label >= 0 && label < 4));
  CHECK(a.train.images == b.train.images);
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.test.images == b.test.images);
  CHECK(a.test.labels == b.test.labels);
  CHECK(a.train.images != c.train.images);
  CHECK(a.test.images != c.test.images);
  // The test split is drawn from its own stream: more training data leaves it unchanged.
  auto d = troupe::make_synthetic(500, 100, 20, 4, 42);
  CHECK(d.test.images == a.test.images);
  CHECK(d.test.labels == a.test.labels);
  // A fixed seed gives the same first value on every platform that has IEEE doubles and a
  // correctly rounded-enough libm; printed to make a cross-platform difference visible.
  MESSAGE("make_synthetic(..., seed 42).train.images[0] = " << a.train.images[0]);

  CHECK_THROWS_AS(troupe::make_synthetic(0, 10, 5, 2, 1), troupe::data_error);
  CHECK_THROWS_AS(troupe::make_synthetic(10, 10, 0, 2, 1), troupe::data_error);
}

TEST_CASE("synthetic data at the default sizes is linearly separable with a clear margin") {
  // The config's defaults: 4096 training and 1024 test samples, 784 features, 10 classes.
  const std::int64_t features = 784, classes = 10;
  auto split = troupe::make_synthetic(4096, 1024, features, classes, 7);
  // Nearest class mean (a linear classifier), means estimated on the training split.
  std::vector<double> mean(classes * features, 0.0);
  std::vector<double> members(classes, 0.0);
  for (std::int64_t i = 0; i < split.train.count; ++i) {
    auto label = split.train.labels[i];
    members[label] += 1.0;
    for (std::int64_t d = 0; d < features; ++d)
      mean[label * features + d] += split.train.images[i * features + d];
  }
  for (std::int64_t k = 0; k < classes; ++k) {
    REQUIRE(members[k] > 0);  // random labels: ~410 per class, never 0 in practice
    for (std::int64_t d = 0; d < features; ++d)
      mean[k * features + d] /= members[k];
  }
  // Within-class spread: the documented noise is 0.1 per feature, so variance 0.01. With
  // ~3.2 million squared deviations the estimate's relative error is ~1e-3; 5% is generous
  // and still catches a wrong noise level.
  double squared = 0.0;
  for (std::int64_t i = 0; i < split.train.count; ++i)
    for (std::int64_t d = 0; d < features; ++d) {
      auto deviation = split.train.images[i * features + d] -
                       mean[split.train.labels[i] * features + d];
      squared += deviation * deviation;
    }
  CHECK(squared / static_cast<double>(split.train.count * features) ==
        doctest::Approx(0.01).epsilon(0.05));

  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < split.test.count; ++i) {
    std::int64_t best = -1;
    double best_distance = 0.0;
    for (std::int64_t k = 0; k < classes; ++k) {
      double distance = 0.0;
      for (std::int64_t d = 0; d < features; ++d) {
        auto diff = split.test.images[i * features + d] - mean[k * features + d];
        distance += diff * diff;
      }
      if (best < 0 || distance < best_distance) {
        best = k;
        best_distance = distance;
      }
    }
    correct += best == split.test.labels[i] ? 1 : 0;
  }
  auto accuracy = static_cast<double>(correct) / static_cast<double>(split.test.count);
  MESSAGE("nearest-centre test accuracy on synthetic data: " << accuracy);
  CHECK(accuracy > 0.99);
}

TEST_CASE("the installed Fashion-MNIST loads with its published shapes") {
  const std::string directory = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(directory)) {
    MESSAGE("skipped: " << directory << " is absent (install Debian's dataset-fashion-mnist)");
    return;
  }
  auto start = std::chrono::steady_clock::now();
  auto split = troupe::load_fashion_mnist(directory);
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  MESSAGE("loading Fashion-MNIST took " << took.count() << " s");
  CHECK(split.train.count == 60000);
  CHECK(split.test.count == 10000);
  CHECK(split.train.features == 784);
  CHECK(split.test.features == 784);
  CHECK(split.train.classes == 10);
  CHECK(split.train.images.size() == 60000u * 784u);
  CHECK(split.test.images.size() == 10000u * 784u);
  bool labels_in_range = true;
  for (auto label : split.train.labels)
    labels_in_range = labels_in_range && label >= 0 && label < 10;
  for (auto label : split.test.labels)
    labels_in_range = labels_in_range && label >= 0 && label < 10;
  CHECK(labels_in_range);
  double sum = 0.0;
  for (auto x : split.train.images)
    sum += x;
  // 0.2860 is the published mean rounded to 4 digits (true: 0.28604), so the normalised
  // mean is within 0.00005 / 0.3530 ~ 1.5e-4 of zero; 1e-3 leaves room for that.
  CHECK(std::abs(sum / static_cast<double>(split.train.images.size())) < 1e-3);
}

TEST_CASE(
    "a corrupt gzip file names the byte of the file where decompression fails, not offset 0") {
  temp_directory dir;
  // 1 MB of pixels that compress, but not to nothing: the damage lands in Huffman-coded data.
  bytes pixels(1'000'000);
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<std::uint8_t>((i * i / 7 + i / 13) % 200);
  write_gzip(dir / "good.gz", idx_images_file(100, 100, 100, pixels));
  auto damaged = read_raw(dir / "good.gz");
  const std::size_t damage_at = damaged.size() / 3;
  REQUIRE(damage_at > 4096);
  for (std::size_t i = damage_at; i < damage_at + 64; ++i)
    damaged[i] ^= 0x5a;
  write_raw(dir / "damaged.gz", damaged);
  const auto message = data_error_of([&] { troupe::read_idx_images(dir / "damaged.gz"); });
  INFO(message);
  // "fails at byte N of the file, after M bytes of decompressed data": N cannot be before
  // the damage, and everything before it decompressed.
  const auto at = message.find("fails at byte ");
  REQUIRE(at != std::string::npos);
  const auto byte = std::stoull(message.substr(at + 14));
  CHECK(byte >= damage_at);
  CHECK(byte <= damaged.size());
  const auto after = message.find(", after ");
  REQUIRE(after != std::string::npos);
  CHECK(std::stoull(message.substr(after + 8)) > 1000);
  CHECK_FALSE(contains(message, "after 0 bytes"));
}
