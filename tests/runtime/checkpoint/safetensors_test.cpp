// safetensors_test.cpp: the safetensors writer and reader on well-formed files: round trips
// of every dtype, empty and zero tensors, metadata, the exact bytes of a tiny file (so the
// format is the real one), files laid out as other writers lay them out, and Python reading
// what troupe wrote. The refusals of malformed files are in safetensors_refusals_test.cpp.
#include "runtime/checkpoint/safetensors.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/atomic_file.hpp"
#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::byte_vector;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::raw_safetensors;
using troupe::test::read_bytes;
using troupe::test::temp_directory;

namespace {

// One tensor of every dtype, a scalar (rank 0: one element) and an empty tensor, with
// values at the edges of their types.
struct sample_tensors {
  std::vector<float> weight{0.5f, -1.25f, 3.0f, 1e-7f, -0.0f, 65504.0f};  // (2, 3)
  std::vector<double> bias{1.0 / 3.0, -2.5, 1e300};                       // (3)
  std::vector<std::int32_t> labels{0, -1, std::numeric_limits<std::int32_t>::max(),
                                   std::numeric_limits<std::int32_t>::min()};  // (4)
  std::vector<std::int64_t> counts{0, -1, (std::int64_t{1} << 53) + 1,
                                   std::numeric_limits<std::int64_t>::min()};  // (2, 2)
  float scalar = 42.0f;                                                        // ()

