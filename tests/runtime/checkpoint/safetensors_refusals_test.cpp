// safetensors_refusals_test.cpp: the safetensors reader on hostile input. Each malformed
// file, written by hand, is refused with a data_error that names the file, says what was
// expected and what was found; and no mutation of a good file gets past the reader as
// anything but a data_error or a well-formed file.
#include "runtime/checkpoint/safetensors.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::byte_vector;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::raw_safetensors;
using troupe::test::temp_directory;
using troupe::test::write_bytes;

namespace {

// The message of parsing `header` followed by `data_bytes` bytes, as the file "bad.st".
std::string refusal(const std::string& header, std::size_t data_bytes = 0) {
  const auto message =
      data_error_of([&] { parse_safetensors(raw_safetensors(header, data_bytes), "bad.st"); });
  CHECK_MESSAGE(message.rfind("safetensors file 'bad.st': ", 0) == 0, message);
  return message;
}

// A one-tensor header: tensor "a" with the given JSON fields.
std::string one_tensor(const std::string& fields) { return R"({"a":{)" + fields + "}}"; }

}  // namespace

TEST_CASE("a safetensors file shorter than its 8-byte length is refused as truncated") {
  const auto message = data_error_of([] { parse_safetensors(byte_vector{1, 0, 0}, "short.st"); });
  CHECK(contains(message,
                 "safetensors file 'short.st': is 3 bytes long; expected at least the "
                 "8-byte header length"));
}

TEST_CASE("a safetensors header length past the end of the file or above 100 MB is refused") {
  auto truncated = raw_safetensors(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,4])"));
  truncated.resize(truncated.size() - 5);
  const auto past = data_error_of([&] { parse_safetensors(truncated, "cut.st"); });
  CHECK(contains(past, "runs past the end of the"));
  CHECK(contains(past, "the file is truncated or not a safetensors file"));

  byte_vector huge(64, ' ');
  for (int i = 0; i < 8; ++i)
    huge[i] = 0x7F;  // 0x7F7F7F7F7F7F7F7F
  CHECK(contains(data_error_of([&] { parse_safetensors(huge, "huge.st"); }),
                 "is above the limit of 100000000 bytes"));
}

TEST_CASE("a safetensors header that is not a JSON object is refused") {
  CHECK(contains(refusal("[1, 2]   "), "the header starts with '['; expected a JSON object"));
  CHECK(contains(refusal(""), "the header is empty"));
  CHECK(contains(refusal(R"({"a": {"dtype": "F32",)"), "header: not valid JSON"));
  CHECK(contains(refusal("{\"a\xff\": 1}"), "not valid JSON"));  // not UTF-8
}

TEST_CASE("a safetensors header nested 100000 deep is refused before parsing") {
  // nlohmann's destructor recurses once per level: this must never reach it.
  const std::string deep = R"({"a":)" + std::string(100000, '[');
  const auto message = refusal(deep);
  CHECK(contains(message, "nest more than 64 levels deep at byte 68"));
  // Brackets inside strings are text, not nesting.
  CHECK(contains(refusal(R"({"[[[[":5})"), "tensor '[[[[' is the number 5"));
}

TEST_CASE("a safetensors entry with missing, unknown or wrong-typed fields is refused") {
  CHECK(contains(refusal(R"({"a": 5})"),
                 "tensor 'a' is the number 5; expected an object with dtype, shape and "
                 "data_offsets"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1])"), 4),
                 "tensor 'a' has no field 'data_offsets'"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1)"), 4),
                 "tensor 'a' has the field 'x'; expected only dtype, shape and data_offsets"));
  CHECK(contains(refusal(one_tensor(R"("dtype":4,"shape":[1],"data_offsets":[0,4])"), 4),
                 "dtype is the number 4; expected a string"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":"1","data_offsets":[0,4])"), 4),
                 "shape is the string '1'; expected an array"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0])"), 4),
                 "data_offsets is an array of 1 elements; expected an array [begin, end]"));
}

TEST_CASE("a safetensors entry of an unknown dtype is refused, naming the ones troupe reads") {
  CHECK(
      contains(refusal(one_tensor(R"("dtype":"F16","shape":[2],"data_offsets":[0,4])"), 4),
               "tensor 'a': dtype 'F16' is not one troupe reads; expected F32, F64, I32, I64 or "
               "BF16"));
}

TEST_CASE("a BF16 entry is held to two bytes an element, and read back widened exactly") {
  // Three bf16 values need 6 bytes: 4 or 8 are refused as any dtype's wrong size is.
  CHECK(contains(refusal(one_tensor(R"("dtype":"BF16","shape":[3],"data_offsets":[0,4])"), 4),
                 "tensor 'a'"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"BF16","shape":[3],"data_offsets":[0,8])"), 8),
                 "tensor 'a'"));
  // 1.0, -2.0 and 0.15625 as bfloat16 (0x3F80, 0xC000, 0x3E20), little-endian.
  auto bytes = raw_safetensors(one_tensor(R"("dtype":"BF16","shape":[3],"data_offsets":[0,6])"));
  bytes.insert(bytes.end(), {0x80, 0x3F, 0x00, 0xC0, 0x20, 0x3E});
  const auto file = parse_safetensors(std::move(bytes), "ok.st");
  CHECK(file.floats("a") == std::vector<float>{1.0f, -2.0f, 0.15625f});
  CHECK_THROWS_AS(file.values<float>("a"), data_error);  // not F32: floats() widens it
}

