// summary.cpp: the analysis behind `troupe trace summary` and its two renderings.
#include "runtime/trace_tools/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/trace_tools/steps.hpp"

namespace troupe {

namespace {

bool is_compute(job_kind job) {
  return job == job_kind::forward || job == job_kind::backward ||
         job == job_kind::backward_weight || job == job_kind::loss || job == job_kind::update;
}
// Data movement: copies between devices, averaging, batches loaded onto their device.
bool is_communication(job_kind job) {
  return job == job_kind::copy || job == job_kind::reduce || job == job_kind::load;
}

// Per-step accumulation before the busiest device is known.
struct step_accumulator {
  std::map<std::string, double> device_busy, device_compute, device_communication, actor_busy;
};

std::size_t device_rank(const trace_file& trace, const std::string& device) {
  auto it = std::find(trace.devices.begin(), trace.devices.end(), device);
  return static_cast<std::size_t>(it - trace.devices.begin());
}

void summarize_actors(const trace_file& trace, trace_summary& out) {
  std::map<std::string, actor_time> actors;
  for (const auto& t : trace.tracks)
    if (t.kind != "stream")
      actors[t.name] = actor_time{t.name, t.kind, t.device};
  for (const auto& job : trace.jobs) {
    if (job.actor.empty())
      continue;
    auto& a = actors[job.actor];
    a.name = job.actor;
    a.compute_us += job.duration_us;
    a.waiting_us += job.queued_us;
    ++a.jobs;
  }
  // Fused layers (Note [fused layers]): each layer's parts are its compute, taken out of
  // its fused actor's jobs, so the actors' compute still adds up to the devices' busy time.
  for (const auto& part : trace.parts) {
    if (part.actor.empty())
      continue;
    auto& layer = actors[part.actor];
    if (layer.name.empty()) {
      layer.name = part.actor;
      layer.device = part.device;
    }
    layer.compute_us += part.duration_us;
    ++layer.jobs;
    auto fused = actors.find(part.from);
    if (fused != actors.end())
      fused->second.compute_us -= part.duration_us;
  }
  for (const auto& h : trace.handlers) {
    if (h.actor.empty())
      continue;
    auto& a = actors[h.actor];
    if (a.name.empty()) {  // an actor the track list does not know: place it by its handler
      a.name = h.actor;
      a.device = h.device;
    }
    a.handling_us += h.duration_us;
    ++a.messages;
  }
  for (auto& [name, a] : actors) {
    a.compute_us = std::max(0.0, a.compute_us);  // a fused actor's, less its parts' rounding
    a.idle_us = std::max(0.0, out.run_us - a.compute_us - a.handling_us - a.waiting_us);
    out.actors.push_back(a);
  }
  std::sort(out.actors.begin(), out.actors.end(), [&](const actor_time& a, const actor_time& b) {
    auto ra = device_rank(trace, a.device), rb = device_rank(trace, b.device);
    return ra != rb ? ra < rb : natural_less(a.name, b.name);
  });
}

void summarize_devices(const trace_file& trace, trace_summary& out) {
  std::set<std::string> with_stream;
  for (const auto& t : trace.tracks)
    if (t.kind == "stream")
      with_stream.insert(t.device);
  std::map<std::string, device_time> devices;
  for (const auto& job : trace.jobs) {
    auto& d = devices[job.device];
    d.busy_us += job.duration_us;
    ++d.jobs;
  }
  std::vector<std::string> order = trace.devices;
  for (const auto& [name, d] : devices)  // devices named only by jobs (no metadata): last
    if (std::find(order.begin(), order.end(), name) == order.end())
      order.push_back(name);
  for (const auto& name : order) {
    if (!devices.count(name) && !with_stream.count(name))
      continue;
    auto d = devices[name];
    d.name = name;
    d.utilisation = out.run_us > 0 ? d.busy_us / out.run_us : 0;
    out.devices.push_back(d);
  }
}

void summarize_pipeline(const trace_file& trace, trace_summary& out) {
  // Interleaved: P devices of v stages each, which a micro-batch passes v times (see the
  // header): as 1F1B over P stages with v M micro-batches.
  const auto v = trace.virtual_stages, P = trace.stages / v;
  const double p = static_cast<double>(P),
               m = static_cast<double>(trace.microbatches * v);
  const bool zero_bubble = trace.schedule == "zb-h1";
  out.theory_bubble = zero_bubble ? (p - 1) / (3 * m + p - 1) : (p - 1) / (m + p - 1);
  if (trace.stages <= 1)
    return;
  std::map<std::string, double> work_by_device, weight_by_device;  // training micro-batch work
  for (const auto& job : trace.jobs) {
    if (job.eval)
      continue;
    if (job.kind == job_kind::forward || job.kind == job_kind::backward ||
        job.kind == job_kind::loss)
      work_by_device[job.device] += job.duration_us;
    if (job.kind == job_kind::backward_weight) {
      work_by_device[job.device] += job.duration_us;
      weight_by_device[job.device] += job.duration_us;
    }
  }
  for (std::int64_t s = 0; s < P; ++s) {
    stage_time stage;
    stage.stage = s;
    for (const auto& t : trace.tracks)
      if (t.kind == "layer" && t.stage >= 0 && t.stage % P == s && t.replica <= 0 &&
          std::find(stage.devices.begin(), stage.devices.end(), t.device) == stage.devices.end())
        stage.devices.push_back(t.device);
    // A stage the trace has no layer of (one node's own trace of a pipeline over several)
    // has nothing to show, and gets no row.
    if (stage.devices.empty())
      continue;
    double sum = 0;
    for (const auto& name : stage.devices)
      for (const auto& d : out.devices)
        if (d.name == name)
          sum += d.utilisation;
    stage.utilisation = stage.devices.empty() ? 0 : sum / static_cast<double>(stage.devices.size());
    stage.bubble = 1 - stage.utilisation;
    for (const auto& name : stage.devices) {
      auto it = work_by_device.find(name);
      if (it != work_by_device.end())
        stage.work_us += it->second;
      it = weight_by_device.find(name);
      if (it != weight_by_device.end())
        stage.weight_us += it->second;
    }
    if (!stage.devices.empty()) {
      stage.work_us /= static_cast<double>(stage.devices.size());
      stage.weight_us /= static_cast<double>(stage.devices.size());
    }
    stage.work_us /= static_cast<double>(v);  // per pass of a micro-batch
    stage.weight_us /= static_cast<double>(v);
    out.pipeline.push_back(stage);
  }
  double total = 0, slowest = 0, slowest_rest = 0, slowest_weight = 0;
  for (const auto& stage : out.pipeline) {
    total += stage.work_us;
    slowest = std::max(slowest, stage.work_us);
    slowest_rest = std::max(slowest_rest, stage.work_us - stage.weight_us);
    slowest_weight = std::max(slowest_weight, stage.weight_us);
  }
  const double step = zero_bubble
                          ? m * slowest + (p - 1) * std::max(0.0, slowest_rest - slowest_weight)
                          : total + (m - 1) * slowest;
  for (auto& stage : out.pipeline)
    stage.theory =
        step > 0 && std::isfinite(step) ? 1 - m * stage.work_us / step : out.theory_bubble;
}

void summarize_wires(const trace_file& trace, trace_summary& out) {
  std::map<std::string, int> node_of_actor;
  for (const auto& t : trace.tracks)
    node_of_actor[t.name] = node_of_device(t.device);
  auto node_of = [&](const std::string& actor) {
    auto it = node_of_actor.find(actor);
    return it == node_of_actor.end() ? 0 : it->second;
  };
  std::map<std::tuple<std::string, std::string, std::string>, wire_traffic> wires;
  for (const auto& h : trace.handlers) {
    // A message from another node names no sender where it is handled; its send does.
    auto sent = h.flow == 0 ? trace.sends.end() : trace.sends.find(h.flow);
    auto from = h.from;
    if ((from.empty() || from == "-") && sent != trace.sends.end() && !sent->second.from.empty())
      from = sent->second.from;
    // Or the one wire of that kind into the receiver (a ring step names no flow).
    if (from.empty() || from == "-") {
      const trace_wire* only = nullptr;
      int count = 0;
      for (const auto& wire : trace.wires)
        if (wire.to == h.actor && wire.kind == h.name) {
          only = &wire;
          ++count;
        }
      if (count == 1)
        from = only->from;
    }
    auto& w = wires[{from, h.actor, h.name}];
    w.from = from;
    w.to = h.actor;
    w.kind = h.name;
    w.network = node_of_actor.count(from) && node_of(from) != node_of(h.actor);
    ++w.messages;
    // What crossed the network is what was sent (a loader sends a remote replica only the
    // rows of its batch, which that node assembles: batch_assembler_actor.hpp).
    w.bytes += w.network && sent != trace.sends.end() && sent->second.bytes >= 0
                   ? sent->second.bytes
                   : h.bytes;
    if (sent != trace.sends.end()) {
      w.transit_us += h.start_us - sent->second.time_us;  // a sum until the division below
      ++w.timed;
    }
  }
  for (const auto& [name, samples] : trace.counters)
    if (name.rfind("shared memory ", 0) == 0 && name.rfind("shared memory full ", 0) != 0 &&
        name.rfind("shared memory messages ", 0) != 0 && !samples.empty())  // a running total
      out.shared_memory_bytes += static_cast<std::int64_t>(
          std::max_element(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
            return a.value < b.value;
          })->value);
  // "staleness <server> -> <layer>": one sample an update.
  std::map<std::string, server_staleness> servers;
  for (const auto& [name, samples] : trace.counters) {
    if (name.rfind("staleness ", 0) != 0)
      continue;
    const auto server = name.substr(10, name.find(" -> ") - 10);
    auto& st = servers[server];
    st.server = server;
    for (const auto& sample : samples) {
      ++st.updates;
      st.mean += sample.value;  // a sum until the division below
      st.max = std::max(st.max, static_cast<std::int64_t>(sample.value));
    }
  }
  for (auto& [name, st] : servers) {
    st.mean /= static_cast<double>(std::max<std::int64_t>(st.updates, 1));
    out.staleness.push_back(st);
  }
  for (auto& [key, w] : wires)
    if (w.timed > 0)
      w.transit_us /= static_cast<double>(w.timed);
  for (const auto& [key, w] : wires)
    out.wires.push_back(w);
  std::sort(out.wires.begin(), out.wires.end(), [](const wire_traffic& a, const wire_traffic& b) {
    if (a.from != b.from)
      return natural_less(a.from, b.from);
    if (a.to != b.to)
      return natural_less(a.to, b.to);
    return a.kind < b.kind;
  });
}

void summarize_steps(const trace_file& trace, trace_summary& out) {
  std::map<std::int64_t, step_accumulator> steps;
  for (const auto& job : trace.jobs) {
    if (job.eval || job.step < 0)
      continue;
    auto& s = steps[job.step];
    s.device_busy[job.device] += job.duration_us;
    if (is_compute(job.kind))
      s.device_compute[job.device] += job.duration_us;
    if (is_communication(job.kind))
      s.device_communication[job.device] += job.duration_us;
    if (!job.actor.empty())
      s.actor_busy[job.actor] += job.duration_us;
  }
  // Each step's time is its window (Note [step time] in steps.hpp); its work is its jobs'.
  const auto windows = step_windows(trace);
  for (const auto& w : windows) {
    auto& s = steps[w.step];
    step_time step;
    step.step = w.step;
    step.start_us = w.start_us;
    step.time_us = w.time_us();
    // Ties go to the device (actor) first in trace order (in name order), so that the
    // choice does not depend on how the maps happen to iterate.
    for (const auto& [device, busy] : s.device_busy)
      if (step.device.empty() || busy > s.device_busy[step.device] ||
          (busy == s.device_busy[step.device] &&
           device_rank(trace, device) < device_rank(trace, step.device)))
        step.device = device;
    step.compute_us = s.device_compute[step.device];
    step.communication_us = s.device_communication[step.device];
    step.waiting_us = std::max(0.0, step.time_us - step.compute_us - step.communication_us);
    for (const auto& [actor, busy] : s.actor_busy)
      if (step.slowest_actor.empty() || busy > step.slowest_actor_us ||
          (busy == step.slowest_actor_us && natural_less(actor, step.slowest_actor))) {
        step.slowest_actor = actor;
        step.slowest_actor_us = busy;
      }
    out.steps.push_back(step);
  }
  out.average.step = -1;
  if (out.steps.empty())
    return;
  // The average step is the run's step time (Note [step time]): the steady steps' mean
  // period, and the mean of their work; a run of one step is that step.
  auto counted = steady_steps(windows);
  if (counted.empty())
    counted.push_back(0);
  for (auto i : counted) {
    const auto& s = out.steps[i];
    out.average.time_us += windows[i].period_us();
    out.average.compute_us += s.compute_us;
    out.average.communication_us += s.communication_us;
  }
  const double n = static_cast<double>(counted.size());
  out.average.time_us /= n;
  out.average.compute_us /= n;
  out.average.communication_us /= n;
  out.average.waiting_us = std::max(
      0.0, out.average.time_us - out.average.compute_us - out.average.communication_us);
}

int width_of(const std::vector<std::string>& names, int at_least) {
  int width = at_least;
  for (const auto& n : names)
    width = std::max(width, static_cast<int>(n.size()));
  return width;
}

}  // namespace

