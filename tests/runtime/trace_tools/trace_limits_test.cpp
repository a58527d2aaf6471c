// Traces that are valid JSON but hostile (runtime/trace_tools/, Note [input limits] in
// runtime/base/limits.hpp): deep nesting, huge strings and numbers out of range are user
// errors with short messages, and large timestamps draw a timeline instead of looping.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

// A trace of one device stream with `steps` forward jobs, step k at `start + k * gap`.
std::string jobs_trace(double start, double gap, int steps) {
  using nlohmann::json;
  json events = json::array(
      {{{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", "cpu:0"}}}},
       {{"ph", "M"},
        {"name", "thread_name"},
        {"pid", 1},
        {"tid", 1},
        {"args", {{"name", "cpu:0 stream"}}}}});
  for (int k = 0; k < steps; ++k)
    events.push_back({{"ph", "X"},
                      {"cat", "job"},
                      {"name", "forward"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", start + k * gap},
                      {"dur", gap / 2},
                      {"args", {{"step", k}, {"microbatch", 0}, {"actor", "layer_0"}}}});
  json tracks = json::array({{{"name", "cpu:0 stream"}, {"kind", "stream"}, {"device", "cpu:0"}}});
  return json{{"traceEvents", events}, {"otherData", {{"tracks", tracks}}}}.dump();
}

const std::string no_tracks = R"(, "otherData": {"tracks": []}})";

}  // namespace

TEST_CASE(
    "a trace event nested 100,000 deep is refused before it is parsed, with a short message") {
  const auto text = R"({"traceEvents": [{"ph": "X", "ts": 1, "name": )" +
                    std::string(100'000, '[') + std::string(100'000, ']') + "}]" + no_tracks;
  CHECK_THROWS_WITH_AS(parse_trace(text, "deep.json"),
                       doctest::Contains("deep.json: arrays and objects nest more than 64 levels "
                                         "deep at byte"),
                       user_error);
}

TEST_CASE("a wrong value is described, not echoed: a 20 MB string, a deep array") {
  const auto big = R"({"traceEvents": [{"ph": "X", "ts": 1, "args": ")" +
                   std::string(20'000'000, 'x') + "\"}]" + no_tracks;
  try {
    parse_trace(big, "big.json");
    FAIL("expected a user_error");
  } catch (const user_error& e) {
    const std::string message = e.what();
    CHECK(message.find("\"args\" should be an object, found the string 'xxx") != std::string::npos);
    CHECK(message.find("(20000000 bytes)") != std::string::npos);
    CHECK(message.size() < 300);
  }
  const auto array = R"({"traceEvents": [{"ph": "X", "ts": 1, "args": [[[[1]]]]}])" + no_tracks;
  CHECK_THROWS_WITH_AS(
      parse_trace(array, "a.json"),
      doctest::Contains("\"args\" should be an object, found an array of 1 elements"), user_error);
}

TEST_CASE(
    "numbers past the range of a trace's numbers are user errors naming the event and field") {
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [{"ph": "X", "ts": 1e300}])" + no_tracks, "n.json"),
      doctest::Contains("n.json: traceEvents[0]: \"ts\" is the number 1e+300, outside the range"),
      user_error);
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [{"ph": "X", "ts": 1, "args": {"step": -1e19}}])" + no_tracks,
                  "n.json"),
      doctest::Contains("\"step\" is the number"), user_error);
  // Past the double range: nlohmann refuses it as JSON.
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [{"ph": "X", "ts": 1e400}])" + no_tracks, "n.json"),
      doctest::Contains("n.json: not JSON"), user_error);
  // otherData's counts bound loops of the tools.
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [], "otherData": {"stages": 1e12, "tracks": []}})", "s.json"),
      doctest::Contains(
          "s.json: otherData.stages is 1000000000000, more than the limit of 1048576"),
      user_error);
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [], "otherData": {"virtual_stages": 1e12, "tracks": []}})",
                  "v.json"),
      doctest::Contains("v.json: otherData.virtual_stages is 1000000000000, more than the limit"),
      user_error);
  // A micro-batch or replica index is an int32 troupe wrote: -1 up to 2^20.
  for (const std::string field : {"microbatch", "replica"}) {
    INFO(field);
    const auto expected = "i.json: traceEvents[0]: \"" + field + "\" is the number";
    for (const char* value : {"3e9", "-2", "1048577"})
      CHECK_THROWS_WITH_AS(parse_trace(R"({"traceEvents": [{"ph": "X", "ts": 1, "args": {")" +
                                           field + "\": " + value + "}}]" + no_tracks,
                                       "i.json"),
                           doctest::Contains(expected.c_str()), user_error);
  }
  // Stages without a layer's track get no row (the summary printed one for each of 2^20
  // claimed stages, 80 MB); one node's own trace of a pipeline has the others' stages so.
  {
    auto trace = nlohmann::json::parse(jobs_trace(0, 10, 3));
    trace["otherData"]["stages"] = 1048576;
    trace["otherData"]["tracks"].push_back(
        {{"name", "layer_0"}, {"kind", "layer"}, {"device", "cpu:0"}, {"stage", 5}});
    const auto summary = summarize_trace(parse_trace(trace.dump(), "t.json"));
    REQUIRE(summary.pipeline.size() == 1);
    CHECK(summary.pipeline[0].stage == 5);
    CHECK(format_summary_text(summary).size() < 10000);
    CHECK(format_summary_json(summary).size() < 10000);
  }
  // Interleaved: v must divide the stages (the tools group stages s, s + P, ... by device).
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [], "otherData": {"stages": 4, "virtual_stages": 3, )"
                  R"("tracks": []}})",
                  "v.json"),
      doctest::Contains("v.json: otherData.virtual_stages 3 does not divide stages 4"),
      user_error);
}

