// The metrics file (actors/metrics_writer.hpp): its JSON lines and keys, and that a reader
// following the file only ever sees whole lines (Note [whole lines]).
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/metrics_writer.hpp"
#include "tests/jsonl.hpp"

using namespace troupe;

namespace {

std::string unique_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("troupe_metrics_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> lines_of(const std::string& text) {
  std::istringstream in(text);
  return test::read_jsonl(in);
}

}  // namespace

TEST_CASE("metrics lines carry the step, evaluation and end keys") {
  auto path = unique_path("keys.jsonl");
  {
    metrics_writer m;
    REQUIRE(m.open(path));
    m.step(0, 0, 2.5, 0.25, 1e-3, 1000);
    m.evaluation(0, 1, 2.0, 0.5);
    m.end("done", 1, 0.5, 64, nlohmann::json{{"cpu:0", {{"busy_s", 0.25}, {"utilisation", 0.5}}}},
          0.5, "");
    CHECK_FALSE(m.is_open());
  }
  auto lines = lines_of(read_all(path));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == nlohmann::json{{"step", 0},
                                   {"epoch", 0},
                                   {"loss", 2.5},
                                   {"accuracy", 0.25},
                                   {"lr", 1e-3},
                                   {"samples_per_s", 1000}});
  CHECK(lines[1] ==
        nlohmann::json{{"epoch", 0}, {"step", 1}, {"test_loss", 2.0}, {"test_accuracy", 0.5}});
  CHECK(lines[2]["event"] == "done");
  CHECK(lines[2]["steps"] == 1);
  CHECK(lines[2]["test_accuracy"] == 0.5);
  CHECK(lines[2]["devices"]["cpu:0"]["utilisation"] == 0.5);
  CHECK_FALSE(lines[2].contains("error"));
  std::filesystem::remove(path);
}

TEST_CASE("a failed run's last metrics line says failed and why, without a test accuracy") {
  auto path = unique_path("failed.jsonl");
  {
    metrics_writer m;
    REQUIRE(m.open(path));
    m.end("failed", 0, 0, 0, nlohmann::json::object(), -1, "layer_1: boom");
  }
  auto lines = lines_of(read_all(path));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["event"] == "failed");
  CHECK(lines[0]["error"] == "layer_1: boom");
  CHECK_FALSE(lines[0].contains("test_accuracy"));
  std::filesystem::remove(path);
}

TEST_CASE("a reader of the metrics file never sees half a line") {
  // A flush threshold that falls inside lines (as std::ofstream's buffer does): whatever is
  // in the file after any call ends with a newline, and every line in it parses.
  auto path = unique_path("whole.jsonl");
  metrics_writer m{100, std::chrono::hours(1)};
  REQUIRE(m.open(path));
  std::size_t seen = 0;
  for (int step = 0; step < 200; ++step) {
    m.step(step, step / 50, 1.0 / (step + 1), 0.5, 1e-3, 12345.678);
    auto text = read_all(path);
    if (!text.empty())
      CHECK(text.back() == '\n');
    auto lines = lines_of(text);  // throws on a cut line
    CHECK(lines.size() >= seen);
    seen = lines.size();
  }
  CHECK(seen > 0);    // the threshold did write along the way...
  CHECK(seen < 200);  // ...in whole-line batches
  CHECK(m.flush());
  CHECK(lines_of(read_all(path)).size() == 200);
  m.close();
  std::filesystem::remove(path);
}

TEST_CASE("a metrics file that cannot be created is reported, not ignored") {
  metrics_writer m;
  CHECK_FALSE(m.open("/nonexistent-dir/troupe/metrics.jsonl"));
  CHECK_FALSE(m.is_open());
  m.step(0, 0, 1, 1, 1, 1);  // nothing to write to: no effect
}