trace_summary summarize_trace(const trace_file& trace) {
  trace_summary out;
  out.path = trace.path;
  out.run_us = trace.run_us();
  out.dropped_events = trace.dropped_events;
  out.stages = trace.stages;
  out.virtual_stages = trace.virtual_stages;
  out.microbatches = trace.microbatches;
  out.replicas = trace.replicas;
  out.schedule = trace.schedule;
  summarize_actors(trace, out);
  summarize_devices(trace, out);
  summarize_pipeline(trace, out);
  summarize_wires(trace, out);
  summarize_steps(trace, out);
  return out;
}

namespace {

// A trace's names as the table shows them: a name from a hand-made trace may be a megabyte,
// and every row of its table was padded to the widest (a 1 MB name made 10 MB of output).
std::string shown(const std::string& name, std::size_t longest = 64) {
  if (name.size() <= longest)
    return name;
  auto cut = longest;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80)
    --cut;  // at a UTF-8 character's first byte
  return name.substr(0, cut) + "... (" + std::to_string(name.size()) + " bytes)";
}

trace_summary with_names_shown(trace_summary s) {
  s.path = shown(s.path, limits::max_quoted_path_length);
  s.schedule = shown(s.schedule);
  for (auto& a : s.actors)
    a.name = shown(a.name), a.device = shown(a.device);
  for (auto& d : s.devices)
    d.name = shown(d.name);
  for (auto& st : s.pipeline)
    for (auto& d : st.devices)
      d = shown(d);
  for (auto& w : s.wires)
    w.from = shown(w.from), w.to = shown(w.to), w.kind = shown(w.kind);
  for (auto& st : s.steps)
    st.device = shown(st.device), st.slowest_actor = shown(st.slowest_actor);
  return s;
}

}  // namespace

