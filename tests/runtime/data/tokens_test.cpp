// tokens_test.cpp: token files (nanoGPT's train.bin, a .npy of ids) as windows of a language
// model: the ids each window reads and its labels, the vocabulary check, vocab.json, the
// validation share, and every malformed file refused naming the file and the byte.
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "actors/training/data_loader_actor.hpp"
#include "runtime/data/tokens.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

/// What window `row` of `d` reads: its features (as ids) and its labels.
std::pair<std::vector<float>, std::vector<std::int32_t>> window(const dataset& d, std::int64_t row) {
  std::vector<float> x(static_cast<std::size_t>(d.features));
  std::vector<std::int32_t> y(static_cast<std::size_t>(d.positions));
  d.gather(&row, 0, 1, x.data());
  d.gather_labels(&row, 1, y.data());
  return {x, y};
}

std::vector<std::uint16_t> ramp(std::size_t n, std::uint16_t modulo) {
  std::vector<std::uint16_t> ids(n);
  for (std::size_t i = 0; i < n; ++i)
    ids[i] = static_cast<std::uint16_t>(i % modulo);
  return ids;
}

}  // namespace

TEST_CASE("a uint16 token file's windows are its ids, each labelled with the id after it") {
  const test::temp_directory dir{"troupe-tokens"};
  const auto path = test::write_test_file(dir / "train.bin", test::raw(ramp(11, 7)));
  for (auto access : {file_access::mapped, file_access::read}) {
    auto ids = open_token_file(path, "uint16", 7, access);
    REQUIRE(ids->size() == 11);
    // Tiled: (11 - 1) / 3 = 3 windows at 0, 3, 6; the last id is a label only.
    const auto tiled = token_dataset(ids, 0, 11, 3, 7, token_windows::tiled, "train");
    CHECK(tiled.count == 3);
    CHECK(tiled.draws_per_epoch == 0);
    CHECK(tiled.classes == 7);
    CHECK(tiled.positions == 3);
    CHECK(window(tiled, 2).first == std::vector<float>{6, 0, 1});
    CHECK(window(tiled, 2).second == std::vector<std::int32_t>{0, 1, 2});
    // Random: every start offset is a sample (11 - 3 = 8), an epoch the tiled count.
    const auto random = token_dataset(ids, 0, 11, 3, 7, token_windows::random, "train");
    CHECK(random.count == 8);
    CHECK(random.draws_per_epoch == 3);
    CHECK(random.epoch_samples() == 3);
    CHECK(window(random, 5).first == std::vector<float>{5, 6, 0});
    CHECK(window(random, 7).second == std::vector<std::int32_t>{1, 2, 3});  // the last id
    // A range of the ids: windows start at its beginning.
    const auto tail = token_dataset(ids, 5, 11, 2, 7, token_windows::tiled, "tail");
    CHECK(tail.count == 2);
    CHECK(window(tail, 1).first == std::vector<float>{0, 1});
  }
}

TEST_CASE("uint32 files and .npy files of any integer type give the same ids") {
  const test::temp_directory dir{"troupe-tokens"};
  const std::vector<std::uint32_t> wide{70000, 3, 69999, 0, 5};
  const auto bin = test::write_test_file(dir / "wide.bin", test::raw(wide));
  const auto npy32 = test::write_test_file(dir / "wide.npy", test::npy_file("<u4", "(5,)", test::raw(wide)));
  const std::vector<std::int64_t> long_ids(wide.begin(), wide.end());
  const auto npy64 = test::write_test_file(dir / "long.npy", test::npy_file("<i8", "(5, 1)", test::raw(long_ids)));
  for (const auto& path : {bin, npy32, npy64}) {
    auto ids = open_token_file(path, "uint32", 70001);
    std::vector<std::int32_t> out(5);
    ids->read(0, 5, out.data());
    CHECK(out == std::vector<std::int32_t>{70000, 3, 69999, 0, 5});
  }
  // A .npy says its own type: dtype is for raw files.
  const auto npy16 = test::write_test_file(dir / "narrow.npy", test::npy_file("<u2", "(11,)", test::raw(ramp(11, 7))));
  std::vector<std::int32_t> out(11);
  open_token_file(npy16, "uint32", 7)->read(0, 11, out.data());
  CHECK(out[10] == 3);
}

