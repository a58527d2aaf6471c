// device_errors_test.cpp: a device name the parser refuses is a config error (exit 2, at
// file:line:col) through the troupe binary, in both config forms and wherever a device is
// named: [parallel] devices and an [[actor]]'s device.
//
// The regression: "cpu:1234567" used to pass the config loader of an explicit config and
// end in an internal error (exit 1) when the planner parsed it again with other rules.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/run_troupe.hpp"
#include "tests/runtime/graph/test_configs.hpp"
#include "tests/temp_files.hpp"

namespace fs = std::filesystem;
using namespace topology_test;
using troupe::test::temp_directory;
using troupe::testing::run_troupe;

namespace {

/// Runs `troupe COMMAND path` on `text` and checks exit code 2 and the error at the
/// position of `needle` (its first occurrence).
void check_config_error(const std::string& command, const std::string& text,
                        const std::string& needle, const std::string& expected) {
  temp_directory directory;
  auto path = directory.write("config.toml", text);
  auto [line, column] = position_of(text, needle);
  auto result = run_troupe(command + " " + path);
  INFO("output: " << result.output);
  CHECK(result.exit_code == 2);
  auto where = path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  CHECK(result.output.find(where) != std::string::npos);
  CHECK(result.output.find(expected) != std::string::npos);
  CHECK(result.output.find("internal error") == std::string::npos);
}

const std::string out_of_range =
    "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0' with an index in [0, 1023], found "
    "'cpu:1234567'";

const std::string shorthand = header + R"(
[parallel]
devices = ["cpu:0", "cpu:1234567"]

[[model.layers]]
type = "linear"
out = 3
)";

}  // namespace

TEST_CASE("cpu:1234567 in an explicit config's devices exits 2 naming file:line:col") {
  auto text = replaced(two_stages, "devices = [\"cpu:0\", \"cpu:1\"]",
                       "devices = [\"cpu:0\", \"cpu:1234567\"]");
  check_config_error("plan", text, "\"cpu:1234567\"", "[parallel] devices: " + out_of_range);
  check_config_error("run", text, "\"cpu:1234567\"", "[parallel] devices: " + out_of_range);
}

TEST_CASE("cpu:1234567 as an explicit actor's device exits 2 naming file:line:col") {
  auto text = replaced(two_stages, "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:1\"",
                       "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:1234567\"");
  check_config_error("plan", text, "device = \"cpu:1234567\"",
                     "[[actor]] 'loss' device: " + out_of_range);
}

TEST_CASE("cpu:1234567 in a shorthand config's devices exits 2 naming file:line:col") {
  check_config_error("plan", shorthand, "\"cpu:1234567\"", "[parallel] devices: " + out_of_range);
  check_config_error("run", shorthand, "\"cpu:1234567\"", "[parallel] devices: " + out_of_range);
}

TEST_CASE(
    "a CUDA device is planned without a GPU and refused at its place when run where it is not") {
  // Every "cpu:1" of the two-stage config (its devices and the second stage's actors).
  std::string text = two_stages;
  for (auto at = text.find("\"cpu:1\""); at != std::string::npos; at = text.find("\"cpu:1\"", at))
    text.replace(at, 7, "\"cuda:999\"");
  temp_directory directory;
  auto plan = run_troupe("plan " + directory.write("config.toml", text));
  INFO("plan: " << plan.output);
  CHECK(plan.exit_code == 0);
  CHECK(plan.output.find("cuda:999") != std::string::npos);
  // No machine has a thousand GPUs: the run is refused, naming what this one has.
  const std::string absent = "device 'cuda:999': cuda:999 is not on this machine";
  check_config_error("run", text, "\"cuda:999\"]", absent);  // the devices entry
  check_config_error("run", replaced(shorthand, "cpu:1234567", "cuda:999"), "\"cuda:999\"", absent);
}
