// recorder.cpp: per-thread event buffers, the live message log, and the Chrome Trace writer.
//
// Note [recorders and threads]
// A session owns its recorder and binds it to every thread that runs its code: the
// session's own thread, each device stream's thread (a task posted before any job), and
// every thread of its actor system (a CAF thread hook). The binding is a thread-local
// shared_ptr, so the free functions that actors and streams call (record, now_ns, ...)
// find the right recorder without a lookup, two sessions in one process (one after the
// other, or at once on separate threads) never see each other's recorder, and a thread
// that outlives its session keeps the recorder alive instead of writing into freed memory.
//
// Each (thread, recorder) pair gets its own buffer, made on the thread's first event and
// owned by the recorder; only that thread appends to it. freeze() has to know that no
// thread is still appending when it returns, without putting a lock on that path. A
// writer announces itself (buffer::writing = true) and only then checks whether the
// recorder still records; freeze() first stops recording and then waits until no buffer
// is being written. Both sides use sequentially consistent operations, so at least one
// of them sees the other: either the writer sees "stopped" and appends nothing, or
// freeze() sees "writing" and waits for the append to finish (whose release store
// publishes the event to collect()).
#include "troupe/trace.hpp"

#include "runtime/trace/current_handler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "troupe/error.hpp"

namespace troupe::trace {

namespace detail {
std::atomic<int> observing_recorders{0};
}  // namespace detail

// Note [a buffer in chunks]
// A thread's events go into fixed chunks, never into one growing array: a vector that
// doubles copies everything recorded so far and touches twice the memory, inside
// whatever handler or job records the event that fills it. A device thread of a
// 1500-step DP2 run records about 200,000 events (16 MB); its doublings took 18-44 ms
// each, in steps 160, 320, 640 and 1280 (traced, 5 MB of fresh memory and up), and the
// other replica waited for them: the trace showed stalls tracing had made. A chunk is
// 4096 events (320 KB), its pages touched as it fills.
struct recorder::buffer {
  static constexpr std::size_t chunk_events = 4096;

  void append(const event& e) {
    if (size % chunk_events == 0)
      chunks.push_back(std::make_unique<event[]>(chunk_events));
    chunks.back()[size % chunk_events] = e;
    ++size;
  }
  template <typename Visit>
  void for_each(Visit visit) const {
    for (std::size_t i = 0; i < size; ++i)
      visit(chunks[i / chunk_events][i % chunk_events]);
  }

  std::vector<std::unique_ptr<event[]>> chunks;  // appended by the owning thread only
  std::size_t size = 0;                          // likewise
  std::uint64_t dropped = 0;                     // likewise
  std::atomic<bool> writing{false};              // Note [recorders and threads]
};

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const std::int64_t process_origin_ns = steady_ns();

// The calling thread's recorder, and its buffer there once it has recorded an event.
struct thread_state {
  std::shared_ptr<recorder> owner;
  recorder::buffer* events = nullptr;
};

thread_local thread_state this_thread;

// The handler span this thread is inside (current_handler.hpp); handlers do not nest.
thread_local const event* current_handler_event = nullptr;

}  // namespace

// ---- the recorder ----

recorder::log_filter recorder::parse_filter(const std::string& text) {
  log_filter f;
  std::stringstream terms{text};
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
    else if (key == "step" && !value.empty() && value.size() <= 18 &&
             value.find_first_not_of("0123456789") == std::string::npos)
      f.step = std::stoll(value);
    else
      throw user_error("--log-messages: unknown filter term " + quote_user_text(term) +
                       "; use actor=NAME, kind=KIND, step=N or a plain word, separated by commas");
  }
  return f;
}

recorder::recorder(const recorder_settings& settings)
    : origin_ns_(steady_ns()),
      virtual_clock_(settings.virtual_clock),
      capacity_(std::max<std::size_t>(settings.capacity, 16)),
      filter_(settings.log_messages ? parse_filter(settings.log_filter) : log_filter{}),
      recording_(settings.record),
      logging_(settings.log_messages),
      flow_base_(settings.flow_base) {
  if (settings.record || settings.log_messages) {
    counted_ = true;
    detail::observing_recorders.fetch_add(1);
  }
}