std::string format_summary_text(const trace_summary& summary, std::size_t slowest_steps) {
  const auto s = with_names_shown(summary);
  std::string text;
  if (s.dropped_events > 0)
    text += string_printf("warning: the trace dropped %lld events (a thread's buffer filled up; raise "
                   "[run] trace_capacity): the times below undercount what happened\n\n",
                   static_cast<long long>(s.dropped_events));
  text += string_printf("trace %s: %.3f ms", s.path.c_str(), s.run_us / 1000);
  if (s.stages > 1)
    text += string_printf(", %lld stages%s x %lld micro-batches%s%s", static_cast<long long>(s.stages),
                   s.virtual_stages > 1
                       ? string_printf(" (%lld a device, interleaved)",
                                       static_cast<long long>(s.virtual_stages)).c_str()
                       : "",
                   static_cast<long long>(s.microbatches), s.schedule.empty() ? "" : ", ",
                   s.schedule.c_str());
  if (s.replicas > 1)
    text += string_printf(", %lld replicas", static_cast<long long>(s.replicas));
  text += "\n\n";

  std::vector<std::string> names;
  for (const auto& a : s.actors)
    names.push_back(a.name);
  const int name_width = width_of(names, 5);
  text += string_printf("%-*s %-8s %12s %12s %12s %12s\n", name_width, "actor", "device", "compute ms",
                 "handling ms", "waiting ms", "idle ms");
  for (const auto& a : s.actors)
    text += string_printf("%-*s %-8s %12.3f %12.3f %12.3f %12.3f\n", name_width, a.name.c_str(),
                   a.device.c_str(), a.compute_us / 1000, a.handling_us / 1000, a.waiting_us / 1000,
                   a.idle_us / 1000);

  text += string_printf("\n%-8s %12s %8s %12s\n", "device", "busy ms", "jobs", "utilisation");
  for (const auto& d : s.devices)
    text += string_printf("%-8s %12.3f %8lld %11.1f%%\n", d.name.c_str(), d.busy_us / 1000,
                   static_cast<long long>(d.jobs), 100 * d.utilisation);

  if (!s.pipeline.empty()) {
    text += string_printf("\n%-6s %-16s %12s %12s %8s %8s %8s\n", "stage", "devices", "utilisation",
                          "work ms", "bubble", "theory", "costed");
    for (const auto& st : s.pipeline) {
      std::string devices;
      for (const auto& d : st.devices)
        devices += (devices.empty() ? "" : ",") + d;
      text +=
          string_printf("%-6lld %-16s %11.1f%% %12.3f %7.1f%% %7.1f%% %7.1f%%\n",
                        static_cast<long long>(st.stage), devices.c_str(), 100 * st.utilisation,
                        st.work_us / 1000, 100 * st.bubble, 100 * s.theory_bubble, 100 * st.theory);
    }
    if (s.schedule == "zb-h1")
      text += string_printf(
          "(theory: ZB-H1's (P - 1) / (3 M + P - 1) with P = %lld, M = %lld, for equal stages and\n"
          " F = B = W; costed: for these stages' work W (backward_weight) and A (the rest),\n"
          " 1 - M work / (M max work + (P - 1) (max A - max W)))\n",
          static_cast<long long>(s.stages), static_cast<long long>(s.microbatches));
    else if (s.virtual_stages > 1)
      text += string_printf(
          "(a row per device of the pipeline, by its first stage; theory: interleaved 1F1B's\n"
          " (P - 1) / (v M + P - 1) with P = %lld, v = %lld, M = %lld, for equal stages; costed: for\n"
          " these devices' work, 1F1B's over P stages of work / v and v M micro-batches)\n",
          static_cast<long long>(s.stages / s.virtual_stages),
          static_cast<long long>(s.virtual_stages), static_cast<long long>(s.microbatches));
    else
      text += string_printf(
          "(theory: (P - 1) / (M + P - 1) with P = %lld, M = %lld, for equal stages; costed: for\n"
          " these stages' work (forward, backward, loss), 1 - M work / (sum + (M - 1) max))\n",
          static_cast<long long>(s.stages), static_cast<long long>(s.microbatches));
  }

  if (!s.wires.empty()) {
    std::vector<std::string> froms, tos;
    for (const auto& w : s.wires) {
      froms.push_back(w.from);
      tos.push_back(w.to);
    }
    const int from_width = width_of(froms, 4), to_width = width_of(tos, 2);
    text += string_printf("\n%-*s %-*s %-10s %9s %12s\n", from_width, "from", to_width, "to", "message",
                   "count", "bytes");
    for (const auto& w : s.wires)
      text += string_printf("%-*s %-*s %-10s %9lld %12s\n", from_width, w.from.c_str(), to_width,
                     w.to.c_str(), w.kind.c_str(), static_cast<long long>(w.messages),
                     human_bytes(w.bytes).c_str());
    // The wires between nodes: what the network carried, and how long a message took from
    // its send to the start of its handling (on node0's clock: merge.hpp).
    bool any_network = std::any_of(s.wires.begin(), s.wires.end(),
                                   [](const wire_traffic& w) { return w.network; });
    if (any_network) {
      std::int64_t bytes = 0, messages = 0;
      text += string_printf("\nacross the network\n%-*s %-*s %-10s %9s %12s %14s\n", from_width,
                            "from", to_width, "to", "message", "count", "bytes", "transit (mean)");
      for (const auto& w : s.wires) {
        if (!w.network)
          continue;
        bytes += w.bytes;
        messages += w.messages;
        text += string_printf("%-*s %-*s %-10s %9lld %12s %14s\n", from_width, w.from.c_str(),
                              to_width, w.to.c_str(), w.kind.c_str(),
                              static_cast<long long>(w.messages), human_bytes(w.bytes).c_str(),
                              w.timed > 0 ? (string_printf("%.0f us", w.transit_us)).c_str() : "-");
      }
      text += string_printf("%lld messages, %s in all", static_cast<long long>(messages),
                            human_bytes(bytes).c_str());
      text += s.shared_memory_bytes > 0
                  ? string_printf("; %s of tensors through shared memory (nodes of one machine)\n",
                                  human_bytes(s.shared_memory_bytes).c_str())
                  : std::string{"\n"};
    }
  }

  if (!s.staleness.empty()) {
    text +=
        "\nasync server staleness (updates landed between a gradient's version and its "
        "own update)\n";
    text += string_printf("%-24s %9s %8s %5s\n", "server", "updates", "mean", "max");
    for (const auto& st : s.staleness)
      text += string_printf("%-24s %9lld %8.2f %5lld\n", st.server.c_str(),
                            static_cast<long long>(st.updates), st.mean,
                            static_cast<long long>(st.max));
  }
  if (s.steps.empty()) {
    text += "\nno training steps in the trace\n";
    return text;
  }
  const auto& avg = s.average;
  text += string_printf("\n%zu training steps; on the busiest device a step takes %.3f ms (the run's "
                 "step time: end to end, after the first, without the slowest and fastest tenth) = "
                 "compute %.3f + communication %.3f + waiting %.3f\n",
                 s.steps.size(), avg.time_us / 1000, avg.compute_us / 1000,
                 avg.communication_us / 1000, avg.waiting_us / 1000);
  auto slowest = s.steps;
  std::stable_sort(slowest.begin(), slowest.end(),
                   [](const step_time& a, const step_time& b) { return a.time_us > b.time_us; });
  slowest.resize(std::min(slowest.size(), slowest_steps));
  text += string_printf("slowest steps:\n%8s %10s %-8s %10s %10s %10s  %s\n", "step", "time ms", "device",
                 "compute", "comm", "waiting", "slowest actor");
  for (const auto& st : slowest)
    text += string_printf("%8lld %10.3f %-8s %10.3f %10.3f %10.3f  %s (%.3f ms)\n",
                   static_cast<long long>(st.step), st.time_us / 1000, st.device.c_str(),
                   st.compute_us / 1000, st.communication_us / 1000, st.waiting_us / 1000,
                   st.slowest_actor.c_str(), st.slowest_actor_us / 1000);
  return text;
}

