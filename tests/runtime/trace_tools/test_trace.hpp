// trace_test_trace.hpp: a small hand-made trace in the format of
// docs/reference/trace-format.md, for the trace tools' tests
// (tests/runtime/trace_tools/trace_tools_test.cpp, tests/cli/trace_command_test.cpp).
//
// A GPipe run with P = 2 stages on cpu:0 / cpu:1, M = 4 micro-batches, 4 training steps,
// fixed-length jobs, so every number the summary prints can be worked out by hand. Step n
// starts at S = 2000 n us:
//
//   cpu:0  F0 F1 F2 F3 (100 each from S)        B3 B2 B1 B0 (200 each from S+700)  update
//   cpu:1  copy (S, 50)  F0..F3 (100 each from S+100)  B3..B0 (200 each from S+500)  update
//
// cpu:0's update (opt_0) runs at S+1500 for 100, except in step 3 where it starts at S+1800
// (a slow step); cpu:1's (opt_1) at S+1300 for 100. One eval-phase forward (50) runs on
// cpu:0 at 3700. Every backward on cpu:0 waited 5 for the device (queued_us). layer_1
// handles one `forward` (1024 bytes, 10 us) per micro-batch, layer_0 one `backward` (1024
// bytes, 10 us). The activations wire layer_0 -> layer_1 has capacity 2; its credits
// counter reads 1 at S+100, 2 at S+200 (full), 1 at S+700, 0 at S+1500. Step markers at
// S+1950, the last one at 8000, so the run is 0 .. 8000 us.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::test {

struct trace_builder {
  nlohmann::json events = nlohmann::json::array();

  // tids: 1 cpu:0 stream, 2 cpu:1 stream, 3 loader, 4 layer_0, 5 layer_1, 6 loss, 7 opt_0,
  // 8 opt_1, 9 trainer (host).
  void job(int pid, const char* name, const char* actor, double ts, double dur, std::int64_t step,
           int microbatch, double queued = 0, const char* phase = "train", std::int64_t bytes = 0) {
    nlohmann::json args = {{"actor", actor}, {"step", step}, {"phase", phase}, {"queued_us", queued}};
    if (microbatch >= 0)
      args["microbatch"] = microbatch;
    if (bytes > 0)
      args["bytes"] = bytes;
    events.push_back({{"ph", "X"}, {"cat", "job"}, {"name", name}, {"pid", pid}, {"tid", pid + 1},
                      {"ts", ts}, {"dur", dur}, {"args", args}});
  }
  void handler(int pid, int tid, const char* name, const char* from, const char* to, double ts,
               double dur, std::int64_t step, int microbatch, std::int64_t bytes) {
    events.push_back({{"ph", "X"}, {"cat", "handler"}, {"name", name}, {"pid", pid}, {"tid", tid},
                      {"ts", ts}, {"dur", dur},
                      {"args", {{"from", from}, {"to", to}, {"step", step}, {"microbatch", microbatch},
                                {"phase", "train"}, {"bytes", bytes}, {"flow", events.size()}}}});
  }
  void counter(const char* name, double ts, double value) {
    events.push_back({{"ph", "C"}, {"name", name}, {"pid", 0}, {"ts", ts}, {"args", {{"value", value}}}});
  }
};

inline nlohmann::json gpipe_trace(std::int64_t dropped_events = 0) {
  using nlohmann::json;
  trace_builder b;
  const char* devices[] = {"cpu:0", "cpu:1", "host"};
  for (int pid = 0; pid < 3; ++pid)
    b.events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", devices[pid]}}}});
  json tracks = json::array();
  struct track { const char* name; const char* kind; int pid; int stage; int layer; };
  const track all[] = {{"cpu:0 stream", "stream", 0, -1, -1}, {"cpu:1 stream", "stream", 1, -1, -1},
                       {"loader", "data_loader", 0, -1, -1},  {"layer_0", "layer", 0, 0, 0},
                       {"layer_1", "layer", 1, 1, 1},         {"loss", "loss", 1, 1, -1},
                       {"opt_0", "optimizer", 0, -1, 0},      {"opt_1", "optimizer", 1, -1, 1},
                       {"trainer", "trainer", 2, -1, -1}};
  for (int i = 0; i < 9; ++i) {
    b.events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", all[i].pid}, {"tid", i + 1},
                        {"args", {{"name", all[i].name}}}});
    tracks.push_back({{"name", all[i].name}, {"kind", all[i].kind}, {"device", devices[all[i].pid]},
                      {"replica", all[i].kind == std::string{"stream"} ? -1 : 0},
                      {"stage", all[i].stage}, {"layer", all[i].layer}});
  }
  for (std::int64_t step = 0; step < 4; ++step) {
    const double s = 2000.0 * static_cast<double>(step);
    b.job(1, "copy", "layer_1", s, 50, step, -1, 0, "train", 4096);
    for (int i = 0; i < 4; ++i) {
      b.job(0, "forward", "layer_0", s + 100 * i, 100, step, i);
      b.job(1, "forward", "layer_1", s + 100 * (i + 1), 100, step, i);
      b.handler(1, 5, "forward", "layer_0", "layer_1", s + 100 * (i + 1), 10, step, i, 1024);
    }
    for (int k = 0; k < 4; ++k) {
      b.job(1, "backward", "layer_1", s + 500 + 200 * k, 200, step, 3 - k);
      b.job(0, "backward", "layer_0", s + 700 + 200 * k, 200, step, 3 - k, 5);
      b.handler(0, 4, "backward", "layer_1", "layer_0", s + 700 + 200 * k, 10, step, 3 - k, 1024);
    }
    b.job(1, "update", "opt_1", s + 1300, 100, step, -1);
    b.job(0, "update", "opt_0", s + (step == 3 ? 1800 : 1500), 100, step, -1);
    b.counter("credits layer_0 -> layer_1", s + 100, 1);
    b.counter("credits layer_0 -> layer_1", s + 200, 2);
    b.counter("credits layer_0 -> layer_1", s + 700, 1);
    b.counter("credits layer_0 -> layer_1", s + 1500, 0);
    b.counter("stash layer_0", s + 100, 1);
    b.events.push_back({{"ph", "i"}, {"s", "g"}, {"cat", "marker"}, {"name", "step " + std::to_string(step)},
                        {"pid", 2}, {"tid", 0}, {"ts", step == 3 ? 8000.0 : s + 1950},
                        {"args", {{"step", step}, {"epoch", 0}}}});
  }
  b.job(0, "forward", "layer_0", 3700, 50, 0, 0, 0, "eval");
  json wires = json::array({{{"from", "loader"}, {"to", "layer_0"}, {"kind", "activations"}, {"capacity", 4}},
                            {{"from", "layer_0"}, {"to", "layer_1"}, {"kind", "activations"}, {"capacity", 2}},
                            {{"from", "layer_1"}, {"to", "loss"}, {"kind", "activations"}, {"capacity", 2}}});
  json other = {{"troupe_version", "0.1.0"}, {"config", "hand_made.toml"}, {"replicas", 1},
                {"stages", 2}, {"microbatches", 4}, {"schedule", "gpipe"}, {"averaging", "central"},
                {"batch_size", 128}, {"steps", 4}, {"dropped_events", dropped_events},
                {"tracks", tracks}, {"wires", wires}};
  return {{"traceEvents", b.events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

}  // namespace troupe::test