recorder::~recorder() {
  if (counted_)
    detail::observing_recorders.fetch_sub(1);
}

std::int64_t recorder::now_ns() const {
  return virtual_clock_ != nullptr ? virtual_clock_->load(std::memory_order_relaxed)
                                   : steady_ns() - origin_ns_;
}

std::uint32_t recorder::register_track(const track_info& info) {
  std::lock_guard<std::mutex> guard{mutex_};
  tracks_.push_back(info);
  return static_cast<std::uint32_t>(tracks_.size());
}

recorder::buffer* recorder::add_buffer() {
  std::lock_guard<std::mutex> guard{mutex_};
  if (frozen_ || !recording())
    return nullptr;
  buffers_.push_back(std::make_unique<buffer>());
  return buffers_.back().get();
}

void recorder::freeze() {
  std::lock_guard<std::mutex> guard{mutex_};
  if (frozen_)
    return;
  frozen_ = true;
  recording_.store(false);  // sequentially consistent: Note [recorders and threads]
  logging_.store(false);
  for (const auto& b : buffers_)
    while (b->writing.load())
      std::this_thread::yield();
  if (counted_) {
    counted_ = false;
    detail::observing_recorders.fetch_sub(1);
  }
}

bool recorder::frozen() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return frozen_;
}

std::vector<event> recorder::collect() const {
  std::vector<event> all;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    TROUPE_CHECK(frozen_, "collect() reads frozen buffers: call freeze() first");
    std::size_t total = 0;
    for (const auto& b : buffers_)
      total += b->size;
    all.reserve(total);
    for (const auto& b : buffers_)
      b->for_each([&all](const event& e) { all.push_back(e); });
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const event& a, const event& b) { return a.start_ns < b.start_ns; });
  return all;
}

std::vector<track_info> recorder::tracks() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return tracks_;
}

std::uint64_t recorder::dropped() const {
  std::lock_guard<std::mutex> guard{mutex_};
  TROUPE_CHECK(frozen_, "dropped() reads frozen buffers: call freeze() first");
  std::uint64_t total = 0;
  for (const auto& b : buffers_)
    total += b->dropped;
  return total;
}

// ---- the message log ----

std::string recorder::track_name(std::uint32_t id) const {
  std::lock_guard<std::mutex> guard{mutex_};
  return id == 0 || id > tracks_.size() ? std::string{"-"} : tracks_[id - 1].name;
}

bool recorder::matches(const event& e) const {
  const auto& f = filter_;
  const auto receiver = track_name(e.track);
  const auto sender = track_name(e.peer);
  if (!f.actor.empty() && receiver.find(f.actor) == std::string::npos &&
      sender.find(f.actor) == std::string::npos)
    return false;
  if (!f.kind.empty() && f.kind != e.name)
    return false;
  if (f.step >= 0 && f.step != e.step)
    return false;
  if (!f.any.empty() && receiver.find(f.any) == std::string::npos &&
      sender.find(f.any) == std::string::npos &&
      std::string{e.name}.find(f.any) == std::string::npos)
    return false;
  return true;
}

std::string recorder::describe(const event& handled) const {
  // "[%10.3f ms] %-16s -> %-16s %-10s", then the tags; names are never cut short.
  std::ostringstream line;
  line << '[' << std::fixed << std::setprecision(3) << std::setw(10)
       << static_cast<double>(handled.start_ns) / 1e6 << " ms] " << std::left << std::setw(16)
       << track_name(handled.peer) << " -> " << std::setw(16) << track_name(handled.track) << ' '
       << std::setw(10) << handled.name << std::setw(0);
  if (handled.step >= 0)
    line << ' ' << (handled.phase == 1 ? "eval" : "step") << ' ' << handled.step;
  if (handled.microbatch >= 0)
    line << " mb " << handled.microbatch;
  if (handled.replica >= 0)
    line << " r" << handled.replica;
  if (handled.bytes > 0)
    line << " (" << std::setprecision(1) << static_cast<double>(handled.bytes) / 1024.0 << " KiB)";
  return line.str();
}

