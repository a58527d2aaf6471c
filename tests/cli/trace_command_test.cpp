// `troupe trace summary|explain|timeline FILE` end to end: the binary on a written trace file,
// its outputs, and exit code 2 with a message for bad input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_troupe.hpp"
#include "tests/runtime/trace_tools/test_trace.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"

namespace {

troupe::testing::command_result run_trace(const std::string& arguments) {
  return troupe::testing::run_troupe("trace " + arguments);
}

std::string trace_cli_temp(const std::string& name) {
  return troupe::test::temp_file("troupe_trace_cli_" + name);
}

std::string write_trace(const std::string& name, const std::string& text) {
  auto path = trace_cli_temp(name);
  std::ofstream(path) << text;
  return path;
}

using troupe::test::read_all;

}  // namespace

TEST_CASE("troupe trace summary prints the tables, and JSON with --json") {
  auto trace = write_trace("gpipe.json", troupe::test::gpipe_trace().dump());
  auto text = run_trace("summary " + trace);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("utilisation") != std::string::npos);
  CHECK(text.output.find("bubble") != std::string::npos);
  CHECK(text.output.find("slowest steps") != std::string::npos);

  auto json = run_trace("summary " + trace + " --json");
  REQUIRE(json.exit_code == 0);
  auto parsed = nlohmann::json::parse(json.output);
  CHECK(parsed["steps"].size() == 4);
  CHECK(parsed["devices"][0]["utilisation"].get<double>() == doctest::Approx(5250.0 / 8000));
}

TEST_CASE("troupe trace timeline writes SVG or HTML by the output's extension") {
  auto trace = write_trace("gpipe_timeline.json", troupe::test::gpipe_trace().dump());
  auto svg_path = trace_cli_temp("schedule.svg");
  auto html_path = trace_cli_temp("schedule.html");
  std::filesystem::remove(svg_path);
  std::filesystem::remove(html_path);
  auto svg = run_trace("timeline " + trace + " -o " + svg_path + " --steps 0:1");
  CHECK(svg.exit_code == 0);
  CHECK(svg.output.find("steps 0 to 1") != std::string::npos);
  auto picture = read_all(svg_path);
  CHECK(picture.rfind("<svg", 0) == 0);
  auto html = run_trace("timeline " + trace + " -o " + html_path);
  CHECK(html.exit_code == 0);
  CHECK(read_all(html_path).find("<svg") != std::string::npos);
}

TEST_CASE("troupe trace reports bad input with exit code 2") {
  auto help = run_trace("--help");
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("usage: troupe trace summary FILE") != std::string::npos);
  CHECK(help.output.find("  explain   why each step took its time") != std::string::npos);
  CHECK(troupe::testing::run_troupe("--help").output.find("trace summary|explain|timeline") !=
        std::string::npos);

  auto missing = run_trace("summary " + trace_cli_temp("missing.json"));
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("cannot open the trace file") != std::string::npos);

  auto not_json = run_trace("summary " + write_trace("not.json", "hello"));
  CHECK(not_json.exit_code == 2);
  CHECK(not_json.output.find("not JSON") != std::string::npos);

  auto not_trace = run_trace("summary " + write_trace("other.json", "{\"a\": 1}"));
  CHECK(not_trace.exit_code == 2);
  CHECK(not_trace.output.find("not a troupe trace") != std::string::npos);

  auto trace = write_trace("gpipe_bad.json", troupe::test::gpipe_trace().dump());
  auto no_output = run_trace("timeline " + trace);
  CHECK(no_output.exit_code == 2);
  CHECK(no_output.output.find("-o schedule.svg") != std::string::npos);
  auto png = run_trace("timeline " + trace + " -o " + trace_cli_temp("x.png"));
  CHECK(png.exit_code == 2);
  CHECK(png.output.find(".svg or .html") != std::string::npos);
  auto typo = run_trace("sumary " + trace);
  CHECK(typo.exit_code == 2);
  CHECK(typo.output.find("did you mean 'summary'") != std::string::npos);
}

TEST_CASE("the shipped interleaved trace is summarised per device with interleaved theory") {
  auto trace = std::string{TROUPE_SOURCE_DIR} + "/docs/traces/fashion_mlp_pp2_interleaved.json";
  auto summary = run_trace("summary " + trace);
  INFO(summary.output);
  CHECK(summary.exit_code == 0);
  CHECK(summary.output.find("4 stages (2 a device, interleaved) x 4 micro-batches") !=
        std::string::npos);
  CHECK(summary.output.find("(P - 1) / (v M + P - 1) with P = 2, v = 2, M = 4") !=
        std::string::npos);
  CHECK(summary.output.find("11.1%") != std::string::npos);  // 1/9
  auto svg = trace_cli_temp("interleaved.svg");
  CHECK(run_trace("timeline " + trace + " -o " + svg).exit_code == 0);
  CHECK(read_all(svg).find("P = 2, v = 2, M = 4, 1f1b") != std::string::npos);
}

