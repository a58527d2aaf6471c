// manifest_test.cpp: manifest.json round trips, and each way a manifest can be wrong (a
// newer format_version, a missing or wrongly typed field, a negative step, an unsafe shard
// file name, ...) refused with a data_error naming the manifest and the field.
#include "runtime/checkpoint/manifest.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::temp_directory;

namespace {

checkpoint_manifest sample_manifest() {
  checkpoint_manifest m;
  m.step = 1200;
  m.epoch = 2;
  m.config_hash = "9f2c4e";
  m.seed = std::numeric_limits<std::uint64_t>::max();  // seeds use all 64 bits
  m.data_epoch = 2;
  m.data_step_in_epoch = 75;
  m.lr_schedule_step = 1200;
  m.optimizer = "adamw";
  m.shards = {{"optimizer-0.safetensors", 813056, 0xFFFFFFFFu, {"0.weight", "0.bias"}},
              {"optimizer-1.safetensors", 0, 0, {}}};
  m.layers = {
      {0,
       "linear",
       {{"weight", safetensors_dtype::f32, {256, 784}}, {"bias", safetensors_dtype::f32, {256}}}},
      {1, "relu", {}}};
  return m;
}

void check_equal(const checkpoint_manifest& a, const checkpoint_manifest& b) {
  CHECK(a.format_version == b.format_version);
  CHECK(a.step == b.step);
  CHECK(a.epoch == b.epoch);
  CHECK(a.config_hash == b.config_hash);
  CHECK(a.seed == b.seed);
  CHECK(a.data_epoch == b.data_epoch);
  CHECK(a.data_step_in_epoch == b.data_step_in_epoch);
  CHECK(a.lr_schedule_step == b.lr_schedule_step);
  CHECK(a.optimizer == b.optimizer);
  REQUIRE(a.shards.size() == b.shards.size());
  for (std::size_t i = 0; i < a.shards.size(); ++i) {
    CHECK(a.shards[i].file == b.shards[i].file);
    CHECK(a.shards[i].bytes == b.shards[i].bytes);
    CHECK(a.shards[i].crc32 == b.shards[i].crc32);
    CHECK(a.shards[i].tensors == b.shards[i].tensors);
  }
  REQUIRE(a.layers.size() == b.layers.size());
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    CHECK(a.layers[i].index == b.layers[i].index);
    CHECK(a.layers[i].type == b.layers[i].type);
    REQUIRE(a.layers[i].params.size() == b.layers[i].params.size());
    for (std::size_t j = 0; j < a.layers[i].params.size(); ++j) {
      CHECK(a.layers[i].params[j].name == b.layers[i].params[j].name);
      CHECK(a.layers[i].params[j].dtype == b.layers[i].params[j].dtype);
      CHECK(a.layers[i].params[j].shape == b.layers[i].params[j].shape);
    }
  }
}

// The refusal of the sample manifest after `change` edits its JSON, read as "m.json".
template <typename Change>
std::string refusal_after(Change&& change) {
  auto json = nlohmann::json::parse(manifest_to_json(sample_manifest()));
  change(json);
  const auto message = data_error_of([&] { manifest_from_json(json.dump(), "m.json"); });
  CHECK_MESSAGE(message.rfind("manifest 'm.json': ", 0) == 0, message);
  return message;
}

}  // namespace

TEST_CASE("a checkpoint manifest round-trips through its JSON text and its file") {
  const auto m = sample_manifest();
  check_equal(manifest_from_json(manifest_to_json(m), "m.json"), m);
  const temp_directory dir{"troupe-manifest"};
  write_manifest(dir / "manifest.json", m);
  check_equal(read_manifest(dir / "manifest.json"), m);
  const auto text = manifest_to_json(m);
  CHECK(text.find("\"format_version\": 1") < text.find("\"step\": 1200"));  // readable order
  CHECK(contains(text, "\"crc32\": 4294967295"));
}

