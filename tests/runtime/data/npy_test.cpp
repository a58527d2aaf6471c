// npy_test.cpp: NumPy .npy files as a data source (runtime/data/npy.hpp). Every file is
// written by the test: each element type read back as the float NumPy would give, mapped and
// read rows alike, the IDX source's normalisation reproduced bit for bit, and every bad
// header refused with the file and the byte named. A run on .npy files trains exactly as a
// run on the same pixels as IDX files does.
#include "runtime/data/npy.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "runtime/config/config.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/data_error_of.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

namespace {

using troupe::test::data_error_of;
using troupe::test::temp_directory;
using troupe::test::bytes;
using troupe::test::npy_file;
using troupe::test::raw;

std::string write(const temp_directory& dir, const std::string& name, const bytes& content) {
  return troupe::test::write_test_file(dir / name, content);
}

/// Every row of `rows` (count of them, features each) gathered in order.
std::vector<float> all_rows(const troupe::feature_rows& rows, std::int64_t count,
                            std::int64_t features) {
  std::vector<std::int64_t> picked(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    picked[static_cast<std::size_t>(i)] = i;
  std::vector<float> out(static_cast<std::size_t>(count * features));
  rows.gather(picked.data(), 0, picked.size(), out.data());
  return out;
}

/// An IDX file: its magic and dimensions as big-endian 32-bit numbers, then `data`.
bytes idx_file(std::uint32_t magic, std::vector<std::uint32_t> dims, const bytes& data) {
  bytes out;
  dims.insert(dims.begin(), magic);
  for (auto value : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<unsigned char>(value >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace

TEST_CASE("every element type reads back as the float NumPy's astype(float32) gives") {
  temp_directory dir{"troupe-npy"};
  const troupe::feature_normalisation none;
  auto check = [&](const std::string& descr, const bytes& data, const std::vector<float>& expected) {
    INFO(descr);
    const auto path = write(dir, "x.npy", npy_file(descr, "(2, 3)", data));
    for (auto access : {troupe::file_access::mapped, troupe::file_access::read}) {
      auto rows = troupe::open_npy_rows(path, none, access);
      CHECK(all_rows(*rows, 2, 3) == expected);
    }
  };
  check("|u1", raw<std::uint8_t>({0, 1, 2, 127, 128, 255}), {0, 1, 2, 127, 128, 255});
  check("|i1", raw<std::int8_t>({0, -1, 2, 127, -128, 5}), {0, -1, 2, 127, -128, 5});
  check("<i2", raw<std::int16_t>({0, -1, 300, 32767, -32768, 5}), {0, -1, 300, 32767, -32768, 5});
  check("<i4", raw<std::int32_t>({0, -1, 70000, 16777217, -5, 5}),
        {0, -1, 70000, 16777216, -5, 5});  // 2^24 + 1 rounds to even, as NumPy's cast does
  check("<i8", raw<std::int64_t>({0, -1, 1ll << 40, -(1ll << 40), 7, 5}),
        {0, -1, 1099511627776.0f, -1099511627776.0f, 7, 5});
  check("<f4", raw<float>({0.5f, -1.25f, 1e-30f, 3e38f, -0.0f, 5}),
        {0.5f, -1.25f, 1e-30f, 3e38f, -0.0f, 5});
  check("<f8", raw<double>({0.1, -1.25, 1e-300, 1e300, 2.5, 5}),
        {0.1f, -1.25f, 0.0f, std::numeric_limits<float>::infinity(), 2.5f, 5});
  // float16: 1, -2.5, the largest (65504), the smallest subnormal (2^-24), infinity, 0.
  check("<f2", raw<std::uint16_t>({0x3c00, 0xc100, 0x7bff, 0x0001, 0x7c00, 0x0000}),
        {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), std::numeric_limits<float>::infinity(),
         0.0f});
}

TEST_CASE("format versions 1.0, 2.0 and 3.0 and any sample shape read the same rows") {
  temp_directory dir{"troupe-npy"};
  const auto data = raw<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  for (int version : {1, 2, 3}) {
    INFO("version " << version);
    const auto path = write(dir, "x.npy", npy_file("<f4", "(2, 2, 3)", data, version));
    const auto header = troupe::read_npy_header(path);
    CHECK(header.major_version == version);
    CHECK(header.shape == std::vector<std::int64_t>{2, 2, 3});
    CHECK(header.data_offset % 64 == 0);
    auto rows = troupe::open_npy_rows(path, {});
    CHECK(all_rows(*rows, 2, 6) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  }
}

TEST_CASE("scale, mean and std normalise every feature, or each its own, mapped or read") {
  temp_directory dir{"troupe-npy"};
  const auto path = write(dir, "x.npy", npy_file("|u1", "(3, 2)", raw<std::uint8_t>({0, 10, 20, 30, 40, 50})));
  troupe::feature_normalisation n{{0.5}, {1.0, 2.0}, {2.0, 4.0}};
  // (x * 0.5 - mean_f) / std_f in double, then float.
  const std::vector<float> expected{-0.5f, 0.75f, 4.5f, 3.25f, 9.5f, 5.75f};
  for (auto access : {troupe::file_access::mapped, troupe::file_access::read})
    CHECK(all_rows(*troupe::open_npy_rows(path, n, access), 3, 2) == expected);
  // Picked rows land in order at the range's start.
  auto rows = troupe::open_npy_rows(path, n);
  const std::vector<std::int64_t> picked{2, 0, 2};
  std::vector<float> out(4);
  rows->gather(picked.data(), 1, 3, out.data());
  CHECK(out == std::vector<float>{-0.5f, 0.75f, 9.5f, 5.75f});
  CHECK(data_error_of([&] { troupe::open_npy_rows(path, {{1.0}, {0, 0, 0}, {1.0}}); })
            .find("mean has 3 values; expected 1 or one per feature (2)") != std::string::npos);
}

TEST_CASE("Fashion-MNIST's pixels as .npy with its scale, mean and std are the IDX source's bits") {
  temp_directory dir{"troupe-npy"};
  // Every byte value, as 256 samples of one pixel, and the same as IDX files (big-endian
  // counts: magic, count, rows, cols).
  bytes pixels(256);
  for (int v = 0; v < 256; ++v)
    pixels[static_cast<std::size_t>(v)] = static_cast<unsigned char>(v);
  bytes labels(256);
  for (int v = 0; v < 256; ++v)
    labels[static_cast<std::size_t>(v)] = static_cast<unsigned char>(v % 10);
  for (const char* split : {"train", "t10k"}) {
    write(dir, std::string(split) + "-images-idx3-ubyte", idx_file(0x803, {256, 1, 1}, pixels));
    write(dir, std::string(split) + "-labels-idx1-ubyte", idx_file(0x801, {256}, labels));
  }
  const auto features = write(dir, "x.npy", npy_file("|u1", "(256, 1, 1)", pixels));
  const auto targets = write(dir, "y.npy", npy_file("|u1", "(256,)", labels));
  const auto from_idx = troupe::load_fashion_mnist(dir.string());
  const auto from_npy = troupe::load_npy(features, targets, features, targets,
                                         {{1 / 255.0}, {0.2860}, {0.3530}});
  CHECK(from_npy.train.count == 256);
  CHECK(from_npy.train.features == 1);
  CHECK(from_npy.train.classes == 10);
  CHECK(from_npy.train.labels == from_idx.train.labels);
  std::vector<std::int64_t> all(256);
  for (int v = 0; v < 256; ++v)
    all[static_cast<std::size_t>(v)] = v;
  std::vector<float> a(256), b(256);
  from_idx.train.gather(all.data(), 0, 256, a.data());
  from_npy.train.gather(all.data(), 0, 256, b.data());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("a bad header is a data_error naming the file, the byte and what was expected") {
  temp_directory dir{"troupe-npy"};
  const auto data = raw<float>({1, 2, 3, 4});
  struct bad_case {
    const char* what;
    bytes content;
    const char* says;
  };
  auto truncated = npy_file("<f4", "(2, 2)", data);
  truncated.resize(truncated.size() - 1);
  auto lying_length = npy_file("<f4", "(2, 2)", data);
  lying_length[8] = 0xff;
  lying_length[9] = 0x7f;  // a header of 32767 bytes in a file of 80
  auto version_4 = npy_file("<f4", "(2, 2)", data);
  version_4[6] = 4;
  auto huge_header = npy_file("<f4", "(2, 2)", data, 2);
  huge_header[8] = huge_header[9] = huge_header[10] = 0xff;
  huge_header[11] = 0x7f;  // 2 GiB of header claimed, in a file of 144 bytes
  const std::string nested = std::string(100000, '(') + std::string(100000, ')');
  const std::vector<bad_case> cases = {
      {"not npy", bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0}, "byte 0: not a NumPy .npy file"},
      {"empty", bytes{}, "byte 0: not a NumPy .npy file"},
      {"version 4", version_4, "byte 6: format version 4.0"},
      {"lying header length", lying_length, "the header claims 32767 bytes"},
      {"fortran order", npy_file("<f4", "(2, 2)", data, 1, "True"),
       "fortran_order is 'True'; troupe reads C order"},
      {"object", npy_file("|O", "(2, 2)", data), "dtype '|O' is not one troupe reads (an object"},
      {"big-endian", npy_file(">f4", "(2, 2)", data), "dtype '>f4' is not one troupe reads (big-endian"},
      {"complex", npy_file("<c8", "(2, 2)", data), "dtype '<c8' is not one troupe reads"},
      {"overflowing shape", npy_file("<f4", "(4294967296, 4294967296)", data),
       "holds more than 1099511627776 values"},
      {"huge dimension", npy_file("<f4", "(99999999999999999999, 1)", data),
       "is larger than any troupe reads"},
      {"truncated data", truncated, "needs 16 bytes of data, but the file has 15 (is it truncated?)"},
      {"no shape", bytes(npy_file("<f4", "(2, 2)", data)), ""},  // the control: reads
      {"not a tuple", npy_file("<f4", "(2, x)", data), "'shape' should be a tuple of integers"},
      {"huge header", huge_header, "no .npy header is longer than 1048576"},
      {"deeply nested shape", npy_file("<f4", nested, data, 2),
       "'shape' should be a tuple of integers, not '(((("},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto path = write(dir, "bad.npy", c.content);
    if (std::string{c.says}.empty()) {
      CHECK_NOTHROW(troupe::read_npy_header(path));
      continue;
    }
    const auto message = data_error_of([&] { troupe::read_npy_header(path); });
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.find("bad.npy") != std::string::npos);
  }
  CHECK(data_error_of([&] { troupe::read_npy_header(dir / "missing.npy"); })
            .find("missing.npy': cannot open") != std::string::npos);
}

TEST_CASE("targets are integer labels that agree with the features in count") {
  temp_directory dir{"troupe-npy"};
  const auto features = write(dir, "x.npy", npy_file("<f4", "(3, 2)", raw<float>({1, 2, 3, 4, 5, 6})));
  const auto good = write(dir, "y.npy", npy_file("<i8", "(3,)", raw<std::int64_t>({0, 2, 1})));
  CHECK(troupe::read_npy_labels(good) == std::vector<std::int32_t>{0, 2, 1});
  const auto column = write(dir, "y1.npy", npy_file("<i2", "(3, 1)", raw<std::int16_t>({1, 0, 1})));
  CHECK(troupe::read_npy_labels(column) == std::vector<std::int32_t>{1, 0, 1});
  const auto negative = write(dir, "neg.npy", npy_file("|i1", "(3,)", raw<std::int8_t>({0, -1, 1})));
  CHECK(data_error_of([&] { troupe::read_npy_labels(negative); })
            .find("target 1 is -1; class labels are in 0 .. 16777215") != std::string::npos);
  const auto floats = write(dir, "f.npy", npy_file("<f4", "(3,)", raw<float>({0, 1, 1})));
  CHECK(data_error_of([&] { troupe::read_npy_labels(floats); }).find("class labels are integers") !=
        std::string::npos);
  const auto matrix = write(dir, "m.npy", npy_file("|u1", "(3, 2)", raw<std::uint8_t>({0, 1, 1, 0, 1, 1})));
  CHECK(data_error_of([&] { troupe::read_npy_labels(matrix); })
            .find("targets of shape (3, 2); expected (N) or (N, 1)") != std::string::npos);
  const auto two = write(dir, "two.npy", npy_file("|u1", "(2,)", raw<std::uint8_t>({0, 1})));
  CHECK(data_error_of([&] { troupe::load_npy(features, two, features, good, {}); })
            .find("has 3 samples, but") != std::string::npos);
  const auto wide = write(dir, "w.npy", npy_file("<f4", "(3, 3)", raw<float>({1, 2, 3, 4, 5, 6, 7, 8, 9})));
  CHECK(data_error_of([&] { troupe::load_npy(features, good, wide, good, {}); })
            .find("has samples of 3 values, but") != std::string::npos);
}

TEST_CASE("a run on .npy files trains to the parameters a run on the same IDX pixels reaches") {
  temp_directory dir{"troupe-npy-run"};
  // 64 training and 32 test samples of 2x3 pixels, labels of the 10 classes.
  const std::int64_t train = 64, test = 32, pixels = 6;
  auto make = [&](std::int64_t count, std::uint32_t seed, bytes& images, bytes& labels) {
    images.resize(static_cast<std::size_t>(count * pixels));
    labels.resize(static_cast<std::size_t>(count));
    std::uint32_t state = seed;
    for (auto& p : images)
      p = static_cast<unsigned char>((state = state * 1664525u + 1013904223u) >> 24);
    for (std::int64_t i = 0; i < count; ++i)
      labels[static_cast<std::size_t>(i)] =
          static_cast<unsigned char>(images[static_cast<std::size_t>(i * pixels)] % 10);
    labels[0] = 9;  // the npy source counts classes by the largest label
  };
  bytes train_images, train_labels, test_images, test_labels;
  make(train, 1, train_images, train_labels);
  make(test, 2, test_images, test_labels);
  write(dir, "train-images-idx3-ubyte", idx_file(0x803, {64, 2, 3}, train_images));
  write(dir, "train-labels-idx1-ubyte", idx_file(0x801, {64}, train_labels));
  write(dir, "t10k-images-idx3-ubyte", idx_file(0x803, {32, 2, 3}, test_images));
  write(dir, "t10k-labels-idx1-ubyte", idx_file(0x801, {32}, test_labels));
  write(dir, "x.npy", npy_file("|u1", "(64, 2, 3)", train_images));
  write(dir, "y.npy", npy_file("|u1", "(64,)", train_labels));
  write(dir, "tx.npy", npy_file("|u1", "(32, 2, 3)", test_images));
  write(dir, "ty.npy", npy_file("|u1", "(32,)", test_labels));
  const std::string rest =
      "batch_size = 16\neval_batch_size = 32\n[run]\nseed = 3\n[optimizer]\ntype = \"adam\"\n"
      "lr = 0.01\n[model]\n[[model.layers]]\ntype = \"linear\"\nout = 8\n"
      "[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n";
  const auto idx_config = troupe::parse_config(
      "[data]\nsource = \"fashion-mnist\"\npath = \".\"\n" + rest, "idx.toml", dir.string());
  const auto npy_config = troupe::parse_config(
      "[data]\nsource = \"npy\"\nfeatures = \"x.npy\"\ntargets = \"y.npy\"\n"
      "test_features = \"tx.npy\"\ntest_targets = \"ty.npy\"\nscale = 0.0039215686274509803\n"
      "mean = 0.2860\nstd = 0.3530\n" + rest,
      "npy.toml", dir.string());
  const auto a = troupe::test::train_resumable(idx_config, 12, "", "");
  const auto b = troupe::test::train_resumable(npy_config, 12, "", "");
  CHECK(a == b);
}

TEST_CASE("scale, mean and std that are not numbers, nested or empty are config errors at their key") {
  const std::string head = "[data]\nsource = \"npy\"\n";
  const std::string model = "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 2\n";
  auto refused = [&](const std::string& line, const std::string& says) {
    INFO(line);
    CHECK_THROWS_WITH_AS(troupe::parse_config(head + line + "\n" + model, "bad.toml"),
                         doctest::Contains(says.c_str()), troupe::config_error);
  };
  refused("scale = [[1.0]]", "bad.toml:3:");
  refused("mean = []", "found 0 values");
  refused("std = 0", "std");
  refused("std = [1.0, -2.0]", "std");
  refused("scale = \"1/255\"", "scale");
  refused("mean = [" + std::string(200000, '[') + std::string(200000, ']') + "]", "bad.toml");
}
