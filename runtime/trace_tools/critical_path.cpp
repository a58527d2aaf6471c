// critical_path.cpp: the walk of Note [critical path] and its two renderings.
#include "runtime/trace_tools/critical_path.hpp"

#include "runtime/trace_tools/steps.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// How far apart two timestamps of one happening may be: a send and the handler span that
// contains it are recorded by one thread, but a job's submission is derived from its start
// and queued_us, and merged traces shift clocks.
constexpr double slack_us = 2.0;

// A span on the path and how much of it counts: from its start up to `until` (what it did
// next on the path happened then).
struct node {
  const trace_span* span = nullptr;
  bool job = false;
  double until = 0;
};

class walker {
 public:
  explicit walker(const trace_file& trace) : trace_(trace) {
    for (std::size_t i = 0; i < trace.jobs.size(); ++i) {
      const auto& j = trace.jobs[i];
      auto& stream = streams_[j.device + '\n' + j.track];
      position_[i] = stream.size();
      stream.push_back(i);
      device_jobs_[j.device].push_back(i);
      if (!j.actor.empty())
        actor_jobs_[j.actor].push_back(i);
    }
    for (std::size_t i = 0; i < trace.handlers.size(); ++i)
      if (!trace.handlers[i].actor.empty())
        actor_handlers_[trace.handlers[i].actor].push_back(i);
  }

  /// The path of a step that runs from `floor` to the end of job `last`, latest first.
  std::vector<path_segment> walk(std::size_t last, double floor) {
    std::vector<path_segment> out;
    std::set<const trace_span*> seen;
    node at{&trace_.jobs[last], true, trace_.jobs[last].end_us()};
    while (at.span != nullptr && seen.insert(at.span).second) {
      const auto& s = *at.span;
      // Up to what it set off, and never past the piece after it: clocks of merged nodes
      // may put a send a little after its handling.
      double until = std::max(std::min(at.until, s.end_us()), s.start_us);
      if (!out.empty())
        until = std::min(until, out.back().start_us);
      out.push_back(at.job ? job_piece(s, at.span - trace_.jobs.data()) : handler_piece(s));
      clip(out.back(), std::min(std::max(s.start_us, floor), until), until);
      if (s.start_us <= floor)
        return out;
      at = at.job ? cause_of_job(s, out) : cause_of_handler(s, out);
      if (at.span != nullptr && at.until < out.back().start_us) {
        // Contiguous: the span ended, then what it set off (a callback, a resumed actor).
        const double to = out.back().start_us;
        out.push_back(piece_of(path_kind::handover, *at.span));
        clip(out.back(), at.until, to);
      }
      if (at.span != nullptr && at.until < floor) {  // what it waited for ended before the step
        auto& gap = out.back();
        clip(gap, floor, gap.start_us + gap.duration_us);
        return out;
      }
    }
    // No cause in the trace: the rest of the step.
    const double reached = out.empty() ? floor : out.back().start_us;
    if (reached > floor) {
      path_segment rest;
      rest.kind = path_kind::untraced;
      out.push_back(rest);
      clip(out.back(), floor, reached);
    }
    return out;
  }

 private:
  static void clip(path_segment& piece, double from, double to) {
    piece.start_us = from;
    piece.duration_us = std::max(0.0, to - from);
  }

  // A piece about span `s`: its name, actor, device, step and micro-batch.
  static path_segment piece_of(path_kind kind, const trace_span& s) {
    path_segment p;
    p.kind = kind;
    p.name = s.name;
    p.actor = s.actor;
    p.device = s.device;
    p.step = s.step;
    p.microbatch = s.microbatch;
    return p;
  }

  static path_segment job_piece(const trace_span& j, std::ptrdiff_t index) {
    auto p = piece_of(path_kind::job, j);
    p.job = index;
    return p;
  }

  static path_segment handler_piece(const trace_span& h) {
    auto p = piece_of(path_kind::handler, h);
    p.peer = h.from;
    return p;
  }

  // A gap before `s` (whose piece is out.back()) from `from`, clamped to that piece's
  // start, appended to `out`.
  static void gap(std::vector<path_segment>& out, path_kind kind, const trace_span& s,
                  double from) {
    const double to = out.back().start_us;
    out.push_back(piece_of(kind, s));
    clip(out.back(), std::min(from, to), to);
  }

