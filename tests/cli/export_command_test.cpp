// export_command_test.cpp: `troupe export` and `[model] init_from` from the command line:
// PyTorch (Debian's python3-torch, the format parsed with the standard library) loads an
// export with load_state_dict(strict=True) and finds troupe's values; a run starts from a
// file PyTorch wrote; every refusal exits 2 with a message naming what is wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/config_text.hpp"
#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::temp_directory;
using troupe::testing::run_troupe;

namespace {

namespace fs = std::filesystem;

// Sequential(Linear(5, 4), ReLU(), Linear(4, 3)): its parameters, with values that are
// exact in float32 and in Python's arithmetic: tensor t's element i is (1000 t + i) / 4.
struct parameter {
  std::string name;
  shape_t shape;
  int tensor;
};
const std::vector<parameter> small_parameters{
    {"0.weight", {4, 5}, 1}, {"0.bias", {4}, 2}, {"2.weight", {3, 4}, 3}, {"2.bias", {3}, 4}};

std::vector<float> values_of(const parameter& p) {
  std::vector<float> out(static_cast<std::size_t>(element_count(p.shape)));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(1000 * p.tensor + static_cast<int>(i)) / 4;
  return out;
}

// A complete checkpoint at step 3 as a run with Adam writes it: each parameter with its
// moments, layer 2's weight in two pieces (a sharded optimizer). Its root.
std::string write_checkpoint(const temp_directory& root) {
  const auto dir = make_checkpoint_directory(root.string(), 3);
  std::vector<std::vector<float>> keep;  // the tensors' memory, until written
  keep.reserve(4 * small_parameters.size());
  std::vector<safetensors_tensor_ref> refs;
  std::vector<std::string> names;
  for (const auto& p : small_parameters) {
    const auto values = values_of(p);
    const auto n = static_cast<std::ptrdiff_t>(values.size());
    if (p.name == "2.weight") {
      keep.emplace_back(values.begin(), values.begin() + 5);
      refs.push_back({piece_name(p.name, 0), safetensors_dtype::f32, {5}, keep.back().data()});
      keep.emplace_back(values.begin() + 5, values.end());
      refs.push_back({piece_name(p.name, 5), safetensors_dtype::f32, {n - 5}, keep.back().data()});
    } else {
      keep.push_back(values);
      refs.push_back({p.name, safetensors_dtype::f32, p.shape, keep.back().data()});
    }
    for (const char* state : {"exp_avg", "exp_avg_sq"}) {
      keep.emplace_back(values.size(), 0.5f);
      refs.push_back({p.name + "." + state, safetensors_dtype::f32, p.shape, keep.back().data()});
    }
  }
  for (const auto& r : refs)
    names.push_back(r.name);
  const auto shard = write_safetensors((fs::path{dir} / "optimizer-0.safetensors").string(), refs);
  checkpoint_manifest m;
  m.step = 3;
  m.optimizer = "adam";
  m.shards = {{"optimizer-0.safetensors", shard.bytes, shard.crc32, names}};
  m.layers = {
      {0,
       "linear",
       {{"weight", safetensors_dtype::f32, {4, 5}}, {"bias", safetensors_dtype::f32, {4}}}},
      {2,
       "linear",
       {{"weight", safetensors_dtype::f32, {3, 4}}, {"bias", safetensors_dtype::f32, {3}}}}};
  commit_checkpoint(dir, m);
  return root.string();
}

// Whether Debian's python3-torch is there; prints why not.
bool have_torch() {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0)
    return true;
  MESSAGE("skipped: /usr/bin/python3 with torch is not available (Debian's python3-torch)");
  return false;
}

