// merge_test.cpp: merge_node_traces(), one trace from every node's.
#include "runtime/trace_tools/merge.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "troupe/error.hpp"

using namespace troupe;
using nlohmann::json;

namespace {

// A node's trace as recorder::json() writes it: a device process, a host process, one
// span on the device and a track list.
std::string node_trace_text(const std::string& device, double ts) {
  json trace = {
      {"traceEvents",
       {{{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", device}}}},
        {{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", "host"}}}},
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", 0}, {"args", {{"sort_index", 0}}}},
        {{"ph", "X"}, {"name", "forward"}, {"pid", 0}, {"tid", 1}, {"ts", ts}, {"dur", 5.0}}}},
      {"otherData",
       {{"tracks", {{{"name", "a"}, {"device", device}}, {{"name", "t"}, {"device", "host"}}}},
        {"dropped_events", 1}}}};
  return trace.dump();
}

}  // namespace

TEST_CASE("a worker's trace joins node0's on node0's clock, its processes kept apart") {
  trace::node_trace worker{1, node_trace_text("node1/cpu:0", 100.0), 2500.0, 40.0, "h pid 7"};
  auto merged = json::parse(trace::merge_node_traces(node_trace_text("cpu:0", 100.0), {worker}));
  std::map<int, std::string> processes;
  double worker_ts = -1;
  for (const auto& e : merged["traceEvents"]) {
    if (e["name"] == "process_name")
      processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X" && e["pid"] == 1000)
      worker_ts = e["ts"];
  }
  CHECK(processes.at(0) == "cpu:0");
  CHECK(processes.at(1) == "host");
  CHECK(processes.at(1000) == "node1/cpu:0");   // named for its node already
  CHECK(processes.at(1001) == "node1 host");    // renamed, so the two hosts stay apart
  CHECK(worker_ts == doctest::Approx(2600.0));  // 100 us on its clock, 2500 us behind node0's
  const auto& other = merged["otherData"];
  CHECK(other["tracks"].size() == 4);
  CHECK(other["tracks"][3]["device"] == "node1 host");
  CHECK(other["dropped_events"] == 2);
  REQUIRE(other["nodes"].size() == 2);
  CHECK(other["nodes"][1]["offset_us"] == 2500.0);
  CHECK(other["nodes"][1]["rtt_us"] == 40.0);
  CHECK(other["nodes"][1]["where"] == "h pid 7");
  CHECK(other["clock"].get<std::string>().find("offset") != std::string::npos);
}

TEST_CASE("a worker's trace that is not JSON is a user error naming the node") {
  trace::node_trace broken{2, "{not json", 0, 0, ""};
  CHECK_THROWS_WITH_AS(trace::merge_node_traces(node_trace_text("cpu:0", 0), {broken}),
                       doctest::Contains("the trace of node2: not valid JSON"), user_error);
}

TEST_CASE("a worker's trace nested past the limit or with a repeated key is refused naming the node") {
  // A node's trace is a peer's text: the depth is measured before nlohmann recurses.
  trace::node_trace deep{3, std::string(100000, '[') + std::string(100000, ']'), 0, 0, ""};
  CHECK_THROWS_WITH_AS(trace::merge_node_traces(node_trace_text("cpu:0", 0), {deep}),
                       doctest::Contains("the trace of node3: arrays and objects nest more than"),
                       data_error);
  trace::node_trace twice{1, R"({"traceEvents": [], "traceEvents": []})", 0, 0, ""};
  CHECK_THROWS_WITH_AS(trace::merge_node_traces(node_trace_text("cpu:0", 0), {twice}),
                       doctest::Contains("the trace of node1: the key"), data_error);
}