  node cause_of_job(const trace_span& j, std::vector<path_segment>& out) {
    const auto index = static_cast<std::size_t>(&j - trace_.jobs.data());
    const double submitted = j.start_us - j.queued_us;
    const auto& stream = streams_.at(j.device + '\n' + j.track);
    const auto position = position_.at(index);
    if (position > 0) {
      const auto& before = trace_.jobs[stream[position - 1]];
      if (before.end_us() > submitted + slack_us) {  // the device was busy
        if (j.start_us - before.end_us() <= slack_us) {
          gap(out, path_kind::queued, j, before.end_us());
          out.back().peer = before.actor.empty() ? before.name : before.actor + " " + before.name;
        } else {
          // Then idle, and the job still waited: an idle-lane job waiting for work on its
          // way (Note [looking ahead before an idle job] in runtime/core/stream.cpp), or
          // the thread's wake-up.
          gap(out, path_kind::dispatch, j, before.end_us());
        }
        return {&before, true, before.end_us()};
      }
    }
    if (const auto* h = running(j.actor, submitted)) {
      gap(out, path_kind::dispatch, j, submitted);
      return {h, false, submitted};
    }
    // Submitted outside a traced handler: after the actor's last span (a job queued behind
    // its previous one runs when that one has, Note [one job at a time]).
    auto last = last_before(j.actor, submitted, &j);
    if (last.span != nullptr)
      gap(out, path_kind::dispatch, j, last.until);
    return last;
  }

  node cause_of_handler(const trace_span& h, std::vector<path_segment>& out) {
    const auto send = h.flow == 0 ? trace_.sends.end() : trace_.sends.find(h.flow);
    const bool sent = send != trace_.sends.end();
    const double sent_at = sent ? send->second.time_us : -1e300;
    // Its tensor, written by the sender on another device after the send.
    const trace_span* writer = nullptr;
    if (sent && !h.from.empty())
      writer = writer_of(h, sent_at);
    const double message_at = writer != nullptr ? writer->end_us() : sent_at;
    // Its actor, busy with the message before.
    const trace_span* before = previous_handler(h);
    const double before_at =
        before != nullptr && before->end_us() <= h.start_us + slack_us ? before->end_us() : -1e300;
    // Its device's thread, running a job (Note [critical path]).
    const trace_span* job = thread_job_before(h);
    const double job_at = job != nullptr ? job->end_us() : -1e300;
    if (job_at > message_at + slack_us && job_at >= before_at) {
      gap(out, path_kind::queued, h, job_at);
      out.back().peer = job->actor.empty() ? job->name : job->actor + " " + job->name;
      return {job, true, job_at};
    }
    if (before_at > message_at + slack_us) {
      gap(out, path_kind::busy, h, before_at);
      out.back().peer = before->from;
      return {before, false, before_at};
    }
    if (!sent)
      return {};
    const std::string wire = h.from + " -> " + h.actor;
    if (writer != nullptr) {
      gap(out, path_kind::written, h, writer->end_us());
      out.back().wire = wire;
      out.back().peer = writer->actor;
      return {writer, true, writer->end_us()};
    }
    gap(out, path_kind::transit, h, sent_at);
    out.back().wire = wire;
    const auto& sender = send->second.from;
    if (const auto* context = running(sender, sent_at)) {
      // An activation sent while handling something else: a gradient or a release gave
      // the wire its credit back.
      if (h.name == "forward" && context->name != "forward") {
        out.back().credit = true;
        out.back().peer = context->from;
      }
      return {context, false, sent_at};
    }
    return last_before(sender, sent_at, nullptr);
  }

  // The handler of `actor` running at `time`, or nullptr.
  const trace_span* running(const std::string& actor, double time) const {
    auto found = actor_handlers_.find(actor);
    if (found == actor_handlers_.end())
      return nullptr;
    const auto& list = found->second;
    auto it = std::upper_bound(list.begin(), list.end(), time + slack_us,
                               [&](double t, std::size_t i) { return t < trace_.handlers[i].start_us; });
    if (it == list.begin())
      return nullptr;
    const auto& h = trace_.handlers[*std::prev(it)];
    return h.end_us() >= time - slack_us ? &h : nullptr;
  }

