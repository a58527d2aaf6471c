// interchange_test.cpp: weights in and out as PyTorch names them: export_weights writes a
// checkpoint's parameters only (pieces assembled, state dropped) and refuses what it cannot
// read or write; weights_from reads a state_dict file and refuses each way one can fail to
// fit the model, naming the file and the tensor.
#include "runtime/checkpoint/interchange.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::read_bytes;
using troupe::test::temp_directory;
using troupe::test::write_bytes;

namespace {

namespace fs = std::filesystem;

// The model Sequential(Linear(4, 3), ReLU(), Linear(3, 2)): layers 0 and 2 have parameters.
std::vector<model_layer> small_layers() {
  return {{0, "linear", {{"weight", {3, 4}}, {"bias", {3}}}},
          {2, "linear", {{"weight", {2, 3}}, {"bias", {2}}}}};
}

// Distinct values per tensor, so a mix-up shows: tensor t's element i is t + i / 100.
std::vector<float> values_of(int tensor, std::int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<float>(tensor) + static_cast<float>(i) / 100;
  return out;
}

struct named_values {
  std::string name;
  shape_t shape;
  std::vector<float> values;
};

// The state_dict of small_layers(), as PyTorch would save it.
std::vector<named_values> small_state() {
  return {{"0.weight", {3, 4}, values_of(1, 12)},
          {"0.bias", {3}, values_of(2, 3)},
          {"2.weight", {2, 3}, values_of(3, 6)},
          {"2.bias", {2}, values_of(4, 2)}};
}

std::string write_state(const std::string& path, const std::vector<named_values>& state) {
  std::vector<safetensors_tensor_ref> refs;
  for (const auto& t : state)
    refs.push_back({t.name, safetensors_dtype::f32, t.shape, t.values.data()});
  write_safetensors(path, refs, {{"format", "pt"}});
  return path;
}

// A complete checkpoint of small_layers() at step 7 under `root`, written as a run with two
// optimizer shards would: layer 0 whole with Adam state in one shard, layer 2's weight in
// two pieces (a sharded optimizer) and its bias whole in the other. Its directory. With
// `transposed`, that whole tensor of layer 0 is written as (4, 3), the manifest's (3, 4).
std::string write_small_checkpoint(const std::string& root, const std::string& transposed = "") {
  const auto dir = make_checkpoint_directory(root, 7);
  const auto state = small_state();
  const auto moment = values_of(9, 12);
  const auto& w2 = state[2].values;
  const std::vector<float> w2_head(w2.begin(), w2.begin() + 4), w2_tail(w2.begin() + 4, w2.end());
  auto shape = [&](const std::string& name) {
    return name == transposed ? shape_t{4, 3} : shape_t{3, 4};
  };
  const auto first = write_safetensors(
      (fs::path{dir} / "optimizer-0.safetensors").string(),
      {{"0.weight", safetensors_dtype::f32, shape("0.weight"), state[0].values.data()},
       {"0.bias", safetensors_dtype::f32, {3}, state[1].values.data()},
       {"0.weight.exp_avg", safetensors_dtype::f32, shape("0.weight.exp_avg"), moment.data()},
       {"2.weight@0", safetensors_dtype::f32, {4}, w2_head.data()}});
  const auto second =
      write_safetensors((fs::path{dir} / "optimizer-1.safetensors").string(),
                        {{"2.weight@4", safetensors_dtype::f32, {2}, w2_tail.data()},
                         {"2.bias", safetensors_dtype::f32, {2}, state[3].values.data()}});
  checkpoint_manifest m;
  m.step = 7;
  m.optimizer = "adam";
  m.shards = {{"optimizer-0.safetensors",
               first.bytes,
               first.crc32,
               {"0.weight", "0.bias", "0.weight.exp_avg", "2.weight@0"}},
              {"optimizer-1.safetensors", second.bytes, second.crc32, {"2.weight@4", "2.bias"}}};
  m.layers = describe_model(small_layers());
  commit_checkpoint(dir, m);
  return dir;
}

}  // namespace

TEST_CASE("weights_from reads every parameter of a state_dict file, at step 0, without state") {
  const temp_directory dir{"troupe-interchange"};
  const auto path = write_state(dir / "weights.safetensors", small_state());
  const auto start = weights_from(path, small_layers());
  CHECK(start.step == 0);
  REQUIRE(start.layers.size() == 2);
  CHECK(start.layers.at(0).size() == 2);  // weight and bias, no optimizer state
  CHECK(start.layers.at(0).at("weight") == values_of(1, 12));
  CHECK(start.layers.at(0).at("bias") == values_of(2, 3));
  CHECK(start.layers.at(2).at("weight") == values_of(3, 6));
  CHECK(start.layers.at(2).at("bias") == values_of(4, 2));
}

