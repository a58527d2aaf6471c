// Hostile inputs through the troupe binary (issue 12): each is refused with exit code 2
// and a short message naming the file, the position where known and the limit, or (when
// it is valid) handled quickly; none crashes, hangs or exhausts memory (Note [input
// limits] in runtime/base/limits.hpp). The inputs are generated into temporary files.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/cli/run_troupe.hpp"
#include "tests/config_text.hpp"
#include "tests/sanitizers.hpp"
#include "tests/temp_files.hpp"

namespace {

using troupe::testing::command_result;
using troupe::testing::write_config;

const std::string data = troupe::test::data_section({8, 64, 16, 4, 4});
const std::string model = data + "\n" + troupe::test::linear(4);

/// Runs `PREFIX troupe ARGUMENTS` through the shell, in a subshell of its own: `prefix` may
/// set limits ("ulimit -s 512; ") or wrap the binary ("exec timeout 5 ").
command_result run_troupe_in_shell(const std::string& prefix, const std::string& arguments) {
  return troupe::testing::run_shell("(" + prefix + TROUPE_BINARY + " " + arguments + ") 2>&1");
}

bool has(const command_result& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

// Runs troupe under a 4 GiB memory cap and a 30 s deadline (SIGKILL: a process stuck in a
// loop may not act on SIGTERM), so that a regression fails the test instead of the
// machine; `shell_limits` adds more ("ulimit -s 512;"). The cap is on address space, or
// under a sanitizer on each allocation (beyond it the sanitizer reports an error, exit 1).
command_result run_guarded(const std::string& arguments, const std::string& shell_limits = "") {
  const std::string memory_cap = troupe::testing::under_sanitizer
                                     ? troupe::testing::memory_cap_options
                                     : "ulimit -v 4194304; ";
  return run_troupe_in_shell(memory_cap + shell_limits + " exec timeout -s KILL 30 ", arguments);
}

}  // namespace

TEST_CASE("a chain of 9,000 layers is validated without recursion, even on a small stack") {
  std::string text = data;
  for (int i = 0; i < 9000; ++i)
    text += troupe::test::layer("relu");
  text += troupe::test::linear(4);
  const auto path = write_config("chain_9000", text);
  // 512 KiB of stack: one frame per layer (the old recursive cycle check) overflows it.
  auto r = run_guarded("plan " + path, "ulimit -s 512;");
  CHECK(r.exit_code == 0);
  CHECK(has(r, "layer_9000"));
}

TEST_CASE("more layers than the limit are refused at the first layer, with the limit") {
  std::string text = data;
  for (int i = 0; i < 10'001; ++i)
    text += troupe::test::layer("relu");
  const auto path = write_config("layers_10001", text);
  for (const char* command : {"plan ", "run "}) {
    auto r = run_guarded(command + path);
    INFO(command, r.output);
    CHECK(r.exit_code == 2);
    CHECK(has(r, path + ":9:1: [model] has 10001 [[model.layers]] tables, more than the limit of "
                        "10000 layers"));
  }
}

TEST_CASE("a TOML key of a million dotted parts is refused at its line:col, not crashed on") {
  std::string key = "a";
  for (int i = 0; i < 1'000'000; ++i)
    key += ".a";
  const auto path = write_config("dotted", model + "[run]\n" + key + " = 1\n");
  auto r = run_guarded("plan " + path);
  CHECK(r.exit_code == 2);
  CHECK(has(r, path + ":14:128: a dotted key or table header has more than 64 parts"));
  CHECK(r.output.size() < 1000);
}

TEST_CASE("/dev/zero as a config or a trace is refused just past its size limit") {
  const auto started = std::chrono::steady_clock::now();
  auto r = run_guarded("plan /dev/zero");
  CHECK(r.exit_code == 2);
  CHECK(has(r, "config file '/dev/zero' holds more than the limit of 16 MiB"));
  r = run_guarded("trace summary /dev/zero");
  CHECK(r.exit_code == 2);
  CHECK(has(r, "the trace file '/dev/zero' holds more than the limit of 256 MiB"));
  // Not a hang: 256 MiB read is 4 s here, 13 s under ThreadSanitizer.
  const auto bound = std::chrono::seconds(troupe::testing::under_sanitizer ? 60 : 10);
  CHECK(std::chrono::steady_clock::now() - started < bound);
}

TEST_CASE("epochs whose steps overflow, or pass the step limit, are refused at [run]") {
  auto path = write_config("epochs", "[run]\nepochs = 4611686018427387904\n" + model);
  auto overflowing = run_guarded("run " + path);
  CHECK(overflowing.exit_code == 2);
  CHECK(has(overflowing, path + ":2:10: [run] epochs: expected an integer in [1, 1099511627776], "
                                "found 4611686018427387904"));
  // Within the range, but 8 steps per epoch make 8 x 10^12 steps: checked in the product.
  path = write_config("epochs", "[run]\nepochs = 1000000000000\n" + model);
  auto too_long = run_guarded("run " + path);
  CHECK(too_long.exit_code == 2);
  CHECK(has(too_long, path + ":1:1: [run] epochs = 1000000000000 x 8 steps per epoch is more than "
                             "the limit of 1099511627776 steps"));
  auto r = run_guarded("run " + write_config("steps", model) + " --steps 4611686018427387904");
  CHECK(r.exit_code == 2);
  CHECK(has(r, "--steps must be in [1, 1099511627776] (the limit), got 4611686018427387904"));
}

TEST_CASE("a run of 8 x 10^11 steps starts training at once instead of counting its steps first") {
  const auto path = write_config(
      "long_run", "[run]\nepochs = 100000000000\nlog_every = 1\nevaluate = true\n" + model);
  // evaluate = true: counting the evaluations is what looped. SIGINT after 3 s: the run ends
  // after its current step, with 130, having printed steps.
  auto r = run_troupe_in_shell("exec timeout --preserve-status -s INT -k 20 3 ", "run " + path);
  INFO(r.output);
  CHECK(r.exit_code == 130);
  CHECK(has(r, "step 1/800000000000"));
}

TEST_CASE("sizes whose products overflow are bad input at their line:col, not internal errors") {
  const auto synthetic = troupe::test::data_section({8, 268435456, 16, 1048576, 4});
  auto r = run_guarded("run " + write_config("synthetic", synthetic + troupe::test::linear(4)));
  CHECK(r.exit_code == 2);
  CHECK(has(r,
            ":5:19: [data] synthetic_train x synthetic_features = 268435456 x 1048576 values, "
            "more than the limit of 1073741824 values in one tensor"));
  r = run_guarded("plan " + write_config("bucket", model + "[parallel]\nbucket_kib = "
                                                           "9223372036854775807\n"));
  CHECK(r.exit_code == 2);
  CHECK(has(r,
            ":14:14: [parallel] bucket_kib: expected an integer in [1, 1073741824], found "
            "9223372036854775807"));
}

TEST_CASE("a trace nested 100,000 deep, or holding numbers past the double range, is bad input") {
  troupe::test::temp_directory dir;
  const std::string tail = R"(}], "otherData": {"tracks": []}})";
  const auto deep =
      dir.write("deep.json", R"({"traceEvents": [{"ph": "X", "ts": 1, "args": )" +
                                 std::string(100'000, '[') + std::string(100'000, ']') + tail);
  auto r = run_guarded("trace summary " + deep);
  CHECK(r.exit_code == 2);
  CHECK(has(r, "nest more than 64 levels deep at byte 107"));  // the 65th opening
  const auto huge = dir.write("huge.json", R"({"traceEvents": [{"ph": "X", "ts": 1e400)" + tail);
  r = run_guarded("trace summary " + huge);
  CHECK(r.exit_code == 2);
  CHECK(has(r, "huge.json: not JSON"));
  const auto large = dir.write("large.json", R"({"traceEvents": [{"ph": "X", "ts": 1e300)" + tail);
  r = run_guarded("trace timeline " + large + " -o " + dir.file("x.svg"));
  CHECK(r.exit_code == 2);
  CHECK(has(r, "\"ts\" is the number 1e+300, outside the range of a trace's numbers"));
}

TEST_CASE("check-layer with a huge --input is refused at once, naming the limit") {
  const auto started = std::chrono::steady_clock::now();
  auto r = run_guarded("check-layer relu --input 100000000");
  CHECK(r.exit_code == 2);
  CHECK(has(r, "more than the limit of 2e+10"));
  r = run_guarded("check-layer linear --set out=4 --input 4611686018427387904 --batch 4");
  CHECK(r.exit_code == 2);
  CHECK(has(r, "more than the limit of 1073741824 values"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
}

TEST_CASE("verify with a negative or NaN --tolerance is bad input before anything runs") {
  const auto path = write_config("verify", model);
  for (const char* tolerance : {"-1", "nan", "inf"}) {
    auto r = run_guarded("verify " + path + " --tolerance " + tolerance);
    INFO(tolerance, r.output);
    CHECK(r.exit_code == 2);
    CHECK(has(r, "--tolerance must be a finite number >= 0"));
  }
}

TEST_CASE("a duplicate among 100,000 devices is found in n log n, not n^2") {
  std::string devices;
  for (int i = 0; i < 100'000; ++i)
    devices += "\"node" + std::to_string(i / 1024) + "/cpu:" + std::to_string(i % 1024) + "\", ";
  const auto path =
      write_config("devices", model + "[parallel]\ndevices = [" + devices + "\"node3/cpu:7\"]\n");
  const auto started = std::chrono::steady_clock::now();
  auto r = run_guarded("plan " + path);
  CHECK(r.exit_code == 2);
  CHECK(has(r, "device 'node3/cpu:7' is listed twice (first at " + path + ":14:"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE("messages quote megabytes of user text as a short prefix and its length") {
  const std::string ten_mb(10'000'000, 's');
  auto r = run_guarded("plan " +
                       write_config("value", model + "[optimizer]\ntype = \"" + ten_mb + "\"\n"));
  CHECK(r.exit_code == 2);
  CHECK(has(r, "unknown optimizer type 'sss"));
  CHECK(has(r, "'... (10000000 bytes)"));
  CHECK(r.output.size() < 1000);
  r = run_guarded("plan " + write_config("key", model + "[optimizer]\n" + ten_mb + " = 1\n"));
  CHECK(r.exit_code == 2);
  CHECK(has(r, "(10000000 bytes) is longer than 256 bytes"));
  CHECK(r.output.size() < 1000);
  r = run_guarded("plan " + std::string(100'000, 'p'));
  CHECK(r.exit_code == 2);
  CHECK(has(r, "(100000 bytes): File name too long"));
  CHECK(r.output.size() < 1000);
}

TEST_CASE("more CPU devices than cores run, with a note on stderr that they share cores") {
  const auto path = write_config(
      "many_cpus", model + "[parallel]\ndevices = [\"cpu:0\", \"cpu:1023\"]\ndata = 2\n");
  auto r = run_guarded("run " + path + " --steps 1 -q");
  CHECK(r.exit_code == 0);
  CHECK(has(r, "note: this process uses CPU devices up to cpu:1023"));
  CHECK(has(r, "so some devices share a core"));
}