  // On a CPU device, actors handle messages on the stream's thread between its jobs
  // (actors/base/device_scheduler.hpp): the job that ran last before handler h there.
  const trace_span* thread_job_before(const trace_span& h) const {
    if (h.device.find("cpu:") == std::string::npos)
      return nullptr;
    auto found = device_jobs_.find(h.device);
    if (found == device_jobs_.end())
      return nullptr;
    const auto& list = found->second;
    auto it = std::upper_bound(list.begin(), list.end(), h.start_us + slack_us,
                               [&](double t, std::size_t i) { return t < trace_.jobs[i].start_us; });
    if (it == list.begin())
      return nullptr;
    const auto& j = trace_.jobs[*std::prev(it)];
    return j.end_us() <= h.start_us + slack_us ? &j : nullptr;
  }

  // The handler of h's actor handled just before h.
  const trace_span* previous_handler(const trace_span& h) const {
    auto found = actor_handlers_.find(h.actor);
    if (found == actor_handlers_.end())
      return nullptr;
    const auto& list = found->second;
    auto it = std::lower_bound(list.begin(), list.end(), &h,
                               [&](std::size_t i, const trace_span* p) {
                                 return &trace_.handlers[i] < p;
                               });
    return it == list.begin() ? nullptr : &trace_.handlers[*std::prev(it)];
  }

  // The sender's job for h's micro-batch on another device that ended after the send and
  // before h started: the message waited for it (Note [no blocking waits]).
  const trace_span* writer_of(const trace_span& h, double sent_at) const {
    auto found = actor_jobs_.find(h.from);
    if (found == actor_jobs_.end())
      return nullptr;
    const trace_span* best = nullptr;
    const auto& list = found->second;
    int looked = 0;
    // The lists are in start order: begin at the last job that started by h's start (a scan
    // from the end skipped the later ones one by one, uncounted: O(jobs) a call).
    for (auto it = std::make_reverse_iterator(started_by(list, trace_.jobs, h.start_us));
         it != list.rend() && looked < 256; ++it) {
      const auto& j = trace_.jobs[*it];
      ++looked;
      if (j.device == h.device || j.step != h.step || j.microbatch != h.microbatch ||
          j.replica != h.replica || j.eval != h.eval)
        continue;
      if (j.end_us() > sent_at + slack_us && j.end_us() <= h.start_us + slack_us &&
          (best == nullptr || j.end_us() > best->end_us()))
        best = &j;
    }
    return best;
  }

  // The span of `actor` (handler or job, not `except`) that ended last by `time`.
  node last_before(const std::string& actor, double time, const trace_span* except) const {
    node best;
    double best_end = -1e300;
    auto consider = [&](const trace_span& s, bool job) {
      if (&s == except || s.end_us() > time + slack_us || s.end_us() <= best_end)
        return;
      best = {&s, job, s.end_us()};
      best_end = s.end_us();
    };
    // The newest 64 that started by `time` of each list (in start order).
    if (auto found = actor_handlers_.find(actor); found != actor_handlers_.end()) {
      const auto& list = found->second;
      int looked = 0;
      for (auto it = std::make_reverse_iterator(started_by(list, trace_.handlers, time));
           it != list.rend() && looked < 64; ++it, ++looked)
        consider(trace_.handlers[*it], false);
    }
    if (auto found = actor_jobs_.find(actor); found != actor_jobs_.end()) {
      const auto& list = found->second;
      int looked = 0;
      for (auto it = std::make_reverse_iterator(started_by(list, trace_.jobs, time));
           it != list.rend() && looked < 64; ++it, ++looked)
        consider(trace_.jobs[*it], true);
    }
    return best;
  }

  // The end of the spans of `list` (indices into `spans`, in start order) that started by
  // `time`.
  static std::vector<std::size_t>::const_iterator started_by(const std::vector<std::size_t>& list,
                                                             const std::vector<trace_span>& spans,
                                                             double time) {
    return std::upper_bound(list.begin(), list.end(), time,
                            [&](double t, std::size_t i) { return t < spans[i].start_us; });
  }

  const trace_file& trace_;
  std::map<std::string, std::vector<std::size_t>> streams_;  // by device and track
  std::map<std::size_t, std::size_t> position_;              // job -> place in its stream
  std::map<std::string, std::vector<std::size_t>> device_jobs_;  // by device, start order
  std::map<std::string, std::vector<std::size_t>> actor_jobs_;
  std::map<std::string, std::vector<std::size_t>> actor_handlers_;
};

// Who a piece's time is charged to in the three tables.
std::string actor_of(const path_segment& p) {
  return p.kind == path_kind::transit || p.kind == path_kind::written ||
                 p.kind == path_kind::untraced
             ? std::string{}
             : p.actor;
}
std::string device_of(const path_segment& p) {
  return p.kind == path_kind::transit || p.kind == path_kind::written ||
                 p.kind == path_kind::untraced
             ? std::string{}
             : p.device;
}

