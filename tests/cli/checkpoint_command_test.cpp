// troupe run with checkpoints from the outside, as a user's shell or a cluster scheduler
// drives it: SIGINT and SIGTERM stop a run cleanly (exit 130 / 143, a checkpoint, the
// metrics record `interrupted`), a second signal stops it at once, a process killed at any
// moment leaves a checkpoint that resumes, and --resume / --checkpoint-every refuse bad
// input with exit 2.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "tests/cli/background_run.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/jsonl.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::testing::run_troupe;

namespace {

const std::string shipped_mlp =
    "run " + std::string{TROUPE_SOURCE_DIR} + "/config/fashion_mlp.toml";

using troupe::testing::background_run;
using troupe::testing::wait_for_line;

using troupe::test::read_jsonl;

void check_stops_cleanly(int signal, int expected_code) {
  test::temp_directory d{"troupe-signal"};
  const auto metrics = d.file("metrics.jsonl");
  background_run run{shipped_mlp + " --steps 100000 -q --metrics " + metrics + " --checkpoint " +
                     d.file("ck")};
  wait_for_line(metrics, "\"step\":20");
  kill(run.pid, signal);
  CHECK(run.wait() == expected_code);
  const auto lines = read_jsonl(metrics);  // whole lines only
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back()["event"] == "interrupted");
  const auto steps = lines.back()["steps"].get<std::int64_t>();
  // The checkpoint after the last finished step, complete and verified.
  auto latest = latest_checkpoint(d.file("ck"));
  REQUIRE(latest);
  CHECK(latest->step == steps);
  CHECK_NOTHROW(verify_checkpoint(latest->path));
  // ... and the run goes on from it.
  auto resumed = run_troupe(shipped_mlp + " --steps " + std::to_string(steps + 3) +
                            " -q --metrics /dev/null --resume " + d.file("ck"));
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
}

}  // namespace

TEST_CASE("SIGINT finishes the step, writes a checkpoint and the record `interrupted`, exit 130") {
  check_stops_cleanly(SIGINT, 130);
}

TEST_CASE("SIGTERM does the same with exit 143") { check_stops_cleanly(SIGTERM, 143); }

TEST_CASE("a second signal ends the run at once") {
  test::temp_directory d{"troupe-signal2"};
  const auto metrics = d.file("metrics.jsonl");
  const auto output = d.file("output.txt");
  background_run run{shipped_mlp + " --steps 100000 -q --metrics " + metrics, output};
  wait_for_line(metrics, "\"step\":20");
  kill(run.pid, SIGINT);
  kill(run.pid, SIGINT);
  const auto start = std::chrono::steady_clock::now();
  CHECK(run.wait() == 130);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK_NOTHROW(read_jsonl(metrics));  // never half a line
}

TEST_CASE("a second signal while the first finishes its step says that it exits at once") {
  // It ended mute. Steps of 0.3 s (a delay layer): the second comes while the first waits.
  test::temp_directory d{"troupe-signal2"};
  const auto config = d.write("slow.toml", R"([run]
log_every = 1
[data]
source = "synthetic"
batch_size = 8
synthetic_train = 64
synthetic_test = 8
synthetic_features = 4
synthetic_classes = 2
[[model.layers]]
type = "delay"
forward_us = 300000
[[model.layers]]
type = "linear"
out = 2
)");
  const auto metrics = d.file("metrics.jsonl"), output = d.file("output.txt");
  background_run run{"run " + config + " --steps 1000 -q --metrics " + metrics, output};
  wait_for_line(metrics, "\"step\":1");
  kill(run.pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(run.pid, SIGINT);
  CHECK(run.wait() == 130);  // the second's code
  std::ifstream in(output);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(said);
  CHECK(said.find("troupe: a second signal: exiting at once, without finishing the step or a "
                  "checkpoint") != std::string::npos);
}

TEST_CASE("a run killed at any moment leaves a checkpoint that resumes") {
  // SIGKILL at a few points of a run that checkpoints every step: whatever was being
  // written, the newest complete checkpoint verifies and the run resumes from it.
  for (int milliseconds : {150, 400, 900}) {
    INFO("killed after " << milliseconds << " ms of training");
    test::temp_directory d{"troupe-kill"};
    const auto metrics = d.file("metrics.jsonl");
    background_run run{shipped_mlp + " --steps 100000 -q --metrics " + metrics + " --checkpoint " +
                       d.file("ck") + " --checkpoint-every 1"};
    wait_for_line(metrics, "\"step\":3");
    std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
    kill(run.pid, SIGKILL);
    CHECK(run.wait() == 128 + SIGKILL);
    auto latest = latest_checkpoint(d.file("ck"));
    REQUIRE(latest);
    CHECK_NOTHROW(verify_checkpoint(latest->path));
    auto resumed = run_troupe(shipped_mlp + " --steps " + std::to_string(latest->step + 2) +
                              " -q --metrics /dev/null --resume " + d.file("ck"));
    INFO(resumed.output);
    CHECK(resumed.exit_code == 0);
  }
}

TEST_CASE("bad checkpoint options and resume paths exit 2 with a message") {
  test::temp_directory d{"troupe-badck"};
  auto missing = run_troupe(shipped_mlp + " --steps 2 -q --resume " + d.file("nothing-here"));
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("nothing-here") != std::string::npos);
  std::filesystem::create_directories(d.file("empty"));
  auto empty = run_troupe(shipped_mlp + " --steps 2 -q --resume " + d.file("empty"));
  CHECK(empty.exit_code == 2);
  auto every = run_troupe(shipped_mlp + " --steps 2 -q --checkpoint-every 5");
  CHECK(every.exit_code == 2);
  CHECK(every.output.find("--checkpoint-every needs a directory") != std::string::npos);
  auto negative = run_troupe(shipped_mlp + " --steps 2 -q --checkpoint " + d.file("ck") +
                             " --checkpoint-every -1");
  CHECK(negative.exit_code == 2);
}