TEST_CASE("a manifest of a newer format_version is refused, naming both versions") {
  const auto message = refusal_after([](auto& j) { j["format_version"] = 2; });
  CHECK(contains(message,
                 "field 'format_version' is 2: the checkpoint was written by a newer "
                 "troupe; this troupe reads format_version 1"));
  CHECK(contains(refusal_after([](auto& j) { j["format_version"] = 0; }),
                 "field 'format_version' is 0; expected 1"));
  CHECK(contains(refusal_after([](auto& j) { j["format_version"] = "1"; }),
                 "field 'format_version' is the string '1'; expected an integer"));
}

TEST_CASE("a manifest with a missing, unknown or wrongly typed field is refused, naming it") {
  CHECK(contains(refusal_after([](auto& j) { j.erase("step"); }), "field 'step' is missing"));
  CHECK(contains(refusal_after([](auto& j) { j["step"] = -1; }),
                 "field 'step' is the number -1; expected an integer from 0 to"));
  CHECK(contains(refusal_after([](auto& j) { j["epoch"] = 1.5; }),
                 "field 'epoch' is the number 1.5"));
  CHECK(contains(refusal_after([](auto& j) { j["config_hash"] = 7; }),
                 "field 'config_hash' is the number 7; expected a string"));
  CHECK(contains(refusal_after([](auto& j) { j["data_step_in_epoch"] = nullptr; }),
                 "field 'data_step_in_epoch' is null"));
  CHECK(contains(refusal_after([](auto& j) { j["shards"] = "none"; }),
                 "field 'shards' is the string 'none'; expected an array"));
  CHECK(contains(refusal_after([](auto& j) { j["shards"][0].erase("crc32"); }),
                 "field 'shards[0].crc32' is missing"));
  CHECK(contains(refusal_after([](auto& j) { j["shards"][0]["crc32"] = 4294967296; }),
                 "field 'shards[0].crc32' is the number 4294967296; expected an integer from 0 "
                 "to 4294967295"));
  CHECK(contains(refusal_after([](auto& j) { j["shards"][0]["tensors"][1] = ""; }),
                 "field 'shards[0].tensors[1]' is the string ''; expected a tensor name"));
  CHECK(contains(refusal_after([](auto& j) { j["layers"][0]["params"][1]["shape"][0] = -3; }),
                 "field 'layers[0].params[1].shape[0]' is the number -3; expected a non-negative"));
  // A product past 64 bits was read as "needs 0" values; past one tensor's limit is refused.
  CHECK(contains(
      refusal_after([](auto& j) {
        j["layers"][0]["params"][0]["shape"] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
      }),
      "field 'layers[0].params[0].shape' is (1099511627776, 1099511627776), more than "
      "the limit of 1073741824 values in one tensor"));
  CHECK(contains(refusal_after([](auto& j) {
                   j["layers"][0]["params"][0]["shape"] = {32768, 32769};
                 }),
                 "more than the limit of 1073741824 values"));
  CHECK_NOTHROW(manifest_from_json(
      [] {
        auto j = nlohmann::json::parse(manifest_to_json(sample_manifest()));
        j["layers"][0]["params"][0]["shape"] = {32768, 32768, 0};  // empty is fine
        return j.dump();
      }(),
      "m.json"));
  CHECK(contains(refusal_after([](auto& j) { j["layers"][0]["params"][0]["dtype"] = "F16"; }),
                 "field 'layers[0].params[0].dtype' is 'F16'; expected F32, F64, I32 or I64"));
  CHECK(contains(refusal_after([](auto& j) { j["learning_rate"] = 0.1; }),
                 "field 'learning_rate' is not one troupe writes"));
  CHECK(contains(refusal_after([](auto& j) { j = nlohmann::json::array(); }),
                 "the manifest is an array of 0 elements; expected an object"));
}

TEST_CASE("a manifest naming a shard file outside its directory is refused") {
  for (const std::string name : {"../escape.safetensors", "sub/shard.safetensors", "..", ".",
                                 "/etc/passwd", "manifest.json"}) {
    INFO("file name " << name);
    CHECK(contains(refusal_after([&](auto& j) { j["shards"][0]["file"] = name; }),
                   "field 'shards[0].file' is '" + name + "'; expected a plain file name"));
  }
  CHECK(contains(refusal_after([](auto& j) { j["shards"][0]["file"] = ""; }),
                 "field 'shards[0].file' is the string ''; expected a non-empty string"));
}

