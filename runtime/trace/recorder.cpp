// recorder.cpp: per-thread event buffers, the live message log, and the Chrome Trace writer.
#include "runtime/trace/recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace troupe::trace {

namespace detail {
std::atomic<bool> enabled_flag{false};
std::atomic<bool> logging_flag{false};
}  // namespace detail

namespace {

using clock = std::chrono::steady_clock;

struct buffer {
  std::vector<event> events;
  std::uint64_t dropped = 0;
};

struct log_filter {
  std::string actor;  // substring of the receiver's or sender's name
  std::string kind;   // message name, exactly
  std::int64_t step = -1;
  std::string any;    // substring of actor names or kind
};

struct state {
  std::mutex mutex;
  clock::time_point origin = clock::now();
  std::size_t capacity = 1 << 20;
  std::uint64_t generation = 1;
  std::vector<std::shared_ptr<buffer>> buffers;
  std::vector<track_info> tracks;
  std::atomic<std::uint64_t> flows{0};
  log_filter filter;
  std::mutex print_mutex;
};

state& the_state() {
  static state s;
  return s;
}

thread_local std::shared_ptr<buffer> local_buffer;
thread_local std::uint64_t local_generation = 0;

buffer& this_thread_buffer() {
  auto& s = the_state();
  if (!local_buffer || local_generation != s.generation) {
    std::lock_guard<std::mutex> guard{s.mutex};
    local_buffer = std::make_shared<buffer>();
    local_buffer->events.reserve(std::min<std::size_t>(s.capacity, 4096));
    s.buffers.push_back(local_buffer);
    local_generation = s.generation;
  }
  return *local_buffer;
}

const std::string& track_name(std::uint32_t id) {
  static const std::string nobody = "-";
  auto& s = the_state();
  return id == 0 || id > s.tracks.size() ? nobody : s.tracks[id - 1].name;
}

bool matches(const log_filter& f, const event& e) {
  const auto& receiver = track_name(e.track);
  const auto& sender = track_name(e.peer);
  if (!f.actor.empty() && receiver.find(f.actor) == std::string::npos &&
      sender.find(f.actor) == std::string::npos)
    return false;
  if (!f.kind.empty() && f.kind != e.name)
    return false;
  if (f.step >= 0 && f.step != e.step)
    return false;
  if (!f.any.empty() && receiver.find(f.any) == std::string::npos &&
      sender.find(f.any) == std::string::npos && std::string{e.name}.find(f.any) == std::string::npos)
    return false;
  return true;
}

}  // namespace

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - the_state().origin)
      .count();
}

void start(std::size_t capacity) {
  auto& s = the_state();
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    s.capacity = std::max<std::size_t>(capacity, 16);
  }
  detail::enabled_flag.store(true);
}

void start_logging(const std::string& filter) {
  auto& s = the_state();
  log_filter f;
  std::stringstream terms{filter};
  std::string term;
  while (std::getline(terms, term, ',')) {
    if (term.empty())
      continue;
    auto equals = term.find('=');
    if (equals == std::string::npos) {
      f.any = term;
      continue;
    }
    auto key = term.substr(0, equals);
    auto value = term.substr(equals + 1);
    if (key == "actor")
      f.actor = value;
    else if (key == "kind")
      f.kind = value;
    else if (key == "step" && !value.empty() &&
             value.find_first_not_of("0123456789") == std::string::npos)
      f.step = std::stoll(value);
    else
      throw user_error("--log-messages: unknown filter term '" + term +
                       "'; use actor=NAME, kind=KIND, step=N or a plain word, separated by commas");
  }
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    s.filter = f;
  }
  detail::logging_flag.store(true);
}

void reset() {
  detail::enabled_flag.store(false);
  detail::logging_flag.store(false);
  auto& s = the_state();
  std::lock_guard<std::mutex> guard{s.mutex};
  s.buffers.clear();
  s.tracks.clear();
  ++s.generation;
  s.origin = clock::now();
}

std::uint32_t register_track(const track_info& info) {
  auto& s = the_state();
  std::lock_guard<std::mutex> guard{s.mutex};
  s.tracks.push_back(info);
  return static_cast<std::uint32_t>(s.tracks.size());
}