TEST_CASE("a token past the vocabulary, a negative one and a malformed file are refused naming the place") {
  const test::temp_directory dir{"troupe-tokens"};
  auto ids = ramp(20, 9);
  ids[13] = 9;
  const auto path = test::write_test_file(dir / "train.bin", test::raw(ids));
  CHECK_THROWS_WITH_AS(open_token_file(path, "uint16", 9),
                       doctest::Contains("byte 26: token 13 is 9, outside the vocabulary of 9 (ids 0 .. 8)"),
                       data_error);
  CHECK_NOTHROW(open_token_file(path, "uint16", 10));
  const std::vector<std::int32_t> negative{1, 2, -4};
  const auto npy = test::write_test_file(dir / "negative.npy", test::npy_file("<i4", "(3,)", test::raw(negative)));
  CHECK_THROWS_WITH_AS(open_token_file(npy, "uint16", 9),
                       doctest::Contains("token 2 is -4, outside the vocabulary"), data_error);
  const auto odd = test::write_test_file(dir / "odd.bin", test::bytes{1, 0, 2});
  CHECK_THROWS_WITH_AS(open_token_file(odd, "uint16", 9),
                       doctest::Contains("3 bytes, not a whole number of uint16 ids (2 bytes each)"),
                       data_error);
  const auto empty = test::write_test_file(dir / "empty.bin", test::bytes{});
  CHECK_THROWS_WITH_AS(open_token_file(empty, "uint16", 9), doctest::Contains("no token ids"),
                       data_error);
  const auto floats = test::write_float_npy(dir / "floats.npy", "(2,)", {1.0f, 2.0f});
  CHECK_THROWS_WITH_AS(open_token_file(floats, "uint16", 9),
                       doctest::Contains("token ids of a floating-point type"), data_error);
  // A lying .npy header: the npy reader's checks (shape beyond the data).
  const auto lying = test::write_test_file(dir / "lying.npy", test::npy_file("<u2", "(1000,)", test::raw(ramp(4, 9))));
  CHECK_THROWS_WITH_AS(open_token_file(lying, "uint16", 9),
                       doctest::Contains("needs 2000 bytes of data, but the file has 8"), data_error);
  CHECK_THROWS_AS(open_token_file(dir / "missing.bin", "uint16", 9), data_error);
  // Too few ids for one window and its labels.
  auto few = open_token_file(path, "uint16", 10);
  CHECK_THROWS_WITH_AS(token_dataset(few, 0, 20, 20, 10, token_windows::tiled, "'train.bin'"),
                       doctest::Contains("'train.bin' holds 20 token(s); a window needs context + 1 = 21"),
                       data_error);
}

TEST_CASE("the vocabulary's size comes from vocab.json next to the file, or is refused clearly") {
  const test::temp_directory dir{"troupe-tokens"};
  test::write_test_file(dir / "train.bin", test::raw(ramp(40, 5)));
  token_source source;
  source.train_path = dir / "train.bin";
  source.context = 4;
  source.validation = 0.25;
  CHECK_THROWS_WITH_AS(load_tokens(source),
                       doctest::Contains("needs the vocabulary's size: [data] vocab = N, or"),
                       data_error);
  std::ofstream{dir / "vocab.json"} << R"({"vocab_size": 5})";
  auto split = load_tokens(source);
  CHECK(split.train.classes == 5);
  std::ofstream{dir / "vocab.json"} << R"({"size": 6, "vocabulary": [1, 2]})";
  CHECK(load_tokens(source).train.classes == 6);
  std::ofstream{dir / "vocab.json"} << R"({"size": "many"})";
  CHECK_THROWS_WITH_AS(load_tokens(source), doctest::Contains("\"size\" is '\"many\"'; expected an integer"),
                       data_error);
  std::ofstream{dir / "vocab.json"} << R"([5])";
  CHECK_THROWS_WITH_AS(load_tokens(source), doctest::Contains("expected an object with \"vocab_size\""),
                       data_error);
  std::ofstream{dir / "vocab.json"} << "{";
  CHECK_THROWS_WITH_AS(load_tokens(source), doctest::Contains("not valid JSON"), data_error);
  source.vocabulary = 4;  // given: the file is not read; id 4 is past it
  CHECK_THROWS_WITH_AS(load_tokens(source), doctest::Contains("token 4 is 4, outside the vocabulary of 4"),
                       data_error);
}

TEST_CASE("validation is the last share of the training ids, read as tiled windows") {
  const test::temp_directory dir{"troupe-tokens"};
  test::write_test_file(dir / "train.bin", test::raw(ramp(40, 5)));
  token_source source;
  source.train_path = dir / "train.bin";
  source.vocabulary = 5;
  source.context = 4;
  source.validation = 0.25;  // ids 30 .. 39
  const auto split = load_tokens(source);
  CHECK(split.test.count == 0);
  CHECK(split.validation.count == 2);  // (10 - 1) / 4
  CHECK(window(split.validation, 0).first == std::vector<float>{0, 1, 2, 3});  // id 30 = 0
  CHECK(split.validation.draws_per_epoch == 0);
  CHECK(split.train.count == 30 - 4);  // every start of ids 0 .. 29
  CHECK(split.train.draws_per_epoch == (30 - 1) / 4);
  CHECK(window(split.train, 25).second == std::vector<std::int32_t>{1, 2, 3, 4});  // ids 26 .. 29
  // A test file instead: evaluated whole, tiled.
  test::write_test_file(dir / "val.bin", test::raw(ramp(9, 5)));
  source.test_path = dir / "val.bin";
  source.windows = token_windows::tiled;
  const auto with_test = load_tokens(source);
  CHECK(with_test.test.count == 2);
  CHECK(with_test.validation.count == 0);
  CHECK(with_test.train.count == 9);
}

TEST_CASE("a step's random draws are keyed by (seed, step): the same each time, in range, spread") {
  const auto a = step_draws(1000, 7, 42, 64);
  CHECK(a == step_draws(1000, 7, 42, 64));
  CHECK(a != step_draws(1000, 7, 43, 64));
  CHECK(a != step_draws(1000, 8, 42, 64));
  std::vector<int> seen(10);
  for (std::int64_t step = 0; step < 100; ++step)
    for (auto row : step_draws(10, 1, step, 50)) {
      REQUIRE(row >= 0);
      REQUIRE(row < 10);
      ++seen[static_cast<std::size_t>(row)];
    }
  // 5000 draws of 10 values: each ~500 (binomial sd ~21); 400 is ~5 sd below.
  for (int count : seen)
    CHECK(count > 400);
}