void recorder::log_message(const event& handled) const {
  if (!logging() || !matches(handled))
    return;
  // One call, so lines of several threads never interleave (stdio locks the stream).
  std::fputs((describe(handled) + '\n').c_str(), stderr);
}

// ---- the Chrome Trace writer ----

void recorder::write(const std::string& path, const std::string& metadata) const {
  write_whole_file(path, json(metadata) + '\n', "the trace file");
}

std::string recorder::json(const std::string& metadata) const {
  TROUPE_CHECK(frozen(), "json() reads frozen buffers: call freeze() first");
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
    return track == 0 || track > all_tracks.size() ? pids["host"]
                                                   : pids[all_tracks[track - 1].device];
  };
  auto name_of = [&](std::uint32_t track) -> std::string {
    return track == 0 || track > all_tracks.size() ? "-" : all_tracks[track - 1].name;
  };

  // Note [writing a trace as it is made]
  // The text is what one JSON document of the whole trace would dump to (its keys sorted:
  // displayTimeUnit, otherData, traceEvents), but each event is built alone, appended and
  // dropped: a document of every event took about a kilobyte an event, which a simulated
  // ring over hundreds of replicas (millions of chunk jobs) could not hold.
  auto other = metadata.empty() ? nlohmann::json::object() : nlohmann::json::parse(metadata);
  other["dropped_events"] = dropped();
  nlohmann::json track_list = nlohmann::json::array();
  for (const auto& t : all_tracks)
    track_list.push_back({{"name", t.name},
                          {"kind", t.kind},
                          {"device", t.device},
                          {"replica", t.replica},
                          {"stage", t.stage},
                          {"layer", t.layer}});
  other["tracks"] = track_list;
  std::string text =
      R"({"displayTimeUnit":"ms","otherData":)" + other.dump() + R"(,"traceEvents":[)";
  bool first_event = true;
  auto add = [&](const nlohmann::json& e) {
    text += first_event ? "" : ",";
    first_event = false;
    text += e.dump();
  };
  for (std::size_t p = 0; p < devices.size(); ++p) {
    add({{"ph", "M"}, {"name", "process_name"}, {"pid", p}, {"args", {{"name", devices[p]}}}});
    add({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", p}, {"args", {{"sort_index", p}}}});
  }
  for (std::size_t i = 0; i < all_tracks.size(); ++i) {
    auto id = static_cast<std::uint32_t>(i + 1);
    add({{"ph", "M"},
         {"name", "thread_name"},
         {"pid", pid_of(id)},
         {"tid", id},
         {"args", {{"name", all_tracks[i].name}}}});
    // Streams first in each process, then actors in registration order.
    add({{"ph", "M"},
         {"name", "thread_sort_index"},
         {"pid", pid_of(id)},
         {"tid", id},
         {"args", {{"sort_index", all_tracks[i].kind == "stream" ? 0 : id}}}});
  }
  auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  // The fields of every event drawn on an actor's or a stream's track (the JSON objects
  // sort their keys, so the order they are set in does not show in the file).
  auto on_track = [&](const char* ph, const char* cat, const auto& e) {
    return nlohmann::json{{"ph", ph},       {"cat", cat},
                          {"name", e.name}, {"pid", pid_of(e.track)},
                          {"tid", e.track}, {"ts", us(e.start_ns)}};
  };
  // A complete event: a slice of time on the track.
  auto slice = [&](const char* cat, const auto& e, nlohmann::json args) {
    auto complete = on_track("X", cat, e);
    complete["dur"] = us(e.duration_ns);
    complete["args"] = std::move(args);
    return complete;
  };
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
        add(slice("handler", e, std::move(args)));
        if (e.flow != 0) {
          auto arrow_end = on_track("f", "message", e);
          arrow_end["bp"] = "e";
          arrow_end["id"] = e.flow;
          add(std::move(arrow_end));
        }
        break;
      case event_type::send: {
        auto arrow_start = on_track("s", "message", e);
        arrow_start["id"] = e.flow;
        arrow_start["args"] = {{"to", name_of(e.peer)}, {"bytes", e.bytes}};
        add(std::move(arrow_start));
        break;
      }
      case event_type::job:
        args["actor"] = name_of(e.peer);
        args["queued_us"] = us(e.value);
        add(slice("job", e, std::move(args)));
        break;
      case event_type::part:  // inside a fused job's slice on the same track
        args["actor"] = name_of(e.peer);
        args["in"] = name_of(static_cast<std::uint32_t>(e.value));
        add(slice("part", e, std::move(args)));
        break;
      case event_type::counter: {
        std::string counter = std::string{e.name} + " " + name_of(e.track);
        if (e.peer != 0)
          counter += " -> " + name_of(e.peer);
        add({{"ph", "C"},
             {"name", counter},
             {"pid", pid_of(e.track)},
             {"ts", us(e.start_ns)},
             {"args", {{"value", e.value}}}});
        break;
      }
      case event_type::marker:
        add({{"ph", "i"},
             {"s", "g"},
             {"cat", "marker"},
             {"name", std::string{e.name} + " " + std::to_string(e.step)},
             {"pid", pids["host"]},
             {"tid", 0},
             {"ts", us(e.start_ns)},
             {"args", {{"step", e.step}, {"epoch", e.value}}}});
        break;
    }
  }
  text += "]}";
  return text;
}