TEST_CASE(
    "a safetensors shape with a negative, fractional or huge dimension or rank 9 is refused") {
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[2,-1],"data_offsets":[0,0])")),
                 "dimension 1 of the shape is the number -1; expected a non-negative integer"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,0])")),
                 "dimension 0 of the shape is the number 1.5"));
  CHECK(contains(
      refusal(one_tensor(R"("dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4])"), 4),
      "shape has 9 dimensions; expected at most 8"));
  // 2^32 * 2^32 elements: the product overflows 64 bits and must not wrap to a small size.
  CHECK(contains(
      refusal(one_tensor(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0])")),
      "shape (4294967296, 4294967296) of F32 needs more bytes than 64 bits count"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F64","shape":[1000000],"data_offsets":[0,8])"), 8),
                 "needs 8000000 bytes; the data block holds 8"));
  // A zero dimension makes the tensor empty whatever the others are.
  CHECK(parse_safetensors(
            raw_safetensors(one_tensor(
                R"("dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0])")))
            .at("a")
            .bytes == 0);
}

TEST_CASE("safetensors data_offsets out of order, past the data or of the wrong size are refused") {
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[4,0])"), 4),
                 "data_offsets [4,0] are not [begin, end] with 0 <= begin <= end <= 4"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,8])"), 4),
                 "are not [begin, end]"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])"), 4),
                 "are not [begin, end]"));
  CHECK(contains(refusal(one_tensor(R"("dtype":"F32","shape":[2,3],"data_offsets":[0,16])"), 24),
                 "tensor 'a': data_offsets [0,16] hold 16 bytes; expected 24 (shape (2, 3) of "
                 "F32, 4 bytes each)"));
}

TEST_CASE("safetensors entries that overlap, leave a hole or leave trailing bytes are refused") {
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  CHECK(
      contains(refusal("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
               "tensor 'b' at [4, 12) overlaps tensor 'a' at [0, 8)"));
  CHECK(
      contains(refusal("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", 20),
               "bytes [8, 12) of the data block belong to no tensor (a hole before tensor 'b')"));
  CHECK(contains(refusal("{" + a + "}", 12),
                 "bytes [8, 12) at the end of the data block belong to no tensor"));
  // An empty tensor inside another one's bytes is an overlap too.
  CHECK(contains(refusal("{" + a + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 8),
                 "tensor 'e' at [4, 4) overlaps tensor 'a'"));
}

TEST_CASE("safetensors names that repeat or are empty, and bad __metadata__, are refused") {
  const std::string a = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  CHECK(contains(refusal("{" + a + "," + a + "}", 4),
                 "header: the key 'a' appears twice in one object; expected each key once"));
  CHECK(contains(refusal(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
                 "a tensor has an empty name"));
  CHECK(contains(refusal(R"({"__metadata__":{"k":1}})"),
                 "__metadata__ value of 'k' is the number 1; expected a string"));
  CHECK(contains(refusal(R"({"__metadata__":["k"]})"),
                 "__metadata__ is an array of 1 elements; expected an object of strings"));
}

TEST_CASE("a safetensors refusal quotes at most 80 characters of the file's text") {
  const std::string name(1000, 'n');
  const auto message =
      refusal(R"({")" + name + R"(":{"dtype":"X","shape":[],"data_offsets":[0,0]}})");
  CHECK(contains(message, "'" + std::string(80, 'n') + "'... (1000 bytes)"));
  CHECK(message.size() < 300);
  CHECK(contains(refusal(R"({"a\u0001b": 5})"), R"(tensor 'a\x01b')"));
}

TEST_CASE("read_safetensors refuses a missing file, a directory and a truncated file by path") {
  const temp_directory dir{"troupe-safetensors"};
  CHECK(contains(data_error_of([&] { read_safetensors(dir / "none.st"); }),
                 "safetensors file '" + dir / "none.st" + "': does not exist"));
  CHECK(contains(data_error_of([&] { read_safetensors(dir.string()); }), "is a directory"));
  auto bytes = raw_safetensors(one_tensor(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), 8);
  bytes.resize(bytes.size() - 3);
  write_bytes(dir / "cut.st", bytes);
  const auto message = data_error_of([&] { read_safetensors(dir / "cut.st"); });
  CHECK(contains(message, "safetensors file '" + dir / "cut.st" + "'"));
  CHECK(contains(message, "needs 8 bytes; the data block holds 5"));
  CHECK(contains(data_error_of([&] { read_safetensors_header(dir / "cut.st"); }),
                 "needs 8 bytes; the data block holds 5"));
}

TEST_CASE(
    "no truncation or changed byte of a safetensors file escapes as anything but data_error") {
  const std::vector<float> w{1, 2, 3, 4};
  const std::vector<std::int64_t> n{7};
  const auto good = serialize_safetensors({{"w", safetensors_dtype::f32, {2, 2}, w.data()},
                                           {"n", safetensors_dtype::i64, {1}, n.data()}},
                                          {{"k", "v"}});
  int refused = 0;
  int accepted = 0;
  const auto try_parse = [&](const byte_vector& bytes) {
    try {
      parse_safetensors(bytes, "mutant");
      ++accepted;
    } catch (const data_error&) {
      ++refused;
    }
  };
  for (std::size_t size = 0; size < good.size(); ++size)
    try_parse(byte_vector(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size)));
  CHECK(refused == static_cast<int>(good.size()));  // every proper prefix is refused
  for (std::size_t at = 0; at < good.size(); ++at)
    for (std::uint8_t value : {0x00, 0x01, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x7B, 0x7D, 0xFF}) {
      auto bytes = good;
      bytes[at] = value;
      try_parse(bytes);
    }
  CHECK(accepted > 0);  // changes to the data block (and some to the header) stay valid
}
