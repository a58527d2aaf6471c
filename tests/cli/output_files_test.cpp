// The files troupe run writes besides checkpoints, from the outside (issue 12, "lost
// output"): a metrics or trace write that fails ends the run with exit 1, the file and the
// OS error (/dev/full fails every write with ENOSPC; a file size limit fills a "disk" in
// the middle of a line); a run that fails or is interrupted still writes its trace and its
// last metrics record; an output path that cannot be written is bad input (exit 2) before
// the data loads; a full standard output is reported; an export never replaces what is not
// a regular file; a checkpoint that does not fit on its disk leaves no complete-looking
// checkpoint behind.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "tests/cli/background_run.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/config_text.hpp"
#include "tests/jsonl.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;
using troupe::testing::command_result;
using troupe::testing::run_troupe;

namespace {

// A model that trains thousands of steps a second: a run lasts as long as a test needs.
const std::string tiny_model =
    "[run]\nlog_every = 1000\n" + test::data_section({32, 256, 64, 16, 3}) + "\n" + test::linear(3);

using troupe::test::contains;

using troupe::test::read_all;

using troupe::test::read_jsonl;

/// Runs `command` (a shell command line, the binary spelled TROUPE) and captures what it
/// prints to stdout and stderr.
command_result run_captured(std::string command) {
  const std::string binary{TROUPE_BINARY};
  for (auto at = command.find("TROUPE"); at != std::string::npos;
       at = command.find("TROUPE", at + binary.size()))
    command.replace(at, 6, binary);
  return troupe::testing::run_shell("{ " + command + " ; } 2>&1");
}

using troupe::testing::background_run;
using troupe::testing::wait_for_line;

/// The trace file at `path`, parsed: a Chrome trace with events.
void check_trace(const std::string& path) {
  INFO("trace " << path);
  REQUIRE(std::filesystem::exists(path));
  auto trace = nlohmann::json::parse(read_all(path));
  CHECK(trace["traceEvents"].size() > 0);
}

}  // namespace

TEST_CASE("--metrics \"\" and --trace \"\" write none of the files [run] names") {
  test::temp_directory d{"troupe-none"};
  const auto metrics = d.file("m.jsonl"), trace = d.file("t.json");
  const auto config = d.write(
      "named.toml", "[run]\nlog_every = 1000\nmetrics = \"" + metrics + "\"\ntrace = \"" + trace +
                        "\"\n" + test::data_section({32, 256, 64, 16, 3}) + "\n" + test::linear(3));
  auto r = run_troupe("run " + config + " --steps 5 -q --metrics '' --trace ''");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(metrics));
  CHECK_FALSE(std::filesystem::exists(trace));
  // Without them, the config's files are written (empty meant "the config's" until now).
  r = run_troupe("run " + config + " --steps 5 -q");
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(metrics));
  check_trace(trace);
}

TEST_CASE("a full metrics device ends the run at once: exit 1, the file and the OS error") {
  test::temp_directory d{"troupe-full"};
  const auto config = d.write("tiny.toml", tiny_model);
  const auto started = std::chrono::steady_clock::now();
  // 200000 steps would take a minute: the run must stop at the first failed write.
  auto r = run_troupe("run " + config + " --steps 200000 -q --metrics /dev/full");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "writing the metrics file '/dev/full' failed: No space left on device"));
  CHECK_FALSE(contains(r.output, "done:"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
}

TEST_CASE("a disk that fills up during a run stops it with only whole lines in the metrics file") {
  // A file size limit of 8 blocks (4 KiB) stands for the disk; SIGXFSZ ignored, a write past
  // it fails with EFBIG, and no other file of this run is limited.
  test::temp_directory d{"troupe-fill"};
  const auto config = d.write("tiny.toml", tiny_model);
  const auto metrics = d.file("m.jsonl");
  auto r = run_captured("trap '' XFSZ; ulimit -f 8 && TROUPE run " + config +
                        " --steps 200000 -q --metrics " + metrics);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "writing the metrics file '" + metrics + "' failed: File too large"));
  const auto text = read_all(metrics);
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');  // the cut line was taken back
  const auto lines = read_jsonl(metrics);
  CHECK(lines.size() < 100);  // it stopped there, not after 200000 steps
  CHECK(lines.back().contains("step"));
}

TEST_CASE("SIGINT and SIGTERM still write the last metrics record and the trace") {
  for (auto [sent, code] : {std::pair{SIGINT, 130}, std::pair{SIGTERM, 143}}) {
    const int signal = sent;  // not a binding: INFO's lambda captures it (clang 14)
    INFO("signal " << signal);
    test::temp_directory d{"troupe-interrupt"};
    const auto config = d.write("tiny.toml", tiny_model);
    const auto metrics = d.file("m.jsonl");
    const auto trace = d.file("t.json");
    const auto output = d.file("out.txt");
    background_run run{
        "run " + config + " --steps 10000000 -q --metrics " + metrics + " --trace " + trace,
        output};
    wait_for_line(metrics, "\"step\":20,\"train_s\"");
    kill(run.pid, signal);
    CHECK(run.wait() == code);
    const auto printed = read_all(output);
    INFO(printed);
    const auto lines = read_jsonl(metrics);
    REQUIRE_FALSE(lines.empty());
    CHECK(lines.back()["event"] == "interrupted");
    CHECK(lines.back()["steps"].get<std::int64_t>() >= 20);
    CHECK(contains(printed, "trace written to " + trace));
    check_trace(trace);
  }
}