std::string format_summary_json(const trace_summary& s) {
  using json = nlohmann::json;
  json out;
  out["path"] = s.path;
  out["run_us"] = s.run_us;
  out["dropped_events"] = s.dropped_events;
  if (s.dropped_events > 0)
    out["warning"] = "the trace dropped events (a thread's buffer filled up): times undercount";
  out["replicas"] = s.replicas;
  out["stages"] = s.stages;
  out["virtual_stages"] = s.virtual_stages;
  out["microbatches"] = s.microbatches;
  out["schedule"] = s.schedule;
  auto& actors = out["actors"] = json::array();
  for (const auto& a : s.actors)
    actors.push_back({{"name", a.name}, {"kind", a.kind}, {"device", a.device},
                      {"compute_us", a.compute_us}, {"handling_us", a.handling_us},
                      {"waiting_us", a.waiting_us}, {"idle_us", a.idle_us}, {"jobs", a.jobs},
                      {"messages", a.messages}});
  auto& devices = out["devices"] = json::array();
  for (const auto& d : s.devices)
    devices.push_back({{"name", d.name}, {"busy_us", d.busy_us}, {"jobs", d.jobs},
                       {"utilisation", d.utilisation}});
  if (!s.pipeline.empty()) {
    json stages = json::array();
    for (const auto& st : s.pipeline)
      stages.push_back({{"stage", st.stage},
                        {"devices", st.devices},
                        {"utilisation", st.utilisation},
                        {"bubble", st.bubble},
                        {"work_us", st.work_us},
                        {"weight_us", st.weight_us},
                        {"theory", st.theory}});
    out["pipeline"] = {{"theory_bubble", s.theory_bubble}, {"stages", stages}};
  } else {
    out["pipeline"] = nullptr;
  }
  out["shared_memory_bytes"] = s.shared_memory_bytes;
  auto& staleness = out["staleness"] = json::array();
  for (const auto& st : s.staleness)
    staleness.push_back(
        {{"server", st.server}, {"updates", st.updates}, {"mean", st.mean}, {"max", st.max}});
  auto& wires = out["wires"] = json::array();
  for (const auto& w : s.wires)
    wires.push_back({{"from", w.from},
                     {"to", w.to},
                     {"kind", w.kind},
                     {"network", w.network},
                     {"transit_us", w.transit_us},
                     {"messages", w.messages},
                     {"bytes", w.bytes}});
  auto step_json = [](const step_time& st) {
    json j = {{"time_us", st.time_us}, {"compute_us", st.compute_us},
              {"communication_us", st.communication_us}, {"waiting_us", st.waiting_us}};
    if (st.step >= 0) {
      j["step"] = st.step;
      j["start_us"] = st.start_us;
      j["device"] = st.device;
      j["slowest_actor"] = st.slowest_actor;
      j["slowest_actor_us"] = st.slowest_actor_us;
    }
    return j;
  };
  auto& steps = out["steps"] = json::array();
  for (const auto& st : s.steps)
    steps.push_back(step_json(st));
  out["step_average"] = s.steps.empty() ? json(nullptr) : step_json(s.average);
  return out.dump(2) + "\n";
}

}  // namespace troupe