std::vector<blame> ranked(const std::map<std::string, double>& by_name, double total) {
  std::vector<blame> out;
  for (const auto& [name, us] : by_name)
    if (!name.empty() && us > 0)
      out.push_back({name, us, total > 0 ? us / total : 0});
  std::stable_sort(out.begin(), out.end(), [](const blame& a, const blame& b) {
    return a.us != b.us ? a.us > b.us : natural_less(a.name, b.name);
  });
  return out;
}

struct tally {
  std::map<std::string, double> actors, devices, wires;
  void add(const path_segment& p) {
    actors[actor_of(p)] += p.duration_us;
    devices[device_of(p)] += p.duration_us;
    wires[p.wire] += p.duration_us;
  }
};

std::string ms(double us) {
  return string_printf("%.3f ms", us / 1000);
}

std::string shares(const std::vector<blame>& rows, std::size_t most) {
  std::string s;
  for (std::size_t i = 0; i < rows.size() && i < most; ++i)
    s += string_printf("%s%s %.1f%%", i == 0 ? "" : ", ", rows[i].name.c_str(),
                       100 * rows[i].share);
  return s.empty() ? "-" : s;
}

std::string where(const path_segment& p) {
  std::string s;
  if (p.step >= 0)
    s += " (step " + std::to_string(p.step);
  if (p.microbatch >= 0)
    s += ", micro-batch " + std::to_string(p.microbatch);
  return s.empty() ? s : s + ")";
}

// One line of a path, for people.
std::string describe(path_segment p) {
  if (p.actor.empty())
    p.actor = "(no actor)";  // a job or message the trace does not attribute
  switch (p.kind) {
    case path_kind::job:
      return p.actor + ": " + p.name + " on " + p.device + where(p);
    case path_kind::handler:
      return p.actor + ": handling " + p.name + (p.peer.empty() ? "" : " from " + p.peer) +
             where(p);
    case path_kind::queued:
      return p.actor + "'s " + p.name + " waited for " + p.device + ", busy with " +
             (p.peer.empty() ? std::string{"another job"} : p.peer);
    case path_kind::busy:
      return p.actor + "'s " + p.name + " message waited while it handled the one before" +
             (p.peer.empty() ? std::string{} : " (from " + p.peer + ")");
    case path_kind::dispatch:
      return p.actor + "'s " + p.name + " waited to start on " + p.device;
    case path_kind::handover:
      return "from the end of " + p.actor + "'s " + p.name + " to what it set off";
    case path_kind::transit:
      return p.name + " " + p.wire + " in flight" +
             (p.credit ? ", sent when " + p.peer + " returned the wire's credit" : "") + where(p);
    case path_kind::written:
      return p.name + " " + p.wire + " waited for " + p.peer + "'s job to write its tensor" +
             where(p);
    case path_kind::untraced:
      return "no cause in the trace";
  }
  return {};
}

}  // namespace

const char* path_kind_name(path_kind kind) {
  switch (kind) {
    case path_kind::job: return "job";
    case path_kind::handler: return "handler";
    case path_kind::queued: return "queued";
    case path_kind::busy: return "busy";
    case path_kind::dispatch: return "dispatch";
    case path_kind::handover: return "handover";
    case path_kind::transit: return "transit";
    case path_kind::written: return "written";
    case path_kind::untraced: return "untraced";
  }
  return "?";
}

trace_explanation explain_trace(const trace_file& trace, std::int64_t only_step) {
  // The steps' windows and last jobs (Note [step time] in steps.hpp).
  const auto windows = step_windows(trace);
  if (windows.empty())
    throw user_error(trace.path + ": no training steps in the trace (no train-phase jobs)");
  auto has_step = [&](std::int64_t n) {
    return std::any_of(windows.begin(), windows.end(),
                       [n](const step_window& w) { return w.step == n; });
  };
  if (only_step >= 0 && !has_step(only_step))
    throw user_error(trace.path + ": no step " + std::to_string(only_step) + " in the trace; it has steps " +
                     std::to_string(windows.front().step) + " to " +
                     std::to_string(windows.back().step));
  trace_explanation out;
  out.path = trace.path;
  walker walk(trace);
  tally all;
  for (const auto& w : windows) {
    const auto number = w.step;
    const double start = w.start_us;
    if (only_step >= 0 && number != only_step)
      continue;
    step_explanation step;
    step.step = number;
    step.start_us = start;
    step.time_us = w.time_us();
    step.path = walk.walk(w.last_job, start);
    std::reverse(step.path.begin(), step.path.end());
    tally mine;
    for (const auto& p : step.path) {
      mine.add(p);
      all.add(p);
    }
    step.actors = ranked(mine.actors, step.time_us);
    step.devices = ranked(mine.devices, step.time_us);
    step.wires = ranked(mine.wires, step.time_us);
    out.total_us += step.time_us;
    out.steps.push_back(std::move(step));
  }
  out.actors = ranked(all.actors, out.total_us);
  out.devices = ranked(all.devices, out.total_us);
  out.wires = ranked(all.wires, out.total_us);
  return out;
}