TEST_CASE("a run whose actor throws still writes its trace and says so") {
  test::temp_directory d{"troupe-fail-trace"};
  const auto config =
      d.write("throwing.toml", "[run]\nsteps = 2\nevaluate = false\nplugins = [\"" +
                                   test_plugins::faulty() + "\"]\n" +
                                   test::data_section({8, 32, 8, 5, 3}) + test::linear(4) +
                                   test::layer("test_throwing_backward") + test::linear(3));
  const auto trace = d.file("t.json");
  const auto metrics = d.file("m.jsonl");
  auto r = run_troupe("run " + config + " --trace " + trace + " --metrics " + metrics);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "fails on purpose"));
  CHECK(contains(r.output, "trace written to " + trace));
  check_trace(trace);
  CHECK(read_jsonl(metrics).back()["event"] == "failed");
}

TEST_CASE("a trace that cannot be written is exit 1 with the file and the OS error") {
  test::temp_directory d{"troupe-trace-full"};
  const auto config = d.write("tiny.toml", tiny_model);
  auto r = run_troupe("run " + config + " --steps 3 -q --metrics /dev/null --trace /dev/full");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "writing the trace file '/dev/full' failed: No space left on device"));
  CHECK_FALSE(contains(r.output, "done:"));
  CHECK_FALSE(contains(r.output, "trace written"));
}

TEST_CASE("an interrupted run whose trace cannot be written keeps its exit code and says both") {
  test::temp_directory d{"troupe-trace-both"};
  const auto config = d.write("tiny.toml", tiny_model);
  const auto metrics = d.file("m.jsonl");
  const auto output = d.file("out.txt");
  background_run run{
      "run " + config + " --steps 10000000 -q --metrics " + metrics + " --trace /dev/full", output};
  wait_for_line(metrics, "\"step\":20,\"train_s\"");
  kill(run.pid, SIGINT);
  CHECK(run.wait() == 130);
  const auto printed = read_all(output);
  INFO(printed);
  CHECK(contains(printed, "interrupted by SIGINT"));
  CHECK(contains(printed, "writing the trace file '/dev/full' failed: No space left on device"));
  CHECK(read_jsonl(metrics).back()["event"] == "interrupted");
}

TEST_CASE("output paths that cannot be written are bad input, refused before the data loads") {
  test::temp_directory d{"troupe-bad-output"};
  // The model does not fit the data, which is found once the data has loaded
  // (prepare_session): that error instead would mean the output was checked too late.
  const auto config =
      d.write("misfit.toml", test::data_section({32, 256, 64, 16, 3}) + "\n" + test::linear(7));
  const auto regular = d.write("regular.txt", "a file\n");
  struct bad_case {
    std::string option;
    std::string path;
    std::string reason;
  };
  const std::vector<bad_case> cases = {
      {"--metrics", "/proc/x/y.jsonl", "cannot create the directory '/proc/x'"},
      {"--metrics", regular + "/y.jsonl", "'" + regular + "' is a file, not a directory"},
      {"--metrics", regular + "/a/b/y.jsonl", "'" + regular + "' is a file, not a directory"},
      {"--metrics", "/proc/y.jsonl", "cannot create it: "},
      {"--trace", regular + "/t.json", "'" + regular + "' is a file, not a directory"},
      {"--trace", d.string(), "it is a directory"},
  };
  for (const auto& c : cases) {
    auto r = run_troupe("run " + config + " " + c.option + " " + c.path);
    INFO(c.option, " ", c.path, ": ", r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "cannot write the " +
                                 std::string{c.option == "--trace" ? "trace" : "metrics"} +
                                 " file '" + c.path + "': " + c.reason));
    CHECK_FALSE(contains(r.output, "internal error"));
    CHECK_FALSE(contains(r.output, "output shape"));
  }
  CHECK_FALSE(std::filesystem::exists(regular + "/y.jsonl"));
}

TEST_CASE("the pictures' and the calibration's output paths are bad input, refused before work") {
  // Checked up front, as a run's are: a timeline or a plot that could not be written was
  // exit 1 after the trace had been read, and calibrate found out after all its timings.
  test::temp_directory d{"troupe-bad-picture"};
  const auto regular = d.write("regular.txt", "a file\n");
  const auto config = d.write("tiny.toml", tiny_model);
  const auto metrics = d.file("m.jsonl"), trace = d.file("t.json");
  REQUIRE(run_troupe("run " + config + " --steps 3 -q --metrics " + metrics + " --trace " + trace)
              .exit_code == 0);
  struct bad_case {
    std::string command;
    std::string what;
    std::string path;
  };
  for (const auto& c :
       {bad_case{"trace timeline " + trace + " -o ", "the timeline", regular + "/x.svg"},
        bad_case{"plot " + metrics + " -o ", "the curves", "/proc/x.svg"},
        bad_case{"calibrate " + config + " --repeats 2 -o ", "the calibration", d.string()}}) {
    auto r = run_troupe(c.command + c.path);
    INFO(c.command, c.path, ": ", r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "cannot write " + c.what + " '" + c.path + "'"));
    CHECK(contains(r.output, "nothing ran"));
  }
  // And a missing metrics file is named with its hint, spaced.
  auto missing = run_troupe("plot " + d.file("nope.jsonl") + " -o " + d.file("x.svg"));
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.output, "No such file or directory (a file troupe run --metrics wrote)"));
}