// ---- binding threads, and the calls actors and streams make ----

std::shared_ptr<recorder> bind_this_thread(std::shared_ptr<recorder> r) {
  auto& state = this_thread;
  if (state.owner != r)
    state.events = nullptr;
  std::swap(state.owner, r);
  return r;
}

recorder* this_thread_recorder() { return this_thread.owner.get(); }

thread_binding::thread_binding(std::shared_ptr<recorder> r)
    : previous_(bind_this_thread(std::move(r))) {}

thread_binding::~thread_binding() { bind_this_thread(std::move(previous_)); }

namespace detail {

bool bound_recording() noexcept {
  const auto* r = this_thread.owner.get();
  return r != nullptr && r->recording();
}

bool bound_logging() noexcept {
  const auto* r = this_thread.owner.get();
  return r != nullptr && r->logging();
}

}  // namespace detail

std::int64_t now_ns() {
  const auto* r = this_thread.owner.get();
  return r != nullptr ? r->now_ns() : steady_ns() - process_origin_ns;
}

std::uint64_t next_flow() {
  auto* r = this_thread.owner.get();
  return r != nullptr ? r->next_flow() : 0;
}

void record(const event& e) {
  auto& state = this_thread;
  auto* r = state.owner.get();
  if (r == nullptr || !r->recording())
    return;
  if (state.events == nullptr) {
    state.events = r->add_buffer();
    if (state.events == nullptr)
      return;  // frozen meanwhile
  }
  auto& b = *state.events;
  // Note [recorders and threads]: announce, then check, then append.
  b.writing.store(true);
  if (r->recording_.load()) {
    if (b.size < r->capacity_)
      b.append(e);
    else
      ++b.dropped;
  }
  b.writing.store(false, std::memory_order_release);
}

void log_message(const event& handled) {
  if (const auto* r = this_thread.owner.get())
    r->log_message(handled);
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
  current_handler_event = &event_;
  if (logging())
    log_message(event_);
}

handler_span::~handler_span() {
  if (current_handler_event == &event_)
    current_handler_event = nullptr;
  if (!active_ || !enabled())
    return;
  event_.duration_ns = now_ns() - event_.start_ns;
  record(event_);
}

bool current_handler(handler_tags& tags) {
  const auto* h = current_handler_event;
  if (h == nullptr)
    return false;
  tags.track = h->track;
  tags.step = h->step;
  tags.microbatch = h->microbatch;
  tags.replica = h->replica;
  tags.phase = h->phase;
  return true;
}

}  // namespace troupe::trace
