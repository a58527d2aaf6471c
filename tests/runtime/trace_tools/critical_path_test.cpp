// The critical path walk (runtime/trace_tools/critical_path.hpp) on a hand-made trace
// whose every piece is known, and the timeline's outline of it.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/trace_tools/critical_path.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

// Two steps on cpu:0 (pid 0) and cpu:1 (pid 1). Tracks: tid 1 cpu:0 stream, 2 cpu:1
// stream, 3 layer_0 (cpu:0), 4 layer_1 (cpu:1), 5 opt_1 (cpu:1), 6 loader (cpu:0).
//
// Step 0, from 10 to 1550 us:
//   layer_0 forward job 10..110 (submitted at 10 in its handler 0..10); its output goes to
//   layer_1 on cpu:1, sent at 10, handled at 130..135 once written (at 110); layer_1's copy
//   job 135..140, its forward job 140..440 (submitted at 135: queued behind the copy);
//   layer_1 sends grads at 445 (after its job, outside a handler) over a slow wire to
//   opt_1, which handles them at 1495..1500 and runs its update 1500..1550.
// Step 1, from 2000 to 2140 us:
//   a loader load job 2000..2001; layer_0 handles a backward from layer_1 at 2000..2010
//   and, the credit back, sends a waiting forward at 2005 (and submits its backward job
//   2010..2060); layer_1 handles it at 2030..2040 and runs its forward 2040..2140.
nlohmann::json hand_trace() {
  using nlohmann::json;
  json events = json::array();
  const char* devices[] = {"cpu:0", "cpu:1"};
  for (int pid = 0; pid < 2; ++pid)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid},
                      {"args", {{"name", devices[pid]}}}});
  struct track {
    const char* name;
    const char* kind;
    int pid;
  };
  const track tracks[] = {{"cpu:0 stream", "stream", 0}, {"cpu:1 stream", "stream", 1},
                          {"layer_0", "layer", 0},       {"layer_1", "layer", 1},
                          {"opt_1", "optimizer", 1},     {"loader", "data_loader", 0}};
  json track_list = json::array();
  for (int i = 0; i < 6; ++i) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", tracks[i].pid}, {"tid", i + 1},
                      {"args", {{"name", tracks[i].name}}}});
    track_list.push_back({{"name", tracks[i].name}, {"kind", tracks[i].kind},
                          {"device", devices[tracks[i].pid]}});
  }
  auto job = [&](int pid, const char* name, const char* actor, double ts, double dur, int step,
                 int microbatch, double queued) {
    events.push_back({{"ph", "X"}, {"cat", "job"}, {"name", name}, {"pid", pid}, {"tid", pid + 1},
                      {"ts", ts}, {"dur", dur},
                      {"args", {{"actor", actor}, {"step", step}, {"microbatch", microbatch},
                                {"phase", "train"}, {"queued_us", queued}}}});
  };
  auto handler = [&](int pid, int tid, const char* name, const char* from, const char* to,
                     double ts, double dur, int step, int microbatch, int flow) {
    events.push_back({{"ph", "X"}, {"cat", "handler"}, {"name", name}, {"pid", pid}, {"tid", tid},
                      {"ts", ts}, {"dur", dur},
                      {"args", {{"from", from}, {"to", to}, {"step", step},
                                {"microbatch", microbatch}, {"phase", "train"}, {"flow", flow}}}});
  };
  auto send = [&](int pid, int tid, const char* name, double ts, int flow) {
    events.push_back({{"ph", "s"}, {"cat", "message"}, {"name", name}, {"pid", pid},
                      {"tid", tid}, {"ts", ts}, {"id", flow}});
  };
  // Step 0.
  handler(0, 3, "forward", "loader", "layer_0", 0, 10, 0, 0, 1);
  job(0, "forward", "layer_0", 10, 100, 0, 0, 0);
  send(0, 3, "forward", 10, 2);
  handler(1, 4, "forward", "layer_0", "layer_1", 130, 5, 0, 0, 2);
  job(1, "copy", "layer_1", 135, 5, 0, 0, 0);
  job(1, "forward", "layer_1", 140, 300, 0, 0, 5);
  send(1, 4, "grads", 445, 3);
  handler(1, 5, "grads", "layer_1", "opt_1", 1495, 5, 0, -1, 3);
  job(1, "update", "opt_1", 1500, 50, 0, -1, 0);
  // Step 1.
  job(0, "load", "loader", 2000, 1, 1, 0, 0);
  send(1, 4, "backward", 1995, 10);
  handler(0, 3, "backward", "layer_1", "layer_0", 2000, 10, 1, 3, 10);
  send(0, 3, "forward", 2005, 11);
  job(0, "backward", "layer_0", 2010, 50, 1, 3, 2);
  handler(1, 4, "forward", "layer_0", "layer_1", 2030, 10, 1, 0, 11);
  job(1, "forward", "layer_1", 2040, 100, 1, 0, 0);
  json other = {{"troupe_version", "0.1.0"}, {"replicas", 1}, {"stages", 2},
                {"microbatches", 4}, {"schedule", "1f1b"}, {"tracks", track_list},
                {"wires", json::array()}};
  return {{"traceEvents", events}, {"otherData", other}};
}