TEST_CASE("a checkpoint directory that cannot be written is refused before the run") {
  // It was found at the first checkpoint: with checkpoint_every = 0, after the whole run.
  test::temp_directory d{"troupe-bad-checkpoint"};
  const auto config = d.write("tiny.toml", tiny_model);
  const auto regular = d.write("regular.txt", "a file\n");
  auto r = run_troupe("run " + config + " --steps 3 -q --metrics /dev/null --checkpoint " +
                      regular + "/ck");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "cannot write a file in the checkpoint directory '" + regular +
                               "/ck/.troupe-write-check': '" + regular +
                               "' is a file, not a directory; nothing ran"));
  CHECK_FALSE(contains(r.output, "samples/s"));
}

TEST_CASE("a checkpoint past the file size limit is exit 1 naming the file, not SIGXFSZ") {
  test::temp_directory d{"troupe-fsize"};
  const auto config = d.write("tiny.toml", tiny_model);
  // A shard of the tiny model is a few KB: 1 KB blocks of ulimit -f stop its first write.
  auto r = run_captured("ulimit -f 1; TROUPE run " + config +
                        " --steps 3 -q --metrics /dev/null "
                        "--checkpoint " +
                        d.file("ck"));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "File too large (errno 27)"));
}

TEST_CASE("a full standard output is reported with exit 1") {
  test::temp_directory d{"troupe-stdout"};
  const auto config = d.write("tiny.toml", tiny_model);
  // stderr to the pipe, stdout to /dev/full.
  auto r = run_captured("TROUPE plan --eject " + config + " 2>&1 > /dev/full");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output,
                 "troupe plan: writing the standard output failed: No space left on device"));
  CHECK(run_captured("TROUPE plan --eject " + config + " > /dev/null").exit_code == 0);
}

TEST_CASE("troupe export refuses a target that is not a regular file") {
  // The export renames a new file over its target: a FIFO (or a device, as root) would be
  // replaced by a regular file.
  test::temp_directory d{"troupe-export-fifo"};
  const auto config = d.write("tiny.toml", tiny_model);
  auto trained = run_troupe("run " + config + " --steps 2 -q --metrics /dev/null --checkpoint " +
                            d.file("ck"));
  REQUIRE(trained.exit_code == 0);
  const auto fifo = d.file("out.safetensors");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto r = run_troupe("export " + d.file("ck") + " -o " + fifo);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "'" + fifo + "': it is not a regular file"));
  struct stat status {};
  REQUIRE(::stat(fifo.c_str(), &status) == 0);
  CHECK(S_ISFIFO(status.st_mode));
}

namespace {

// A tmpfs of `size` mounted on `path` while it lives, where this process may mount one.
class small_tmpfs {
 public:
  small_tmpfs(const std::string& path, const std::string& size) : path_(path) {
    std::filesystem::create_directories(path);
    const auto command = "mount -t tmpfs -o size=" + size + " tmpfs " + path + " > /dev/null 2>&1";
    mounted_ = std::system(command.c_str()) == 0;
  }
  ~small_tmpfs() {
    if (mounted_)
      (void)std::system(("umount " + path_ + " > /dev/null 2>&1").c_str());
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
  bool mounted() const { return mounted_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

}  // namespace

TEST_CASE("a checkpoint too big for its disk fails the run, leaving none that looks complete") {
  test::temp_directory d{"troupe-ck-full"};
  small_tmpfs disk{d.file("disk"), "64k"};
  if (!disk.mounted()) {
    MESSAGE("skipped: this process may not mount a tmpfs (mount -t tmpfs was refused)");
    return;
  }
  // 64 x 256 + 256 x 3 weights with Adam's two moments: a shard of ~200 KB.
  const auto config =
      d.write("wide.toml", "[run]\nlog_every = 1000\n[optimizer]\ntype = \"adam\"\n" +
                               test::data_section({32, 256, 64, 64, 3}) + "\n" + test::linear(256) +
                               test::layer("relu") + test::linear(3));
  const auto root = d.file("disk") + "/ck";
  auto r = run_troupe("run " + config + " --steps 5 -q --metrics /dev/null --checkpoint " + root +
                      " --checkpoint-every 1");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "No space left on device"));
  CHECK_FALSE(latest_checkpoint(root));
  // No temporary file stays behind to fill the disk further.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
    CHECK_MESSAGE(!contains(entry.path().filename().string(), ".tmp"), entry.path().string());
}
