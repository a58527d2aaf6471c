// The metrics file (actors/trainer/metrics_writer.hpp): its JSON lines and keys, that each line is
// in the file whole as soon as it is made (Note [whole lines]), and that a failed write is
// seen, named and never leaves half a line.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/trainer/metrics_writer.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/jsonl.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;

namespace {

std::string unique_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("troupe_metrics_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

using troupe::test::read_all;

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
    m.step(0, 0, 2.5, {{"accuracy", 0.25}}, 1e-3, 1000, 0.5);
    m.evaluation(0, 1, 2.0, {{"accuracy", 0.5}});
    m.end("done", 1, 0.5, 64, nlohmann::json{{"cpu:0", {{"busy_s", 0.25}, {"utilisation", 0.5}}}},
          {{"accuracy", 0.5}}, "");
    CHECK_FALSE(m.is_open());
  }
  auto lines = lines_of(read_all(path));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == nlohmann::json{{"step", 0},
                                   {"epoch", 0},
                                   {"loss", 2.5},
                                   {"accuracy", 0.25},
                                   {"lr", 1e-3},
                                   {"samples_per_s", 1000},
                                   {"train_s", 0.5}});
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
    m.end("failed", 0, 0, 0, nlohmann::json::object(), {}, "layer_1: boom");
  }
  auto lines = lines_of(read_all(path));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["event"] == "failed");
  CHECK(lines[0]["error"] == "layer_1: boom");
  CHECK_FALSE(lines[0].contains("test_accuracy"));
  std::filesystem::remove(path);
}

TEST_CASE("each metrics line is in the file, whole, as soon as it is made") {
  // No buffer between the writer and the file: a run killed after any step has every line
  // it made, and a reader following the file sees only whole lines.
  auto path = unique_path("whole.jsonl");
  metrics_writer m;
  REQUIRE(m.open(path));
  for (int step = 0; step < 200; ++step) {
    m.step(step, step / 50, 1.0 / (step + 1), {{"accuracy", 0.5}}, 1e-3, 12345.678, 0.01 * step);
    auto text = read_all(path);
    REQUIRE_FALSE(text.empty());
    CHECK(text.back() == '\n');
    auto lines = lines_of(text);  // throws on a cut line
    REQUIRE(lines.size() == static_cast<std::size_t>(step + 1));
    CHECK(lines.back()["step"] == step);
  }
  CHECK(m.good());
  m.close();
  CHECK(m.good());
  std::filesystem::remove(path);
}

TEST_CASE("a metrics file that cannot be created is reported, not ignored") {
  metrics_writer m;
  CHECK_FALSE(m.open("/nonexistent-dir/troupe/metrics.jsonl"));
  CHECK_FALSE(m.is_open());
  CHECK_FALSE(m.good());
  CHECK(m.error().find("'/nonexistent-dir/troupe/metrics.jsonl'") != std::string::npos);
  CHECK(m.error().find("No such file or directory") != std::string::npos);
  m.step(0, 0, 1, {{"accuracy", 1}}, 1, 1, 1);  // nothing to write to: no effect
}

TEST_CASE("a write to a full device fails the writer with the file and the OS error") {
  // /dev/full: every write fails with ENOSPC, as on a full disk.
  metrics_writer m;
  REQUIRE(m.open("/dev/full"));
  CHECK(m.good());
  m.step(0, 0, 1, {{"accuracy", 1}}, 1, 1, 1);
  CHECK_FALSE(m.good());
  INFO(m.error());
  CHECK(m.error().find("writing the metrics file '/dev/full' failed") != std::string::npos);
  CHECK(m.error().find("No space left on device (errno 28)") != std::string::npos);
  const auto first = m.error();
  m.step(1, 0, 1, {{"accuracy", 1}}, 1, 1, 1);  // dropped; the first failure stays the one reported
  m.end("done", 2, 1, 1, nlohmann::json::object(), {}, "");
  CHECK(m.error() == first);
  CHECK_FALSE(m.is_open());
}

namespace {

using troupe::test::file_size_limit;

}  // namespace

TEST_CASE("a disk that fills up in the middle of a line leaves only whole lines") {
  auto path = unique_path("cut.jsonl");
  std::string error;
  {
    metrics_writer m;
    REQUIRE(m.open(path));
    file_size_limit limit{1100};  // these step lines are 106 bytes: the 11th crosses 1100
    for (int step = 0; step < 50 && m.good(); ++step)
      m.step(step, 0, 0.123456789, {{"accuracy", 0.5}}, 1e-3, 12345.678, 1.5);
    error = m.error();
  }
  INFO(error);
  CHECK(error.find("writing the metrics file '" + path + "' failed: File too large") !=
        std::string::npos);
  auto text = read_all(path);
  REQUIRE_FALSE(text.empty());
  CHECK(text.size() < 1100);
  CHECK(text.back() == '\n');  // the cut line was taken back
  auto lines = lines_of(text);
  CHECK(lines.size() == 10);
  CHECK(lines.back()["step"] == 9);
  std::filesystem::remove(path);
}