trace_file hand() {
  return parse_trace(hand_trace().dump(), "hand.json");
}

double sum_of(const step_explanation& step) {
  double total = 0;
  for (const auto& p : step.path)
    total += p.duration_us;
  return total;
}

// "kind name actor start..end" for each piece longer than nothing, in time order.
std::string pieces(const step_explanation& step) {
  std::string s;
  for (const auto& p : step.path) {
    if (p.duration_us <= 0 && p.kind != path_kind::job)
      continue;
    char times[64];
    std::snprintf(times, sizeof times, "%g..%g", p.start_us, p.start_us + p.duration_us);
    s += std::string{path_kind_name(p.kind)} + " " + p.name + " " + p.actor + " " + times + "\n";
  }
  return s;
}

double share_of(const std::vector<blame>& rows, const std::string& name) {
  for (const auto& b : rows)
    if (b.name == name)
      return b.share;
  return 0;
}

}  // namespace

TEST_CASE("the critical path of a step: a tensor waited for, a device queue, a slow wire") {
  auto e = explain_trace(hand());
  REQUIRE(e.steps.size() == 2);
  const auto& step = e.steps[0];
  CHECK(step.step == 0);
  CHECK(step.start_us == 10);
  CHECK(step.time_us == 1540);
  CHECK(sum_of(step) == doctest::Approx(step.time_us));
  CHECK(pieces(step) ==
        "job forward layer_0 10..110\n"
        "written forward layer_1 110..130\n"   // layer_1 waited for layer_0's job on cpu:0
        "handler forward layer_1 130..135\n"
        "job copy layer_1 135..140\n"
        "job forward layer_1 140..440\n"       // queued behind the copy: no gap
        "handover forward layer_1 440..445\n"  // sent after its job, by no handler
        "transit grads opt_1 445..1495\n"      // the slow wire
        "handler grads opt_1 1495..1500\n"
        "job update opt_1 1500..1550\n");
  // Blame: the slow wire first; layer_1 the actor with most time; cpu:1 the device.
  REQUIRE_FALSE(step.wires.empty());
  CHECK(step.wires[0].name == "layer_1 -> opt_1");
  CHECK(step.wires[0].us == doctest::Approx(1050));
  CHECK(share_of(step.wires, "layer_0 -> layer_1") == doctest::Approx(20.0 / 1540));
  REQUIRE_FALSE(step.actors.empty());
  CHECK(step.actors[0].name == "layer_1");
  CHECK(step.actors[0].us == doctest::Approx(5 + 5 + 300 + 5));
  CHECK(share_of(step.actors, "layer_0") == doctest::Approx(100.0 / 1540));
  CHECK(step.devices[0].name == "cpu:1");
  CHECK(step.devices[0].us == doctest::Approx(5 + 5 + 300 + 5 + 5 + 50));
  // The queued piece names what held the device.
  bool queued = false;
  for (const auto& p : step.path)
    if (p.kind == path_kind::queued) {
      queued = true;
      CHECK(p.peer == "layer_1 copy");
      CHECK(p.duration_us == 0);
    }
  CHECK(queued);
}