TEST_CASE("weights_from refuses a file that does not fit, naming the file and the tensor") {
  const temp_directory dir{"troupe-interchange"};
  const auto model = small_layers();
  auto refused = [&](const std::vector<named_values>& state) {
    const auto path = write_state(dir / "weights.safetensors", state);
    auto message = data_error_of([&] { weights_from(path, model); });
    CHECK(contains(message, path));
    return message;
  };

  SUBCASE("a missing parameter") {
    auto state = small_state();
    state.erase(state.begin() + 3);  // 2.bias
    const auto message = refused(state);
    CHECK(contains(message, "no tensor '2.bias' (2) F32 (layer 2, linear)"));
    CHECK(contains(message, "the model's parameters are 0.weight (3, 4), 0.bias (3)"));
  }
  SUBCASE("an extra tensor") {
    auto state = small_state();
    state.push_back({"4.weight", {2, 2}, values_of(5, 4)});
    const auto message = refused(state);
    CHECK(contains(message, "1 tensor(s) the model does not: '4.weight'"));
    CHECK_FALSE(contains(message, "no tensor"));
  }
  SUBCASE("optimizer state among the tensors") {
    auto state = small_state();
    state.push_back({"0.weight.exp_avg", {3, 4}, values_of(5, 12)});
    const auto message = refused(state);
    CHECK(contains(message, "'0.weight.exp_avg'"));
    CHECK(contains(message, "optimizer state is not read"));
  }
  SUBCASE("a model's own attribute names instead of the Sequential's") {
    auto state = small_state();
    state[0].name = "fc1.weight";
    const auto message = refused(state);
    CHECK(contains(message, "no tensor '0.weight' (3, 4) F32"));
    CHECK(contains(message, "'fc1.weight'"));
    CHECK(contains(message, "rename its keys"));
  }
  SUBCASE("a wrong shape") {
    auto state = small_state();
    state[2].shape = {3, 2};  // transposed (in, out)
    const auto message = refused(state);
    CHECK(contains(message, "tensor '2.weight' has shape (3, 2); layer 2 ('linear') needs (2, 3)"));
    CHECK(contains(message, "transposed"));
    state[2].shape = {6};
    CHECK_FALSE(contains(refused(state), "transposed"));
  }
}

TEST_CASE("weights_from refuses tensors that are not F32 and files that are not safetensors") {
  const temp_directory dir{"troupe-interchange"};
  const auto model = small_layers();
  SUBCASE("F64") {
    auto state = small_state();
    std::vector<double> wide(state[1].values.begin(), state[1].values.end());
    std::vector<safetensors_tensor_ref> refs;
    for (const auto& t : state)
      refs.push_back({t.name, safetensors_dtype::f32, t.shape, t.values.data()});
    refs[1] = {"0.bias", safetensors_dtype::f64, {3}, wide.data()};
    const auto path = dir / "double.safetensors";
    write_safetensors(path, refs);
    const auto message = data_error_of([&] { weights_from(path, model); });
    CHECK(contains(message, path));
    CHECK(contains(message, "tensor '0.bias' is F64; expected F32"));
  }
  SUBCASE("F16, which troupe does not read at all") {
    const auto path = dir / "half.safetensors";
    write_bytes(path,
                test::raw_safetensors(
                    R"({"0.weight":{"dtype":"F16","shape":[3,4],"data_offsets":[0,24]}})", 24));
    const auto message = data_error_of([&] { weights_from(path, model); });
    CHECK(contains(message, path));
    CHECK(contains(message, "'F16'"));
    CHECK(contains(message, "F32 tensors named as the equivalent torch.nn.Sequential"));
  }
  SUBCASE("not a safetensors file") {
    const auto path = dir / "weights.pt";
    write_bytes(path, {0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 0});  // a zip, as torch.save
    const auto message = data_error_of([&] { weights_from(path, model); });
    CHECK(contains(message, "[model] init_from: safetensors file '" + path + "'"));
  }
  SUBCASE("a missing file") {
    const auto message = data_error_of([&] { weights_from(dir / "nope.safetensors", model); });
    CHECK(contains(message, "'" + (dir / "nope.safetensors") + "' does not exist"));
  }
}

