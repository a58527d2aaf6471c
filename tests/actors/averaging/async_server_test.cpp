// The asynchronous parameter server (Note [asynchronous server] in actors/training/
// async_server.cpp) through whole runs: with one replica it is one device's run bit for bit;
// with a straggler (a delay layer that slows replica 1 only) every update's traced
// staleness stays within max_staleness and reaches it, and a run resumed from a checkpoint
// ends bit for bit where the straight run ends (the straggler forces the order).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/checkpoint/interchange.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::equivalence_config;

namespace {

std::string async_rule(std::int64_t max_staleness) {
  return "averaging = \"async\"\nmax_staleness = " + std::to_string(max_staleness) + "\n";
}

/// 20 steps of an MLP whose delay layer makes replica 1's forwards `slow_us` longer, over
/// two replicas of the async server with `max_staleness`.
std::string straggler_config(std::int64_t max_staleness, std::int64_t slow_us,
                             const std::string& optimizer = "sgd") {
  return R"(
[run]
steps = 20
seed = 11
evaluate = false
)" + test::data_section({24, 480, 10, 20, 5}) +
         test::linear(16) +
         test::layer("delay", "forward_us = 1\nbackward_us = 1\nslow_replica = 1\nslow_us = " +
                                  std::to_string(slow_us) + "\n") +
         test::layer("relu") + test::linear(5) + R"(
[optimizer]
type = ")" +
         optimizer +
         R"("
lr = 0.05
momentum = 0.5

[parallel]
devices = ["cpu:0", "cpu:1"]
data = 2
)" + async_rule(max_staleness);
}

std::int64_t total(const std::vector<std::int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

}  // namespace

TEST_CASE("the async server with one replica is one device's run, bit for bit") {
  // Its updates count one a step, as a step's do: Adam's bias correction and the
  // learning rate agree, and every update is 0 versions stale.
  for (const std::string optimizer : {"sgd", "adam"}) {
    INFO(optimizer);
    auto config =
        parse_config(equivalence_config("[parallel]\n" + async_rule(0), optimizer), "async.toml");
    auto options = test::quiet_options();
    options.keep_parameters = true;
    const auto served = test::run_ok(config, options);
    CHECK(served.parameters == test::train_twenty_steps(equivalence_config("", optimizer)));
    // 20 steps of 3 servers (the linear layers'), none stale.
    CHECK(served.staleness == std::vector<std::int64_t>{60});
  }
}

TEST_CASE("with a straggler every traced update is within max_staleness, which it reaches") {
  for (std::int64_t bound : {1, 2}) {
    INFO("max_staleness " << bound);
    const auto path = test::temp_file("troupe_async_trace.json");
    auto config = parse_config(straggler_config(bound, 20000), "async.toml");
    auto options = test::quiet_options();
    options.keep_parameters = true;
    options.trace_path = path;
    const auto result = test::run_ok(config, options);
    REQUIRE(result.outcome.steps == 20);
    // Every update of the 3 layers' servers (linear, delay, linear), 2 replicas a step.
    CHECK(total(result.staleness) == 3 * 2 * 20);
    CHECK(static_cast<std::int64_t>(result.staleness.size()) == bound + 1);  // the max: the bound
    // The trace has each update's staleness, on the server's track.
    std::ifstream in(path);
    const auto trace = nlohmann::json::parse(in);
    std::int64_t traced = 0, largest = -1;
    for (const auto& e : trace["traceEvents"])
      if (e["ph"] == "C" && e["name"].get<std::string>().rfind("staleness", 0) == 0) {
        ++traced;
        largest = std::max(largest, e["args"]["value"].get<std::int64_t>());
      }
    CHECK(traced == 3 * 2 * 20);
    CHECK(largest == bound);
    // troupe trace summary: a row a server.
    const auto summary = summarize_trace(load_trace(path));
    REQUIRE(summary.staleness.size() == 3);
    for (const auto& server : summary.staleness) {
      CHECK(server.updates == 2 * 20);
      CHECK(server.max <= bound);
    }
    CHECK(format_summary_text(summary).find("async server staleness") != std::string::npos);
    CHECK(std::isfinite(result.outcome.last_loss));
  }
}

TEST_CASE("an async run resumed from its checkpoint ends bit for bit where the straight run ends") {
  // Replica 1 is 30 ms slower a forward: at max_staleness = 1 each of its updates lands
  // right after replica 0's of the same step, whatever the machine's load, so the order is
  // the same in both runs. Checkpoints are barriers (both replicas continue from one
  // version), so the resumed run keeps the straight run's: every 6 steps.
  for (const std::string optimizer : {"sgd", "adam"}) {
    INFO(optimizer);
    test::temp_directory d{"troupe-async-resume"};
    auto checkpointed = [&](const std::string& directory) {
      auto config = parse_config(straggler_config(1, 30000, optimizer), "async.toml");
      config.run.checkpoint = d.file(directory);
      config.run.checkpoint_every = 6;
      config.run.checkpoint_keep = 100;
      return config;
    };
    auto options = test::quiet_options();
    options.keep_parameters = true;
    const auto straight = test::run_ok(checkpointed("straight"), options);
    REQUIRE(straight.outcome.steps == 20);
    options.resume = test::checkpoint_at(d.file("straight"), 6);
    const auto resumed = test::run_ok(checkpointed("resumed"), options);
    CHECK(resumed.outcome.steps == 20);
    CHECK(resumed.parameters == straight.parameters);
  }
}

TEST_CASE("max_staleness below replicas - 1 is refused at the key, before anything runs") {
  auto config = parse_config(straggler_config(1, 0), "async.toml");
  config.parallel.data = 3;
  config.parallel.share_devices = true;
  // At the line and column of the value in async.toml (its 38th line).
  CHECK_THROWS_WITH_AS(run_session(config, test::quiet_options()),
                       doctest::Contains("async.toml:38:17: [parallel] max_staleness = 1 is below "
                                         "data - 1 = 2"),
                       config_error);
}

TEST_CASE("an interrupted async run checkpoints the server after the last step its loader sent") {
  // The straggler is far behind when the stop comes: the server applies the updates still
  // held (the replicas at the stop bound no one), then writes the step every replica reached.
  test::temp_directory d{"troupe-async-stop"};
  auto config = parse_config(straggler_config(2, 20000), "async.toml");
  config.run.steps = 100000;
  config.run.checkpoint = d.file("checkpoints");
  auto options = test::quiet_options("");
  auto stop = std::make_shared<std::atomic<int>>(0);
  options.stop_request = stop;
  options.on_record = [&](const std::string& line) {
    if (nlohmann::json::parse(line).value("step", -1) == 3)
      stop->store(SIGINT);
  };
  const auto result = run_session(config, options);
  CHECK(result.outcome.exit_code == exit_code::interrupted);
  CHECK(result.outcome.steps >= 4);
  CHECK(result.outcome.steps < 100000);
  const auto checkpoint = read_checkpoint_parameters(d.file("checkpoints"));
  CHECK(checkpoint.step == result.outcome.steps);
}