TEST_CASE("the critical path of a step: an activation sent when its credit came back") {
  auto e = explain_trace(hand(), 1);
  REQUIRE(e.steps.size() == 1);
  const auto& step = e.steps[0];
  // Step 1 starts where step 0 ended (Note [step time]); nothing in the trace says what
  // happened before its first job, so that part of its path is untraced.
  CHECK(step.start_us == 1550);
  CHECK(step.time_us == 590);
  CHECK(sum_of(step) == doctest::Approx(590));
  CHECK(pieces(step) ==
        "untraced   1550..2000\n"
        "job load loader 2000..2000\n"
        "handler backward layer_0 2000..2005\n"
        "transit forward layer_1 2005..2030\n"
        "handler forward layer_1 2030..2040\n"
        "job forward layer_1 2040..2140\n");
  const path_segment* transit = nullptr;
  for (const auto& p : step.path)
    if (p.kind == path_kind::transit)
      transit = &p;
  REQUIRE(transit != nullptr);
  CHECK(transit->credit);
  CHECK(transit->peer == "layer_1");  // whose gradient returned the credit
  CHECK(transit->wire == "layer_0 -> layer_1");
  auto text = format_explanation_text(e);
  INFO(text);
  CHECK(text.find("forward layer_0 -> layer_1 in flight, sent when layer_1 returned the "
                  "wire's credit") != std::string::npos);
}

TEST_CASE("explain: the steps' blame adds up, the slowest step comes first, JSON has it all") {
  auto e = explain_trace(hand());
  CHECK(e.total_us == doctest::Approx(1540 + 590));
  double actors = 0;
  for (const auto& b : e.actors)
    actors += b.us;
  double wires = 0;
  for (const auto& b : e.wires)
    wires += b.us;
  // Every piece is an actor's or a wire's but step 1's 450 us before its first job.
  CHECK(actors + wires == doctest::Approx(e.total_us - 450));
  auto text = format_explanation_text(e, 1);
  INFO(text);
  CHECK(text.find("step 0: 1.540 ms") != std::string::npos);
  CHECK(text.find("step 1:") == std::string::npos);  // only the slowest one
  CHECK(text.find("grads layer_1 -> opt_1 in flight") != std::string::npos);
  CHECK(text.find("forward layer_0 -> layer_1 waited for layer_0's job to write its tensor") !=
        std::string::npos);
  auto json = nlohmann::json::parse(format_explanation_json(e));
  REQUIRE(json["steps"].size() == 2);
  CHECK(json["steps"][0]["time_us"] == 1540.0);
  CHECK(json["steps"][0]["path"].size() == e.steps[0].path.size());
  CHECK(json["wires"][0]["name"] == "layer_1 -> opt_1");
  CHECK_THROWS_WITH_AS(explain_trace(hand(), 7),
                       doctest::Contains("no step 7 in the trace; it has steps 0 to 1"), user_error);
}

TEST_CASE("the timeline outlines the critical path and joins its hops across devices") {
  timeline_options options;
  options.first_step = 0;
  options.last_step = 1;
  options.critical_path = true;
  auto svg = render_timeline_svg(hand(), options);
  std::size_t outlined = 0;
  for (auto at = svg.find(" critical\""); at != std::string::npos; at = svg.find(" critical\"", at + 1))
    ++outlined;
  // Step 0: layer_0 forward, layer_1 copy and forward, update; step 1: the loader's load
  // and layer_1's forward.
  CHECK(outlined == 6);
  // A hop across devices in each step (layer_0's forward to layer_1's copy; the loader's
  // load to layer_1's forward).
  std::size_t hops = 0;
  for (auto at = svg.find("class=\"critical-hop\""); at != std::string::npos;
       at = svg.find("class=\"critical-hop\"", at + 1))
    ++hops;
  CHECK(hops == 2);
  CHECK(svg.find("on the critical path of step 0") != std::string::npos);
  options.critical_path = false;
  CHECK(render_timeline_svg(hand(), options).find(" critical\"") == std::string::npos);
}