TEST_CASE("export writes a checkpoint's parameters whole, with torch's names and no state") {
  const temp_directory root{"troupe-interchange"};
  const auto checkpoint = write_small_checkpoint(root.string());
  const auto output = root / "model.safetensors";
  const auto exported = export_weights(root.string(), output);  // the root: its newest
  CHECK(exported.checkpoint == checkpoint);
  CHECK(exported.step == 7);
  CHECK(exported.values == 12 + 3 + 6 + 2);
  CHECK(exported.tensors == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});

  const auto file = read_safetensors(output);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(file.entries().size() == 4);
  CHECK(exported.file.bytes == read_bytes(output).size());
  for (const auto& t : small_state()) {
    CAPTURE(t.name);
    REQUIRE(file.find(t.name) != nullptr);
    CHECK(file.at(t.name).shape == t.shape);  // pieces reshaped to (2, 3)
    CHECK(file.values<float>(t.name) == t.values);
  }
  // And back: the export is a start for the same model.
  CHECK(weights_from(output, small_layers()).layers.at(2).at("weight") == values_of(3, 6));
}

TEST_CASE("export --dtype bf16 writes each master rounded to bf16, which init_from reads back") {
  const temp_directory root{"troupe-interchange"};
  write_small_checkpoint(root.string());
  const auto output = root / "model-bf16.safetensors";
  const auto exported = export_weights(root.string(), output, dtype::bf16);
  const auto file = read_safetensors(output);
  CHECK(exported.file.bytes == read_bytes(output).size());
  const auto start = weights_from(output, small_layers());
  for (const auto& t : small_state()) {
    CAPTURE(t.name);
    const auto& entry = file.at(t.name);
    CHECK(entry.dtype == safetensors_dtype::bf16);
    CHECK(entry.bytes == t.values.size() * 2);
    const auto widened = file.floats(t.name);
    REQUIRE(widened.size() == t.values.size());
    for (std::size_t i = 0; i < widened.size(); ++i) {
      // A bf16 value (16 low zero bits), the nearest to the master: within half a unit of
      // bf16's last place, at most 2^-8 of the value (bf16 has 8 significant bits).
      std::uint32_t bits;
      std::memcpy(&bits, &widened[i], sizeof bits);
      CHECK((bits & 0xFFFFu) == 0);
      CHECK(std::fabs(widened[i] - t.values[i]) <= std::ldexp(std::fabs(t.values[i]), -8));
    }
    const auto dot = t.name.find('.');
    const auto layer = std::stoi(t.name.substr(0, dot));
    CHECK(start.layers.at(layer).at(t.name.substr(dot + 1)) == widened);
  }
}

TEST_CASE("a shard's tensor of another shape than its manifest's parameter is refused") {
  // The same 12 values as (4, 3) over a manifest's (3, 4) were exported and resumed from
  // as (3, 4): a transposed weight, silently. A state has its parameter's shape too.
  for (const std::string name : {"0.weight", "0.weight.exp_avg"}) {
    INFO(name);
    const temp_directory root{"troupe-interchange"};
    const auto checkpoint = write_small_checkpoint(root.string(), name);
    const auto expected = "optimizer-0.safetensors': tensor '" + name +
                          "' has shape (4, 3), but the manifest gives its parameter the shape "
                          "(3, 4)";
    CHECK(contains(
        data_error_of([&] { read_checkpoint_tensors(checkpoint, verify_checkpoint(checkpoint)); }),
        expected));
    if (name == "0.weight")
      CHECK(contains(data_error_of([&] { export_weights(checkpoint, root / "out.safetensors"); }),
                     expected));
  }
}

TEST_CASE("export refuses a missing path, a damaged checkpoint and an unwritable output") {
  const temp_directory root{"troupe-interchange"};
  const auto checkpoint = write_small_checkpoint(root.string());
  const auto output = root / "model.safetensors";

  auto message = data_error_of([&] { export_weights(root / "nope", output); });
  CHECK(contains(message, root / "nope"));

  message = data_error_of([&] { export_weights(checkpoint, root / "no-dir/model.safetensors"); });
  CHECK(contains(message, "the directory '" + (root / "no-dir") + "' does not exist"));
  message = data_error_of([&] { export_weights(checkpoint, root.string()); });
  CHECK(contains(message, "it is a directory"));
  message = data_error_of([&] {
    export_weights(checkpoint, (fs::path{checkpoint} / "optimizer-0.safetensors").string());
  });
  CHECK(contains(message, "it lies in the checkpoint"));
  CHECK(read_safetensors((fs::path{checkpoint} / "optimizer-0.safetensors").string())
            .entries()
            .size() == 4);  // untouched

  // One flipped byte in a shard: verify_checkpoint names it, nothing is written.
  const auto shard = (fs::path{checkpoint} / "optimizer-1.safetensors").string();
  auto bytes = read_bytes(shard);
  bytes.back() ^= 0x01;
  write_bytes(shard, bytes);
  message = data_error_of([&] { export_weights(checkpoint, output); });
  CHECK(contains(message, "optimizer-1.safetensors"));
  CHECK_FALSE(fs::exists(output));
}