std::uint64_t next_flow() {
  return the_state().flows.fetch_add(1, std::memory_order_relaxed) + 1;
}

void record(const event& e) {
  auto& b = this_thread_buffer();
  if (b.events.size() < the_state().capacity)
    b.events.push_back(e);
  else
    ++b.dropped;
}

void log_message(const event& handled) {
  auto& s = the_state();
  if (!matches(s.filter, handled))
    return;
  char line[512];
  std::snprintf(line, sizeof line, "[%10.3f ms] %-16s -> %-16s %-10s", handled.start_ns / 1e6,
                track_name(handled.peer).c_str(), track_name(handled.track).c_str(), handled.name);
  std::string text = line;
  if (handled.step >= 0) {
    std::snprintf(line, sizeof line, " %s %lld", handled.phase == 1 ? "eval" : "step",
                  static_cast<long long>(handled.step));
    text += line;
  }
  if (handled.microbatch >= 0)
    text += " mb " + std::to_string(handled.microbatch);
  if (handled.replica >= 0)
    text += " r" + std::to_string(handled.replica);
  if (handled.bytes > 0) {
    std::snprintf(line, sizeof line, " (%.1f KiB)", static_cast<double>(handled.bytes) / 1024.0);
    text += line;
  }
  std::lock_guard<std::mutex> guard{s.print_mutex};
  std::fprintf(stderr, "%s\n", text.c_str());
}

std::uint64_t dropped() {
  auto& s = the_state();
  std::lock_guard<std::mutex> guard{s.mutex};
  std::uint64_t total = 0;
  for (const auto& b : s.buffers)
    total += b->dropped;
  return total;
}

std::vector<event> collect() {
  auto& s = the_state();
  std::vector<event> all;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    for (const auto& b : s.buffers)
      all.insert(all.end(), b->events.begin(), b->events.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const event& a, const event& b) { return a.start_ns < b.start_ns; });
  return all;
}

std::vector<track_info> tracks() {
  auto& s = the_state();
  std::lock_guard<std::mutex> guard{s.mutex};
  return s.tracks;
}