TEST_CASE("a manifest listing a shard file twice or a tensor in two shards is refused") {
  CHECK(contains(refusal_after([](auto& j) { j["shards"][1]["file"] = j["shards"][0]["file"]; }),
                 "field 'shards[1].file' repeats the file 'optimizer-0.safetensors'"));
  CHECK(contains(refusal_after([](auto& j) { j["shards"][1]["tensors"].push_back("0.bias"); }),
                 "field 'shards[1].tensors[0]' names the tensor '0.bias', which shard "
                 "'optimizer-0.safetensors' holds too"));
  CHECK(contains(refusal_after([](auto& j) { j["layers"][1]["index"] = 0; }),
                 "field 'layers[1].index' repeats the layer index 0"));
}

TEST_CASE("a manifest that is not JSON, or nests too deep, is refused naming its file") {
  const auto not_json = data_error_of([] { manifest_from_json("{\"step\": ", "m.json"); });
  CHECK(contains(not_json, "manifest 'm.json': not valid JSON: parse error at line 1, column 10"));
  CHECK_FALSE(contains(not_json, "json.exception"));  // the library's tag, not the reader's
  CHECK(contains(data_error_of([] { manifest_from_json(std::string(100000, '['), "m.json"); }),
                 "manifest 'm.json': arrays and objects nest more than 64 levels deep"));
  const temp_directory dir{"troupe-manifest"};
  CHECK(contains(data_error_of([&] { read_manifest(dir / "manifest.json"); }),
                 "manifest '" + dir / "manifest.json" + "' does not exist"));
}

TEST_CASE("a manifest's feature statistics and validation split round-trip, and bad ones are "
          "refused naming the field") {
  auto m = sample_manifest();
  m.feature_mean = {1.5, -2};
  m.feature_std = {0.25, 3};
  m.validation = 0.1;
  m.validation_seed = 42;
  const auto back = manifest_from_json(manifest_to_json(m), "m.json");
  CHECK(back.feature_mean == m.feature_mean);
  CHECK(back.feature_std == m.feature_std);
  CHECK(back.validation == 0.1);
  CHECK(back.validation_seed == 42);
  // Written only where they apply: the sample manifest has neither.
  const auto plain = manifest_to_json(sample_manifest());
  CHECK_FALSE(contains(plain, "feature_mean"));
  CHECK_FALSE(contains(plain, "validation"));
  using json = nlohmann::json;
  CHECK(contains(refusal_after([](json& j) { j["validation"] = "0.1"; }),
                 "field 'validation' is"));
  CHECK(contains(refusal_after([](json& j) {
                   j["validation"] = {{"fraction", 1.5}, {"seed", 1}};
                 }),
                 "field 'validation.fraction' is 1.5"));
  CHECK(contains(refusal_after([](json& j) {
                   j["validation"] = {{"fraction", 0.1}, {"seed", -1}};
                 }),
                 "field 'validation.seed'"));
  CHECK(contains(refusal_after([](json& j) {
                   j["validation"] = {{"fraction", 0.1}, {"seed", 1}, {"extra", 2}};
                 }),
                 "field 'validation.extra' is not one troupe writes"));
  CHECK(contains(refusal_after([](json& j) {
                   j["feature_mean"] = {1, 2};
                   j["feature_std"] = {1};
                 }),
                 "field 'feature_std' has 1 values"));
  CHECK(contains(refusal_after([](json& j) {
                   j["feature_mean"] = {1, "x"};
                   j["feature_std"] = {1, 2};
                 }),
                 "field 'feature_mean' holds the string 'x'"));
  CHECK(contains(refusal_after([](json& j) {
                   j["feature_mean"] = json::array({json::array({1})});
                   j["feature_std"] = {1};
                 }),
                 "expected finite numbers"));
}