// Reads a safetensors file with the standard library into a state_dict, as a PyTorch user
// without the safetensors package would, and loads it into the equivalent Sequential.
const char* load_in_torch = R"(
import json, struct, sys, torch
def load(path):
    with open(path, 'rb') as f:
        n, = struct.unpack('<Q', f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop('__metadata__', {})
    state = {}
    for name, t in header.items():
        assert t['dtype'] == 'F32', t
        begin, end = t['data_offsets']
        values = struct.unpack('<%df' % ((end - begin) // 4), data[begin:end])
        state[name] = torch.tensor(values, dtype=torch.float32).reshape(t['shape'])
    return meta, state
meta, state = load(sys.argv[1])
assert meta == {'format': 'pt'}, meta
model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
model.load_state_dict(state, strict=True)
for tensor, (name, p) in enumerate(model.state_dict().items(), start=1):
    expected = (1000 * tensor + torch.arange(p.numel(), dtype=torch.float32)) / 4
    assert torch.equal(p.flatten(), expected), (name, p, expected)
x = torch.ones(2, 5)
print('OK', list(model(x).shape))
)";

// The same for `export --dtype bf16`: each tensor must be, bit for bit, PyTorch's own rounding
// of the fp32 value (.to(torch.bfloat16)), and the file must load into a bf16 Sequential.
const char* load_bf16_in_torch = R"(
import json, struct, sys, torch
with open(sys.argv[1], 'rb') as f:
    n, = struct.unpack('<Q', f.read(8))
    header = json.loads(f.read(n))
    data = f.read()
header.pop('__metadata__', None)
state = {}
for name, t in header.items():
    assert t['dtype'] == 'BF16', t
    begin, end = t['data_offsets']
    bits = struct.unpack('<%dh' % ((end - begin) // 2), data[begin:end])
    state[name] = torch.tensor(bits, dtype=torch.int16).view(torch.bfloat16).reshape(t['shape'])
model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
model = model.to(torch.bfloat16)
model.load_state_dict(state, strict=True)
for tensor, (name, p) in enumerate(model.state_dict().items(), start=1):
    expected = ((1000 * tensor + torch.arange(p.numel(), dtype=torch.float32)) / 4).to(torch.bfloat16)
    assert torch.equal(p.flatten().view(torch.int16), expected.view(torch.int16)), (name, p, expected)
print('OK bf16')
)";

// Runs a Python script with the file's path; its output and exit code.
testing::command_result run_python(const std::string& script, const std::string& file) {
  testing::command_result python;
  FILE* pipe = popen(("/usr/bin/python3 " + script + " " + file + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0)
    python.output.append(buffer, n);
  python.exit_code = pclose(pipe);
  return python;
}

}  // namespace

TEST_CASE("PyTorch loads troupe export's file with load_state_dict(strict=True)") {
  const temp_directory root{"troupe-export"};
  const auto checkpoint = write_checkpoint(root);
  const auto output = root / "model.safetensors";
  auto r = run_troupe("export " + checkpoint + " -o " + output);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("exported 4 tensors (39 parameters)") != std::string::npos);
  CHECK(r.output.find("(step 3)") != std::string::npos);
  if (!have_torch())
    return;
  const auto python = run_python(root.write("load.py", load_in_torch), output);
  INFO(python.output);
  CHECK(python.exit_code == 0);
  CHECK(python.output.find("OK [2, 3]") != std::string::npos);
}

TEST_CASE("export --dtype bf16 rounds each parameter as PyTorch's .to(torch.bfloat16) does") {
  const temp_directory root{"troupe-export"};
  const auto checkpoint = write_checkpoint(root);
  const auto output = root / "model-bf16.safetensors";
  auto r = run_troupe("export " + checkpoint + " -o " + output + " --dtype bf16");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  r = run_troupe("export " + checkpoint + " -o " + output + " --dtype fp16");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--dtype must be fp32 or bf16, got 'fp16'") != std::string::npos);
  if (!have_torch())
    return;
  const auto python = run_python(root.write("load_bf16.py", load_bf16_in_torch), output);
  INFO(python.output);
  CHECK(python.exit_code == 0);
  CHECK(python.output.find("OK bf16") != std::string::npos);
}

TEST_CASE("troupe export refuses bad input with exit code 2 and says what is wrong") {
  const temp_directory root{"troupe-export"};
  const auto checkpoint = write_checkpoint(root);
  struct refusal {
    std::string arguments, message;
  };
  const std::vector<refusal> cases{
      {"export " + checkpoint, "missing -o FILE"},
      {"export -o " + (root / "x.safetensors"), "missing CHECKPOINT"},
      {"export " + (root / "nope") + " -o " + (root / "x.safetensors"), root / "nope"},
      {"export " + checkpoint + " -o " + (root / "no/such/dir/x.safetensors"), "does not exist"},
      {"export " + checkpoint + " -o " + root.string(), "it is a directory"},
  };
  for (const auto& c : cases) {
    auto r = run_troupe(c.arguments);
    INFO(c.arguments, "\n", r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  // A damaged shard: the checksum names it.
  const auto shard =
      (fs::path{checkpoint} / checkpoint_directory_name(3) / "optimizer-0.safetensors").string();
  auto bytes = test::read_bytes(shard);
  bytes[bytes.size() / 2] ^= 0x40;
  test::write_bytes(shard, bytes);
  auto r = run_troupe("export " + checkpoint + " -o " + (root / "x.safetensors"));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("optimizer-0.safetensors") != std::string::npos);
  CHECK_FALSE(fs::exists(root / "x.safetensors"));
}

TEST_CASE("troupe --help lists export, and export --help says what it writes") {
  auto r = run_troupe("--help");
  CHECK(r.output.find("export CHECKPOINT -o FILE") != std::string::npos);
  r = run_troupe("export --help");
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("usage: troupe export CHECKPOINT") != std::string::npos);
  CHECK(r.output.find("torch.nn.Sequential") != std::string::npos);
}

namespace {

// A config that trains Sequential(Linear(5, 4), ReLU(), Linear(4, 3)) on synthetic data,
// starting from `weights` (written relative to the config's directory when relative).
std::string init_from_config(const std::string& weights) {
  return "[run]\nsteps = 2\nevaluate = false\n" + test::data_section({8, 64, 16, 5, 3}) +
         "\n[model]\ninit_from = \"" + weights + "\"\n" + test::linear(4) + test::layer("relu") +
         test::linear(3);
}

void write_state(const std::string& path, const std::vector<parameter>& parameters,
                 safetensors_dtype type = safetensors_dtype::f32) {
  std::vector<std::vector<float>> keep;
  std::vector<std::vector<double>> keep_wide;
  std::vector<safetensors_tensor_ref> refs;
  keep.reserve(parameters.size());
  keep_wide.reserve(parameters.size());
  for (const auto& p : parameters) {
    keep.push_back(values_of(p));
    keep_wide.emplace_back(keep.back().begin(), keep.back().end());
    refs.push_back({p.name, type, p.shape,
                    type == safetensors_dtype::f64
                        ? static_cast<const void*>(keep_wide.back().data())
                        : keep.back().data()});
  }
  write_safetensors(path, refs, {{"format", "pt"}});
}

}  // namespace

TEST_CASE("troupe run starts from weights PyTorch wrote, and from an export") {
  const temp_directory dir{"troupe-init-from"};
  write_state(dir / "weights.safetensors", small_parameters);
  const auto config = dir.write("run.toml", init_from_config("weights.safetensors"));  // relative
  auto r = run_troupe("run " + config + " --quiet --metrics /dev/null");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // troupe export's output is such a file too.
  const temp_directory root{"troupe-export"};
  const auto exported = root / "model.safetensors";
  REQUIRE(run_troupe("export " + write_checkpoint(root) + " -o " + exported + " -q").exit_code ==
          0);
  r = run_troupe("run " + dir.write("export.toml", init_from_config(exported)) +
                 " --quiet --metrics /dev/null");
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("troupe run refuses each init_from that does not fit, with exit code 2") {
  const temp_directory dir{"troupe-init-from"};
  auto without = [](const std::string& name) {
    auto out = small_parameters;
    out.erase(
        std::remove_if(out.begin(), out.end(), [&](const parameter& p) { return p.name == name; }),
        out.end());
    return out;
  };
  auto reshaped = small_parameters;
  reshaped[2].shape = {4, 3};
  auto extra = small_parameters;
  extra.push_back({"4.weight", {3, 3}, 5});
  write_state(dir / "missing.safetensors", without("2.bias"));
  write_state(dir / "shape.safetensors", reshaped);
  write_state(dir / "extra.safetensors", extra);
  write_state(dir / "double.safetensors", small_parameters, safetensors_dtype::f64);
  dir.write("text.safetensors", "0.weight = [[1, 2, 3]]\n");

  struct refusal {
    std::string file, message;
  };
  const std::vector<refusal> cases{
      {"absent.safetensors",
       "run.toml:14:13: [model] init_from: '" + (dir / "absent.safetensors") + "' does not exist"},
      {"missing.safetensors", "no tensor '2.bias' (3) F32 (layer 2, linear)"},
      {"shape.safetensors", "tensor '2.weight' has shape (4, 3); layer 2 ('linear') needs (3, 4)"},
      {"extra.safetensors", "tensor(s) the model does not: '4.weight'"},
      {"double.safetensors", "tensor '0.weight' is F64; expected F32"},
      {"text.safetensors", "safetensors file '" + (dir / "text.safetensors") + "'"},
  };
  for (const auto& c : cases) {
    const auto config = dir.write("run.toml", init_from_config(c.file));
    auto r = run_troupe("run " + config + " --quiet --metrics /dev/null");
    INFO(c.file, "\n", r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
    // Each names where the config asked for the file.
    CHECK(r.output.find("run.toml:14:13: [model] init_from: ") != std::string::npos);
    CHECK(r.output.find("samples/s") == std::string::npos);  // nothing ran
  }
}