std::string format_explanation_text(const trace_explanation& e, std::size_t slowest_steps) {
  std::string text = string_printf("critical paths of %zu training step(s) in %s: %s in all\n",
                                   e.steps.size(), e.path.c_str(), ms(e.total_us).c_str());
  text += "share of the steps' time on their critical paths:\n";
  text += "  actors:  " + shares(e.actors, 8) + "\n";
  text += "  devices: " + shares(e.devices, 8) + "\n";
  text += "  wires:   " + shares(e.wires, 6) + "\n";
  std::map<std::string, double> kinds;
  for (const auto& s : e.steps)
    for (const auto& p : s.path)
      kinds[path_kind_name(p.kind)] += p.duration_us;
  text += "  kinds:   " + shares(ranked(kinds, e.total_us), 8) + "\n";

  std::vector<const step_explanation*> order;
  for (const auto& s : e.steps)
    order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->time_us > b->time_us;
  });
  std::vector<double> times;
  for (const auto& s : e.steps)
    times.push_back(s.time_us);
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  if (order.size() > slowest_steps)
    order.resize(slowest_steps);
  constexpr std::size_t most_lines = 40;
  for (const auto* s : order) {
    text += string_printf("\nstep %lld: %s (median step %s); on its path: %s\n",
                          static_cast<long long>(s->step), ms(s->time_us).c_str(),
                          ms(median).c_str(), shares(s->actors, 4).c_str());
    if (!s->devices.empty())
      text += "  devices: " + shares(s->devices, 4) + "\n";
    text += "  critical path, latest first:\n";
    std::size_t lines = 0, left = 0;
    for (auto it = s->path.rbegin(); it != s->path.rend(); ++it) {
      if (it->duration_us < 0.5 && it->kind != path_kind::job)  // a hand-over: no news
        continue;
      if (lines == most_lines) {
        ++left;
        continue;
      }
      text += string_printf("  %10s  %s\n", ms(it->duration_us).c_str(), describe(*it).c_str());
      ++lines;
    }
    if (left > 0)
      text += string_printf("  ... %zu more (--json has every piece)\n", left);
  }
  return text;
}

std::string format_explanation_json(const trace_explanation& e) {
  auto table = [](const std::vector<blame>& rows) {
    auto out = nlohmann::json::array();
    for (const auto& b : rows)
      out.push_back({{"name", b.name}, {"us", b.us}, {"share", b.share}});
    return out;
  };
  nlohmann::json out = {{"trace", e.path},
                        {"total_us", e.total_us},
                        {"actors", table(e.actors)},
                        {"devices", table(e.devices)},
                        {"wires", table(e.wires)}};
  auto steps = nlohmann::json::array();
  for (const auto& s : e.steps) {
    auto path = nlohmann::json::array();
    for (const auto& p : s.path) {
      nlohmann::json piece = {{"kind", path_kind_name(p.kind)}, {"name", p.name},
                              {"actor", p.actor},             {"device", p.device},
                              {"start_us", p.start_us},       {"duration_us", p.duration_us},
                              {"step", p.step},               {"microbatch", p.microbatch}};
      if (!p.wire.empty())
        piece["wire"] = p.wire;
      if (!p.peer.empty())
        piece["peer"] = p.peer;
      if (p.credit)
        piece["credit"] = true;
      path.push_back(std::move(piece));
    }
    steps.push_back({{"step", s.step},
                     {"start_us", s.start_us},
                     {"time_us", s.time_us},
                     {"actors", table(s.actors)},
                     {"devices", table(s.devices)},
                     {"wires", table(s.wires)},
                     {"path", std::move(path)}});
  }
  out["steps"] = std::move(steps);
  return out.dump(2) + "\n";
}

}  // namespace troupe