void write(const std::string& path, const std::string& metadata) {
  auto events = collect();
  auto all_tracks = tracks();
  // One process per device (in order of first registration), "host" last.
  std::map<std::string, int> pids;
  std::vector<std::string> devices;
  for (const auto& t : all_tracks)
    if (t.device != "host" && !pids.count(t.device)) {
      pids[t.device] = static_cast<int>(devices.size());
      devices.push_back(t.device);
    }
  pids["host"] = static_cast<int>(devices.size());
  devices.push_back("host");
  auto pid_of = [&](std::uint32_t track) {
    return track == 0 || track > all_tracks.size() ? pids["host"] : pids[all_tracks[track - 1].device];
  };
  auto name_of = [&](std::uint32_t track) -> std::string {
    return track == 0 || track > all_tracks.size() ? "-" : all_tracks[track - 1].name;
  };

  nlohmann::json out;
  auto& list = out["traceEvents"] = nlohmann::json::array();
  for (std::size_t p = 0; p < devices.size(); ++p) {
    list.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", p}, {"args", {{"name", devices[p]}}}});
    list.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", p}, {"args", {{"sort_index", p}}}});
  }
  for (std::size_t i = 0; i < all_tracks.size(); ++i) {
    auto id = static_cast<std::uint32_t>(i + 1);
    list.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_of(id)}, {"tid", id},
                    {"args", {{"name", all_tracks[i].name}}}});
    // Streams first in each process, then actors in registration order.
    list.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid_of(id)}, {"tid", id},
                    {"args", {{"sort_index", all_tracks[i].kind == "stream" ? 0 : id}}}});
  }
  auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  for (const auto& e : events) {
    nlohmann::json args;
    if (e.step >= 0)
      args["step"] = e.step;
    if (e.microbatch >= 0)
      args["microbatch"] = e.microbatch;
    if (e.replica >= 0)
      args["replica"] = e.replica;
    args["phase"] = e.phase == 1 ? "eval" : "train";
    if (e.bytes > 0)
      args["bytes"] = e.bytes;
    switch (e.type) {
      case event_type::handle:
        args["from"] = name_of(e.peer);
        args["to"] = name_of(e.track);
        if (e.flow != 0)
          args["flow"] = e.flow;
        list.push_back({{"ph", "X"}, {"cat", "handler"}, {"name", e.name}, {"pid", pid_of(e.track)},
                        {"tid", e.track}, {"ts", us(e.start_ns)}, {"dur", us(e.duration_ns)},
                        {"args", args}});
        if (e.flow != 0)
          list.push_back({{"ph", "f"}, {"bp", "e"}, {"cat", "message"}, {"name", e.name},
                          {"id", e.flow}, {"pid", pid_of(e.track)}, {"tid", e.track},
                          {"ts", us(e.start_ns)}});
        break;
      case event_type::send:
        list.push_back({{"ph", "s"}, {"cat", "message"}, {"name", e.name}, {"id", e.flow},
                        {"pid", pid_of(e.track)}, {"tid", e.track}, {"ts", us(e.start_ns)},
                        {"args", {{"to", name_of(e.peer)}, {"bytes", e.bytes}}}});
        break;
      case event_type::job:
        args["actor"] = name_of(e.peer);
        args["queued_us"] = us(e.value);
        list.push_back({{"ph", "X"}, {"cat", "job"}, {"name", e.name}, {"pid", pid_of(e.track)},
                        {"tid", e.track}, {"ts", us(e.start_ns)}, {"dur", us(e.duration_ns)},
                        {"args", args}});
        break;
      case event_type::counter: {
        std::string counter = std::string{e.name} + " " + name_of(e.track);
        if (e.peer != 0)
          counter += " -> " + name_of(e.peer);
        list.push_back({{"ph", "C"}, {"name", counter}, {"pid", pid_of(e.track)},
                        {"ts", us(e.start_ns)}, {"args", {{"value", e.value}}}});
        break;
      }
      case event_type::marker:
        list.push_back({{"ph", "i"}, {"s", "g"}, {"cat", "marker"},
                        {"name", std::string{e.name} + " " + std::to_string(e.step)},
                        {"pid", pids["host"]}, {"tid", 0}, {"ts", us(e.start_ns)},
                        {"args", {{"step", e.step}, {"epoch", e.value}}}});
        break;
    }
  }
  out["displayTimeUnit"] = "ms";
  auto other = metadata.empty() ? nlohmann::json::object() : nlohmann::json::parse(metadata);
  other["dropped_events"] = dropped();
  nlohmann::json track_list = nlohmann::json::array();
  for (const auto& t : all_tracks)
    track_list.push_back({{"name", t.name}, {"kind", t.kind}, {"device", t.device},
                          {"replica", t.replica}, {"stage", t.stage}, {"layer", t.layer}});
  other["tracks"] = track_list;
  out["otherData"] = other;
  std::ofstream file(path, std::ios::trunc);
  if (!file)
    throw user_error("cannot write the trace file '" + path + "'");
  file << out.dump() << '\n';
  if (!file)
    throw user_error("writing the trace file '" + path + "' failed");
}

handler_span::handler_span(std::uint32_t track, const char* name, std::uint32_t sender,
                           std::uint64_t flow, std::int64_t step, std::int32_t microbatch,
                           std::int32_t replica, std::uint8_t phase, std::int64_t bytes) {
  if (!observing())
    return;
  active_ = true;
  event_.type = event_type::handle;
  event_.track = track;
  event_.name = name;
  event_.peer = sender;
  event_.flow = flow;
  event_.step = step;
  event_.microbatch = microbatch;
  event_.replica = replica;
  event_.phase = phase;
  event_.bytes = bytes;
  event_.start_ns = now_ns();
  if (logging())
    log_message(event_);
}

handler_span::~handler_span() {
  if (!active_ || !enabled())
    return;
  event_.duration_ns = now_ns() - event_.start_ns;
  record(event_);
}

}  // namespace troupe::trace