TEST_CASE("troupe trace summary and timeline read the shipped traces of docs/traces") {
  for (const char* name : {"fashion_mlp_pp2_1f1b", "fashion_mlp_pp2_gpipe"}) {
    auto trace = std::string{TROUPE_SOURCE_DIR} + "/docs/traces/" + name + ".json";
    auto summary = run_trace("summary " + trace);
    INFO(name, summary.output);
    CHECK(summary.exit_code == 0);
    CHECK(summary.output.find("2 stages x 4 micro-batches") != std::string::npos);
    CHECK(summary.output.find("bubble") != std::string::npos);
    auto svg = trace_cli_temp(std::string{name} + ".svg");
    auto timeline = run_trace("timeline " + trace + " -o " + svg);
    CHECK(timeline.exit_code == 0);
    auto text = read_all(svg);
    CHECK(text.rfind("<svg", 0) != std::string::npos);
    CHECK(text.find("</svg>") != std::string::npos);
    // One box per forward and backward job of steps 1 to 3 (the default window).
    std::ifstream in(trace);
    auto json = nlohmann::json::parse(in);
    int jobs = 0;
    for (const auto& e : json["traceEvents"])
      if (e["ph"] == "X" && e["cat"] == "job" && (e["name"] == "forward" || e["name"] == "backward") &&
          e["args"].value("phase", "") == "train" && e["args"].value("step", -1) >= 1 &&
          e["args"].value("step", -1) <= 3)
        ++jobs;
    int boxes = 0;
    for (auto at = text.find("class=\"forward\""); at != std::string::npos;
         at = text.find("class=\"forward\"", at + 1))
      ++boxes;
    for (auto at = text.find("class=\"backward\""); at != std::string::npos;
         at = text.find("class=\"backward\"", at + 1))
      ++boxes;
    CHECK(jobs == 3 * 4 * 5 * 2);  // 3 steps x 4 micro-batches x 5 layers x (F + B)
    CHECK(boxes >= jobs);
  }
}

TEST_CASE("troupe trace explain: the critical paths of a shipped trace, in text and JSON") {
  auto trace = std::string{TROUPE_SOURCE_DIR} + "/docs/traces/fashion_mlp_pp2_1f1b.json";
  auto text = run_trace("explain " + trace + " --slowest 2");
  INFO(text.output);
  REQUIRE(text.exit_code == 0);
  CHECK(text.output.find("share of the steps' time on their critical paths") != std::string::npos);
  CHECK(text.output.find("critical path, latest first") != std::string::npos);
  auto json_run = run_trace("explain " + trace + " --json");
  REQUIRE(json_run.exit_code == 0);
  auto json = nlohmann::json::parse(json_run.output);
  REQUIRE(json["steps"].size() > 1);
  double total = 0;
  for (const auto& step : json["steps"]) {
    double sum = 0;
    for (const auto& piece : step["path"])
      sum += piece["duration_us"].get<double>();
    CHECK(sum == doctest::Approx(step["time_us"].get<double>()).epsilon(1e-9));
    total += step["time_us"].get<double>();
  }
  CHECK(total == doctest::Approx(json["total_us"].get<double>()));
  auto one = nlohmann::json::parse(run_trace("explain " + trace + " --json --step 2").output);
  REQUIRE(one["steps"].size() == 1);
  CHECK(one["steps"][0]["step"] == 2);

  auto svg = trace_cli_temp("critical.svg");
  CHECK(run_trace("timeline " + trace + " -o " + svg + " --critical-path").exit_code == 0);
  CHECK(read_all(svg).find(" critical\"") != std::string::npos);
}

TEST_CASE("troupe trace explain refuses what it cannot answer, with exit code 2") {
  auto trace = write_trace("gpipe_explain.json", troupe::test::gpipe_trace().dump());
  auto missing_step = run_trace("explain " + trace + " --step 9");
  CHECK(missing_step.exit_code == 2);
  CHECK(missing_step.output.find("no step 9 in the trace; it has steps 0 to 3") != std::string::npos);
  auto zero = run_trace("explain " + trace + " --slowest 0");
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("--slowest should be 1 or more") != std::string::npos);
  auto summary_step = run_trace("summary " + trace + " --step 1");
  CHECK(summary_step.exit_code == 2);
  CHECK(summary_step.output.find("--step is an explain option") != std::string::npos);
  auto explain_output = run_trace("explain " + trace + " -o " + trace_cli_temp("x.svg"));
  CHECK(explain_output.exit_code == 2);
  CHECK(explain_output.output.find("--output is a timeline option") != std::string::npos);
  auto summary_width = run_trace("summary " + trace + " --width 800");
  CHECK(summary_width.exit_code == 2);
  CHECK(summary_width.output.find("--width is a timeline option") != std::string::npos);
  auto no_steps = nlohmann::json{{"traceEvents", nlohmann::json::array()},
                                 {"otherData", {{"tracks", nlohmann::json::array()}}}};
  auto empty = run_trace("explain " + write_trace("empty.json", no_steps.dump()));
  CHECK(empty.exit_code == 2);
  CHECK(empty.output.find("no training steps in the trace") != std::string::npos);
  auto typo = run_trace("explian " + trace);
  CHECK(typo.exit_code == 2);
  CHECK(typo.output.find("did you mean 'explain'") != std::string::npos);
}
