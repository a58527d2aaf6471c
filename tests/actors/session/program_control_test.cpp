// How a program (the Python module, python/) drives a session: its own stop request ends the
// run cleanly after a step, with its checkpoint; every metrics line reaches on_record as it is
// made, file or no file; data handed over in memory trains as the same .npy files do; a
// checkpoint's parameters read back named and shaped; a config set key by key writes back.
#include <doctest/doctest.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/interchange.hpp"
#include "runtime/data/given.hpp"
#include "runtime/data/npy.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

run_config mlp(std::int64_t steps) {
  auto config = load_config(std::string{TROUPE_SOURCE_DIR} + "/config/fashion_mlp.toml");
  config.run.steps = steps;
  config.run.evaluate = false;
  return config;
}

/// Arrays in memory, as the Python module hands NumPy arrays over.
class memory_arrays final : public given_source {
 public:
  npy_split_arrays train;
  dataset_split load(target_kind targets, const feature_normalisation& n) const override {
    return load_arrays(train, nullptr, n, targets);
  }
};

template <class T>
std::shared_ptr<const unsigned char> bytes_of(const std::vector<T>& values) {
  auto out = std::shared_ptr<unsigned char>(new unsigned char[values.size() * sizeof(T)],
                                            std::default_delete<unsigned char[]>());
  std::memcpy(out.get(), values.data(), values.size() * sizeof(T));
  return out;
}

}  // namespace

TEST_CASE(
    "a session's own stop request ends it after a step, checkpointed, and on_record sees "
    "every line") {
  test::temp_directory dir;
  auto config = mlp(100000);
  config.run.checkpoint = dir / "ckpt";
  auto options = test::quiet_options("");  // no metrics file: the lines go to on_record only
  auto stop = std::make_shared<std::atomic<int>>(0);
  options.stop_request = stop;
  std::mutex mutex;
  std::vector<nlohmann::json> lines;
  options.on_record = [&](const std::string& line) {
    std::lock_guard<std::mutex> guard{mutex};
    lines.push_back(nlohmann::json::parse(line));
    if (lines.back().value("step", -1) == 3)
      stop->store(SIGINT);
  };
  const auto result = run_session(config, options);
  CHECK(result.outcome.exit_code == exit_code::interrupted);
  const auto steps = result.outcome.steps;
  CHECK(steps >= 4);
  CHECK(steps < 100000);
  REQUIRE(lines.size() >= 5);
  CHECK(lines.front()["step"] == 0);
  CHECK(lines.back()["event"] == "interrupted");
  CHECK(lines.back()["steps"] == steps);
  const auto checkpoint = read_checkpoint_parameters(dir / "ckpt");
  CHECK(checkpoint.step == steps);
  REQUIRE(checkpoint.parameters.size() == 6);
  CHECK(checkpoint.parameters[0].name == "0.weight");
  CHECK(checkpoint.parameters[0].shape == std::vector<std::int64_t>{256, 784});
  CHECK(checkpoint.parameters[0].values.size() == 256u * 784u);
}

TEST_CASE("arrays handed over in memory train as the same .npy files do, bit for bit") {
  test::temp_directory dir;
  const std::int64_t count = 256, features = 12;
  std::vector<std::uint8_t> x(static_cast<std::size_t>(count * features));
  std::vector<std::int64_t> y(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<std::uint8_t>((i * 37 + i / 12) % 251);
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<std::int64_t>((x[i * 12] + x[i * 12 + 5]) % 3);
  const auto model = R"(
[run]
steps = 30
evaluate = false
[data]
batch_size = 32
scale = 0.004
validation = 0.25
[model]
[[model.layers]]
type = "linear"
out = 3
[optimizer]
type = "adam"
lr = 0.01
)";
  // The files: written as NumPy writes them.
  auto write = [&](const std::string& name, const std::string& descr, const void* data,
                   std::size_t bytes, std::vector<std::int64_t> shape) {
    auto header = npy_float_header(shape);
    header.replace(header.find("<f4"), 3, descr);
    std::string file = header + std::string(static_cast<const char*>(data), bytes);
    return dir.write(name, file);
  };
  const auto x_path = write("x.npy", "|u1", x.data(), x.size(), {count, features});
  const auto y_path = write("y.npy", "<i8", y.data(), y.size() * 8, {count});
  auto from_files = parse_config(std::string(model) + "", "files.toml", dir.string(),
                                 {"data.source=\"npy\"", "data.features=\"" + x_path + "\"",
                                  "data.targets=\"" + y_path + "\""});
  auto in_memory = parse_config(model, "memory.toml");
  auto arrays = std::make_shared<memory_arrays>();
  arrays->train = {memory_array("x", "|u1", {count, features}, bytes_of(x)),
                   memory_array("y", "<i8", {count}, bytes_of(y))};
  in_memory.data.given = arrays;
  auto options = test::quiet_options();
  options.keep_parameters = true;
  const auto a = test::run_ok(from_files, options).parameters;
  const auto b = test::run_ok(in_memory, options).parameters;
  REQUIRE(a.size() == b.size());
  CHECK(a == b);
  CHECK_THROWS_WITH_AS(memory_array("z", "<c8", {4}, bytes_of(y)),
                       doctest::Contains("is not one troupe reads"), data_error);
}

TEST_CASE("a config set key by key writes back as TOML that reads as the same config") {
  const auto text = config_text(
      "[run]\nsteps = 5 # five\n[data]\nbatch_size = 64\n[[model.layers]]\ntype = \"linear\"\n",
      "t.toml", {"parallel.data=2", "run.seed=9"});
  CHECK(text.find("seed = 9") != std::string::npos);
  CHECK(text.find("data = 2") != std::string::npos);
  const auto config = parse_config(text, "again.toml");
  CHECK(config.run.seed == 9);
  CHECK(config.run.steps == 5);
  CHECK(config.parallel.data == 2);
  CHECK(config.data.batch_size == 64);
  CHECK_THROWS_AS(config_text("[run]\nsteps = ", "t.toml", {}), config_error);
}
