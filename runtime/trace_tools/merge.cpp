// merge.cpp: merge_node_traces().
#include "runtime/trace_tools/merge.hpp"

#include <nlohmann/json.hpp>

#include "runtime/base/json_input.hpp"
#include "troupe/error.hpp"

namespace troupe::trace {

namespace {

using json = nlohmann::json;

// A node's trace is a peer's text: read through the limits every trace reader uses (its
// nesting measured before nlohmann recurses, repeated keys refused).
json parse(const std::string& text, const std::string& whose) {
  return parse_untrusted_json(text.data(), text.data() + text.size(), "the trace of " + whose);
}

// Process ids of node k start here: far above any one node's device count.
constexpr int pids_per_node = 1000;

}  // namespace

std::string merge_node_traces(const std::string& coordinator_json,
                              const std::vector<node_trace>& workers) {
  auto out = parse(coordinator_json, "node0");
  auto& events = out["traceEvents"];
  auto& other = out["otherData"];
  auto& tracks = other["tracks"];
  auto nodes = json::array();
  nodes.push_back({{"node", 0}, {"offset_us", 0.0}, {"rtt_us", 0.0}, {"where", "coordinator"}});
  for (const auto& w : workers) {
    auto trace = parse(w.json, "node" + std::to_string(w.node));
    const int pid_base = pids_per_node * w.node;
    const std::string prefix = "node" + std::to_string(w.node);
    for (auto& e : trace["traceEvents"]) {
      if (e.contains("pid") && e["pid"].is_number_integer())
        e["pid"] = e["pid"].get<int>() + pid_base;
      if (e.contains("ts") && e["ts"].is_number())
        e["ts"] = e["ts"].get<double>() + w.offset_us;
      // Its devices are named "nodeK/..." already; its host process is not.
      if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
        auto name = e["args"].value("name", "");
        if (name.rfind(prefix + "/", 0) != 0)
          e["args"]["name"] = prefix + " " + name;
      }
      if (e.value("ph", "") == "M" && e.value("name", "") == "process_sort_index")
        e["args"]["sort_index"] = e["args"].value("sort_index", 0) + pid_base;
      events.push_back(std::move(e));
    }
    for (auto& t : trace["otherData"]["tracks"]) {
      auto device = t.value("device", "");
      if (device == "host")
        t["device"] = prefix + " host";
      tracks.push_back(std::move(t));
    }
    other["dropped_events"] =
        other.value("dropped_events", 0) + trace["otherData"].value("dropped_events", 0);
    nodes.push_back(
        {{"node", w.node}, {"offset_us", w.offset_us}, {"rtt_us", w.rtt_us}, {"where", w.where}});
  }
  other["nodes"] = nodes;
  other["clock"] =
      "each node's timestamps moved onto node0's clock by an offset measured when it joined "
      "(the round trip with the shortest time of 8; rtt_us bounds the error)";
  return out.dump();
}

}  // namespace troupe::trace