TEST_CASE("a run resumed from an older checkpoint sets the newer ones aside and keeps its own") {
  // An outside review: resumed from step 4 into a root holding 4 and 8 with keep = 1, the
  // run pruned 4 and then each checkpoint it wrote (8 was newer), and a kill while it
  // rewrote step 8 left no complete checkpoint; a restart after a kill took the older
  // run's step 8 (another learning rate) as this run's, without a word.
  test::temp_directory d{"troupe-rollback"};
  const auto root = d.file("ck");
  auto first = run_troupe(shipped_mlp + " --steps 8 -q --metrics /dev/null --checkpoint " + root +
                          " --checkpoint-every 4");
  REQUIRE(first.exit_code == 0);
  // The same model at a lower learning rate: resumed, with a note that the settings differ.
  const auto lower = d.write("lower.toml", [] {
    std::ifstream in(std::string{TROUPE_SOURCE_DIR} + "/config/fashion_mlp.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("lr = 1e-3");
    REQUIRE(at != std::string::npos);
    return text.replace(at, 9, "lr = 2e-4");
  }());
  auto resumed = run_troupe("run " + lower + " --steps 10 -q --metrics /dev/null --checkpoint " +
                            root + " --checkpoint-every 2 --resume " + root + "/step-000000004");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.output.find("note: set aside " + root +
                            "/step-000000008.superseded: it is newer "
                            "than step 4") != std::string::npos);
  CHECK(std::filesystem::exists(root + "/step-000000008.superseded/manifest.json"));
  CHECK(resumed.output.find("note: resuming from '" + root +
                            "/step-000000004' (step 4), written "
                            "with other settings than '" +
                            lower + "'") != std::string::npos);
  // Its own checkpoints (6, 8, 10) are kept as checkpoint_keep says, the newest its own.
  CHECK(latest_checkpoint(root)->step == 10);
  // A fresh run into the same root sets all of them aside: a restart after it must resume
  // this run's checkpoints, not the older run's step 10.
  auto fresh = run_troupe(shipped_mlp + " --steps 2 -q --metrics /dev/null --checkpoint " + root);
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  CHECK(fresh.output.find("/step-000000010.superseded: it is newer than step 0, where this run "
                          "starts") != std::string::npos);
  CHECK(latest_checkpoint(root)->step == 2);
}

TEST_CASE("a restart loop's --resume DIR --checkpoint DIR starts at step 0 until DIR has one") {
  // It was exit 2 ("does not exist", then "holds no complete checkpoint") until the first
  // checkpoint was in, so a restart loop could not start, or recover from an early kill.
  test::temp_directory d{"troupe-restart"};
  const auto root = d.file("ck");
  const auto same = " -q --metrics /dev/null --checkpoint " + root + " --resume " + root;
  auto first = run_troupe(shipped_mlp + " --steps 3" + same);
  INFO(first.output);
  CHECK(first.exit_code == 0);
  CHECK(first.output.find("holds no complete checkpoint yet: starting at step 0") !=
        std::string::npos);
  std::filesystem::create_directories(root + "/step-000000009");  // a crash's leftover
  auto second = run_troupe(shipped_mlp + " --steps 5" + same);
  INFO(second.output);
  CHECK(second.exit_code == 0);
  CHECK(second.output.find("starting at step 0") == std::string::npos);  // resumed at 3
  CHECK(latest_checkpoint(root)->step == 5);
  // A manifest that cannot be read (damaged, or a newer format) is refused, not restarted
  // over (and later pruned).
  const auto damaged = d.file("damaged");
  std::filesystem::create_directories(damaged + "/step-000000007");
  std::ofstream(damaged + "/step-000000007/manifest.json") << "{";
  auto refused = run_troupe(shipped_mlp + " --steps 5 -q --metrics /dev/null --checkpoint " +
                            damaged + " --resume " + damaged);
  CHECK(refused.exit_code == 2);
  CHECK(refused.output.find("starting at step 0") == std::string::npos);
  // Another resume path than the checkpoint directory is still refused when empty.
  auto other = run_troupe(shipped_mlp + " --steps 5 -q --checkpoint " + root + " --resume " +
                          d.file("elsewhere"));
  CHECK(other.exit_code == 2);
}