  std::vector<safetensors_tensor_ref> refs() const {
    return {{"fc1.weight", safetensors_dtype::f32, {2, 3}, weight.data()},
            {"fc1.bias", safetensors_dtype::f64, {3}, bias.data()},
            {"labels", safetensors_dtype::i32, {4}, labels.data()},
            {"counts", safetensors_dtype::i64, {2, 2}, counts.data()},
            {"scalar", safetensors_dtype::f32, {}, &scalar},
            {"nothing", safetensors_dtype::f32, {0, 5}, nullptr}};
  }
};

const std::map<std::string, std::string> sample_metadata{{"step", "100"},
                                                         {"note", "naïve ünïcode"}};

std::string bytes_as_string(const byte_vector& bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace

TEST_CASE("a safetensors round trip keeps names, order, dtypes, shapes, values and metadata") {
  const temp_directory dir{"troupe-safetensors"};
  const sample_tensors sample;
  const auto path = dir / "shard.safetensors";
  const auto written = write_safetensors(path, sample.refs(), sample_metadata);

  const auto bytes = read_bytes(path);
  CHECK(bytes == serialize_safetensors(sample.refs(), sample_metadata));
  CHECK(written.bytes == bytes.size());
  CHECK(written.crc32 == crc32(bytes.data(), bytes.size()));

  const auto file = read_safetensors(path);
  CHECK(file.source() == path);
  CHECK(file.metadata() == sample_metadata);
  REQUIRE(file.entries().size() == 6);
  const std::vector<std::string> order{"fc1.weight", "fc1.bias", "labels",
                                       "counts",     "scalar",   "nothing"};
  for (std::size_t i = 0; i < order.size(); ++i)
    CHECK(file.entries()[i].name == order[i]);  // written in the given order, read by offset
  CHECK(file.at("fc1.weight").shape == shape_t{2, 3});
  CHECK(file.at("fc1.bias").dtype == safetensors_dtype::f64);
  CHECK(file.at("scalar").shape == shape_t{});
  CHECK(file.at("nothing").shape == shape_t{0, 5});
  CHECK(file.at("nothing").bytes == 0);
  CHECK(file.values<float>("fc1.weight") == sample.weight);
  CHECK(file.values<double>("fc1.bias") == sample.bias);
  CHECK(file.values<std::int32_t>("labels") == sample.labels);
  CHECK(file.values<std::int64_t>("counts") == sample.counts);
  CHECK(file.values<float>("scalar") == std::vector<float>{42.0f});
  CHECK(file.values<float>("nothing").empty());
  // The view points into the file's own bytes.
  const auto& counts = file.at("counts");
  CHECK(std::memcmp(file.data(counts), sample.counts.data(), 32) == 0);
}

TEST_CASE("a safetensors file with no tensors round-trips, with and without metadata") {
  const auto empty = serialize_safetensors({});
  CHECK(bytes_as_string(empty) == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  const auto file = parse_safetensors(empty);
  CHECK(file.entries().empty());
  CHECK(file.metadata().empty());

  const auto with_metadata = parse_safetensors(serialize_safetensors({}, {{"k", "v"}}));
  CHECK(with_metadata.entries().empty());
  CHECK(with_metadata.metadata() == std::map<std::string, std::string>{{"k", "v"}});
}

TEST_CASE("the safetensors bytes of a tiny tensor are the format's, byte for byte") {
  const std::vector<float> values{1.0f, -2.0f};
  const std::vector<safetensors_tensor_ref> tensors{
      {"a", safetensors_dtype::f32, {2}, values.data()}};
  // The header is 54 characters, padded with 2 spaces to 56 = 0x38; then 1.0f and -2.0f as
  // little-endian IEEE 754 (0x3F800000, 0xC0000000).
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) +
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + "  " +
                               std::string("\x00\x00\x80\x3F\x00\x00\x00\xC0", 8);
  CHECK(bytes_as_string(serialize_safetensors(tensors)) == expected);

  // With metadata it comes first: 85 characters, padded with 3 spaces to 88 = 0x58.
  const std::string expected_with_metadata =
      std::string("\x58\0\0\0\0\0\0\0", 8) +
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" +
      "   " + std::string("\x00\x00\x80\x3F\x00\x00\x00\xC0", 8);
  CHECK(bytes_as_string(serialize_safetensors(tensors, {{"format", "pt"}})) ==
        expected_with_metadata);
}

TEST_CASE("a safetensors file laid out as other writers do it reads the same") {
  // Entries not in data order, keys in another order, no padding, spaces in the JSON.
  const std::string header = R"({ "b": {"data_offsets": [8, 12], "shape": [1], "dtype": "I32"},)"
                             R"( "a": {"shape": [2], "dtype": "F32", "data_offsets": [0, 8]} })";
  const auto file = parse_safetensors(raw_safetensors(header, 12), "other.safetensors");
  REQUIRE(file.entries().size() == 2);
  CHECK(file.entries()[0].name == "a");
  CHECK(file.entries()[1].name == "b");
  CHECK(file.values<std::int32_t>("b") == std::vector<std::int32_t>{0x0B0A0908});
}

TEST_CASE("read_safetensors_header reads a safetensors file's entries without its data") {
  const temp_directory dir{"troupe-safetensors"};
  const sample_tensors sample;
  const auto path = dir / "shard.safetensors";
  write_safetensors(path, sample.refs(), sample_metadata);
  const auto header = read_safetensors_header(path);
  CHECK_FALSE(header.has_data());
  CHECK(header.entries().size() == 6);
  CHECK(header.at("counts").bytes == 32);
  CHECK(header.metadata() == sample_metadata);
  CHECK_THROWS_AS(header.data(header.at("counts")), check_failure);
}

TEST_CASE("a safetensors lookup of a missing name or the wrong dtype names what the file has") {
  const sample_tensors sample;
  const auto file = parse_safetensors(serialize_safetensors(sample.refs()), "m.safetensors");
  const auto missing = data_error_of([&] { file.at("fc1.weigth"); });
  CHECK(contains(missing, "safetensors file 'm.safetensors': has no tensor 'fc1.weigth'"));
  CHECK(contains(missing, "did you mean 'fc1.weight'?"));
  CHECK(contains(missing, "'labels'"));
  const auto wrong = data_error_of([&] { file.values<float>("labels"); });
  CHECK(contains(wrong, "tensor 'labels' is I32; expected F32"));
}

TEST_CASE("python3 reads a safetensors file troupe wrote (with torch too, when installed)") {
  const std::string python = "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0) {
    MESSAGE("/usr/bin/python3 is not installed: troupe's file was not checked by Python");
    return;
  }
  const temp_directory dir{"troupe-safetensors"};
  const sample_tensors sample;
  const auto path = dir / "shard.safetensors";
  const auto written = write_safetensors(path, sample.refs(), sample_metadata);
  // Only the standard library: the format as its specification states it, checked
  // independently of our reader. torch, when present, reads the same bytes as tensors.
  const auto script = dir.write("read.py", R"py(
import json, struct, sys, zlib
raw = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert n % 8 == 0, 'header length %d is not a multiple of 8' % n
header = json.loads(raw[8:8 + n].decode('utf-8'))
data = raw[8 + n:]
codes = {'F32': 'f', 'F64': 'd', 'I32': 'i', 'I64': 'q'}
out = {'metadata': header.pop('__metadata__', {}), 'crc32': zlib.crc32(raw), 'tensors': {}}
end = 0
for name, info in sorted(header.items(), key=lambda item: item[1]['data_offsets']):
    b, e = info['data_offsets']
    assert b == end, 'tensor %s begins at %d, expected %d' % (name, b, end)
    end = e
    count = (e - b) // struct.calcsize(codes[info['dtype']])
    values = list(struct.unpack('<%d%s' % (count, codes[info['dtype']]), data[b:e]))
    out['tensors'][name] = {'dtype': info['dtype'], 'shape': info['shape'], 'values': values}
assert end == len(data), 'the tensors end at %d of %d data bytes' % (end, len(data))
try:
    import torch
    kinds = {'F32': torch.float32, 'F64': torch.float64, 'I32': torch.int32, 'I64': torch.int64}
    for name, info in header.items():
        b, e = info['data_offsets']
        kind = kinds[info['dtype']]
        if e > b:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=kind)
        else:
            t = torch.empty(0, dtype=kind)
        t = t.reshape(info['shape'])
        assert t.flatten().tolist() == out['tensors'][name]['values'], name
    out['torch'] = torch.__version__
except ImportError:
    out['torch'] = None
print(json.dumps(out))
)py");
  const std::string command = python + " " + script + " " + path + " 2>&1";
  std::string output;
  {
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buffer[4096];
    for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
      output.append(buffer, got);
    REQUIRE_MESSAGE(::pclose(pipe) == 0, "python3 failed:\n" << output);
  }
  const auto result = nlohmann::json::parse(output);
  CHECK(result["crc32"].get<std::uint32_t>() == written.crc32);
  CHECK(result["metadata"].get<std::map<std::string, std::string>>() == sample_metadata);
  const auto& tensors = result["tensors"];
  REQUIRE(tensors.size() == 6);
  CHECK(tensors["fc1.weight"]["dtype"] == "F32");
  CHECK(tensors["fc1.weight"]["shape"] == nlohmann::json::array({2, 3}));
  for (std::size_t i = 0; i < sample.weight.size(); ++i)  // f32 -> double is exact
    CHECK(tensors["fc1.weight"]["values"][i].get<double>() == double{sample.weight[i]});
  CHECK(tensors["fc1.bias"]["values"].get<std::vector<double>>() == sample.bias);
  CHECK(tensors["labels"]["values"].get<std::vector<std::int32_t>>() == sample.labels);
  CHECK(tensors["counts"]["values"].get<std::vector<std::int64_t>>() == sample.counts);
  CHECK(tensors["scalar"]["shape"] == nlohmann::json::array());
  CHECK(tensors["scalar"]["values"] == nlohmann::json::array({42.0}));
  CHECK(tensors["nothing"]["shape"] == nlohmann::json::array({0, 5}));
  CHECK(tensors["nothing"]["values"].empty());
  if (result["torch"].is_null())
    MESSAGE("torch is not installed for /usr/bin/python3: checked with struct and json only");
  else
    MESSAGE("torch " << result["torch"].get<std::string>() << " read the same values");
}