TEST_CASE("the critical path tiles a step even when merged clocks put a send after its handling") {
  // node1's layer_1 handles at 100 a forward that node0's clock says was sent at 105
  // (inside layer_0's handler 90..106): the pieces may not overlap.
  using nlohmann::json;
  json events = json::array();
  const char* devices[] = {"cpu:0", "node1/cpu:0"};
  for (int pid = 0; pid < 2; ++pid)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid},
                      {"args", {{"name", devices[pid]}}}});
  const char* names[] = {"cpu:0 stream", "node1/cpu:0 stream", "layer_0", "layer_1"};
  const int pids[] = {0, 1, 0, 1};
  for (int i = 0; i < 4; ++i)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pids[i]}, {"tid", i + 1},
                      {"args", {{"name", names[i]}}}});
  auto args = [](const char* actor, double queued) {
    return json{{"actor", actor}, {"step", 0}, {"microbatch", 0}, {"phase", "train"},
                {"queued_us", queued}};
  };
  events.push_back({{"ph", "X"}, {"cat", "job"}, {"name", "forward"}, {"pid", 0}, {"tid", 1},
                    {"ts", 80}, {"dur", 5}, {"args", args("layer_0", 0)}});
  events.push_back({{"ph", "X"}, {"cat", "handler"}, {"name", "backward"}, {"pid", 0}, {"tid", 3},
                    {"ts", 90}, {"dur", 16},
                    {"args", {{"from", "layer_1"}, {"to", "layer_0"}, {"step", 0},
                              {"microbatch", 0}, {"phase", "train"}, {"flow", 7}}}});
  events.push_back({{"ph", "s"}, {"cat", "message"}, {"name", "forward"}, {"pid", 0}, {"tid", 3},
                    {"ts", 105}, {"id", 8}});
  events.push_back({{"ph", "X"}, {"cat", "handler"}, {"name", "forward"}, {"pid", 1}, {"tid", 4},
                    {"ts", 100}, {"dur", 10},
                    {"args", {{"from", "layer_0"}, {"to", "layer_1"}, {"step", 0},
                              {"microbatch", 0}, {"phase", "train"}, {"flow", 8}}}});
  events.push_back({{"ph", "X"}, {"cat", "job"}, {"name", "forward"}, {"pid", 1}, {"tid", 2},
                    {"ts", 110}, {"dur", 90}, {"args", args("layer_1", 0)}});
  json trace = {{"traceEvents", events}, {"otherData", {{"tracks", json::array()}}}};
  auto e = explain_trace(parse_trace(trace.dump(), "skewed.json"));
  REQUIRE(e.steps.size() == 1);
  const auto& step = e.steps[0];
  CHECK(step.time_us == 120);
  CHECK(sum_of(step) == doctest::Approx(120));
  for (std::size_t i = 1; i < step.path.size(); ++i) {
    CAPTURE(i);
    CHECK(step.path[i].start_us ==
          doctest::Approx(step.path[i - 1].start_us + step.path[i - 1].duration_us));
  }
}

TEST_CASE("explain walks a trace of odd causes without a crash: each step still tiles") {
  // Handlers whose sends come after them and point at each other, a handler of no named
  // actor, flows with no send, jobs with no actor, a negative and a huge queued_us, a gap
  // of steps (tests/fuzz/corpus/trace/odd_causes.json, which the trace fuzzer replays).
  auto trace = load_trace(std::string{TROUPE_SOURCE_DIR} +
                          "/tests/fuzz/corpus/trace/odd_causes.json");
  auto e = explain_trace(trace);
  REQUIRE(e.steps.size() == 2);
  for (const auto& step : e.steps) {
    CAPTURE(step.step);
    CHECK(sum_of(step) == doctest::Approx(step.time_us));
  }
  CHECK_FALSE(format_explanation_text(e).empty());
  CHECK(nlohmann::json::parse(format_explanation_json(e))["steps"].size() == 2);
}