TEST_CASE("a timeline of steps at timestamps near 1e18 microseconds is drawn, not looped over") {
  // At 1e18 us doubles are 128 us apart and a tick of 0.05 ms no longer moves t: the axis
  // loop counted ticks by adding them and never ended.
  const auto trace = parse_trace(jobs_trace(9.9e17, 128, 5), "late.json");
  const auto started = std::chrono::steady_clock::now();
  const auto svg = render_timeline_svg(trace, timeline_options{});
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.size() < 100'000);
  CHECK(summarize_trace(trace).devices.size() == 1);
}

TEST_CASE("a device's node number of any length is read, or taken for node 0, never thrown on") {
  CHECK(node_of_device("node12/cpu:0") == 12);
  CHECK(node_of_device("node3 host") == 3);
  CHECK(node_of_device("cpu:0") == 0);
  CHECK(node_of_device("host") == 0);
  CHECK(node_of_device("node/cpu:0") == 0);
  CHECK(node_of_device("node7") == 0);
  CHECK(node_of_device("node999999999/cpu:0") == 999999999);
  // Past 9 digits (the summary's std::stoi threw "stoi", an internal error, exit 1).
  CHECK(node_of_device("node2147483648/cpu:0") == 0);
  CHECK(node_of_device("node" + std::string(400, '9') + "/cpu:0") == 0);
  auto trace = nlohmann::json::parse(jobs_trace(0, 10, 3));
  trace["otherData"]["tracks"][0]["device"] = "node2147483648/cpu:0";
  const auto summary = summarize_trace(parse_trace(trace.dump(), "n.json"));
  CHECK(summary.wires.empty());
}

TEST_CASE("a fused layer's part span with a wrong or huge field is a user error, not echoed") {
  const auto wrong = R"({"traceEvents": [{"ph": "X", "cat": "part", "name": "forward", "ts": 1,
                          "args": {"actor": "layer_1", "in": [[[[7]]]]}}])" + no_tracks;
  CHECK_THROWS_WITH_AS(parse_trace(wrong, "p.json"),
                       doctest::Contains("p.json: traceEvents[0]: \"in\" should be"), user_error);
  const auto huge = R"({"traceEvents": [{"ph": "X", "cat": "part", "name": "forward", "ts": 1,
                         "args": {"actor": ")" + std::string(20'000'000, 'x') +
                    R"(", "in": 3}}])" + no_tracks;
  try {
    parse_trace(huge, "p.json");
    FAIL("expected a user_error");
  } catch (const user_error& e) {
    CHECK(std::string{e.what()}.size() < 300);
  }
}
