// trace_file.cpp: Chrome Trace Event JSON (as docs/reference/trace-format.md describes it)
// into records.
#include "runtime/trace_tools/trace_file.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/base/json_input.hpp"  // json_too_deep_at, describe_json_value
#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using json = nlohmann::json;

// The largest magnitude a number of a trace may have: 1e18 (microseconds: 31,000 years).
// Below 2^63, so that every count converts to an integer, and far from the double range,
// so that sums of times stay finite (Note [input limits] in runtime/base/limits.hpp).
constexpr double max_trace_number = 1e18;
// The most replicas, stages or micro-batches otherData may state (a run's are far fewer).
constexpr std::int64_t max_trace_count = std::int64_t{1} << 20;

// Reading one event: errors name the file, the event's index and the field.
struct event_reader {
  const std::string& path;
  std::size_t index;
  const json& event;

  [[noreturn]] void fail(const std::string& what) const {
    throw user_error(path + ": traceEvents[" + std::to_string(index) + "]: " + what);
  }
  const json* field(const json& object, const char* key) const {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  double number(const json& object, const char* key, double otherwise) const {
    auto* value = field(object, key);
    if (!value)
      return otherwise;
    if (!value->is_number())
      fail(std::string{"\""} + key + "\" should be a number, found " + describe_json_value(*value));
    // A number past the double range parses as infinity (or is refused by the parser);
    // every later sum and conversion assumes finite times and counts.
    const auto x = value->get<double>();
    if (!std::isfinite(x) || std::abs(x) > max_trace_number)
      fail(std::string{"\""} + key + "\" is " + describe_json_value(*value) +
           ", outside the range of a trace's numbers (magnitude at most 1e18)");
    return x;
  }
  std::string text(const json& object, const char* key) const {
    auto* value = field(object, key);
    if (!value)
      return {};
    if (!value->is_string())
      fail(std::string{"\""} + key + "\" should be a string, found " + describe_json_value(*value));
    return value->get<std::string>();
  }
  /// An index that troupe writes as an int32 (a micro-batch, a replica): -1 (none) up to
  /// the 2^20 otherData allows for their counts.
  std::int32_t index_in(const json& object, const char* key) const {
    constexpr double most = double{1 << 20};
    const auto x = number(object, key, -1);
    if (x < -1 || x > most)
      fail(std::string{"\""} + key + "\" is " + describe_json_value(*field(object, key)) +
           ", outside -1 to " + std::to_string(1 << 20));
    return static_cast<std::int32_t>(x);
  }
  const json& args() const {
    static const json empty = json::object();
    auto* value = field(event, "args");
    if (!value)
      return empty;
    if (!value->is_object())
      fail("\"args\" should be an object, found " + describe_json_value(*value));
    return *value;
  }
};

std::int64_t to_int(double x) { return static_cast<std::int64_t>(x); }

// A number of otherData as an integer, when it is one within the range of a trace's
// numbers; else `otherwise`.
std::int64_t small_integer(const json& object, const char* key, std::int64_t otherwise) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number())
    return otherwise;
  const auto x = it->get<double>();
  return std::isfinite(x) && std::abs(x) <= max_trace_number ? static_cast<std::int64_t>(x)
                                                             : otherwise;
}

void read_other_data(const json& other, trace_file& out) {
  auto integer = [&](const char* key, std::int64_t otherwise) {
    return small_integer(other, key, otherwise);
  };
  auto text = [&](const json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
  };
  auto small = [&](const json& object, const char* key) {
    const auto x = small_integer(object, key, -1);
    return x >= std::numeric_limits<std::int32_t>::min() &&
                   x <= std::numeric_limits<std::int32_t>::max()
               ? static_cast<std::int32_t>(x)
               : -1;
  };
  // The tools loop over stages (and size tables by them): a count no run could have is
  // refused rather than looped over.
  auto count = [&](const char* key) {
    const auto value = std::max<std::int64_t>(1, integer(key, 1));
    if (value > max_trace_count)
      throw user_error(out.path + ": otherData." + key + " is " + std::to_string(value) +
                       ", more than the limit of " + std::to_string(max_trace_count) +
                       "; expected a trace written by troupe run --trace");
    return value;
  };
  out.replicas = count("replicas");
  out.stages = count("stages");
  out.microbatches = count("microbatches");
  out.virtual_stages = count("virtual_stages");
  if (out.stages % out.virtual_stages != 0)
    throw user_error(out.path + ": otherData.virtual_stages " +
                     std::to_string(out.virtual_stages) + " does not divide stages " +
                     std::to_string(out.stages) + "; expected a trace written by troupe run --trace");
  out.dropped_events = integer("dropped_events", 0);
  out.schedule = text(other, "schedule");
  out.config = text(other, "config");
  for (const auto& t : other.at("tracks")) {
    if (!t.is_object())
      continue;
    out.tracks.push_back({text(t, "name"), text(t, "kind"), text(t, "device"), small(t, "replica"),
                          small(t, "stage"), small(t, "layer")});
  }
  for (std::size_t i = 0; i < out.tracks.size(); ++i)
    out.track_index.emplace(out.tracks[i].name, i);
  auto wires = other.find("wires");
  if (wires != other.end() && wires->is_array())
    for (const auto& w : *wires) {
      if (!w.is_object())
        continue;
      out.wires.push_back(
          {text(w, "from"), text(w, "to"), text(w, "kind"), small_integer(w, "capacity", 0)});
    }
}

}  // namespace

int node_of_device(const std::string& device) {
  if (device.compare(0, 4, "node") != 0)
    return 0;
  std::size_t end = 4;
  while (end < device.size() && end < 4 + 9 &&
         std::isdigit(static_cast<unsigned char>(device[end])))
    ++end;
  if (end == 4 || end >= device.size() || (device[end] != '/' && device[end] != ' '))
    return 0;
  return std::stoi(device.substr(4, end - 4));  // at most 9 digits: an int
}

const trace_track* trace_file::find_track(const std::string& name) const {
  if (track_index.size() == tracks.size()) {  // as parse_trace leaves it
    auto found = track_index.find(name);
    return found == track_index.end() ? nullptr : &tracks[found->second];
  }
  for (const auto& t : tracks)
    if (t.name == name)
      return &t;
  return nullptr;
}

namespace {

// Note [reading a trace as it streams]
// A trace of a large simulated run (a ring over hundreds of replicas) has tens of millions
// of events; as one nlohmann document it took several times the text's size again and did
// not fit in memory. So the text is read through nlohmann's SAX interface: everything but
// the elements of "traceEvents" is built as a document (otherData, small), and each event
// is built alone, handed to `take` with its index and dropped. The values and errors are
// those of the whole document's parse.
class event_stream final : public nlohmann::json_sax<json> {
 public:
  /// `text`: the document, for naming the character a syntax error stops at.
  event_stream(std::function<void(const json&, std::size_t)> take, std::string_view text)
      : take_(std::move(take)), begin_(text.data()), end_(text.data() + text.size()) {}

  json& root() { return root_; }
  bool saw_events() const { return saw_events_; }
  // The parser's complaint, when parse_error was called.
  std::string error;

  bool null() override { return value(json{}); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override { return value(json(std::move(v))); }
  bool binary(binary_t& v) override { return value(json::binary(std::move(v))); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    stack_.push_back(put(json::object()));
    return true;
  }
  bool start_array(std::size_t) override {
    // The top-level object's first "traceEvents" array: its elements stream.
    if (stack_.size() == 1 && stack_.back() == &root_ && root_.is_object() &&
        key_ == "traceEvents" && !saw_events_) {
      saw_events_ = true;
      stack_.push_back(nullptr);
      return true;
    }
    stack_.push_back(put(json::array()));
    return true;
  }
  bool end_object() override { return end(); }
  bool end_array() override { return end(); }
  bool parse_error(std::size_t byte, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // A number past the double range ("1e400") is nlohmann's out_of_range: its message
    // names the number (cut short: it may be long); a syntax error, its byte.
    error = e.id == 406 ? ": not JSON: " + quote_user_text(e.what(), 160)
                        : ": not JSON (" + json_error_place(begin_, end_, byte).substr(1) + ")";
    return false;
  }

 private:
  // Where a new value goes: the root, the event being built, or its container.
  json* put(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* parent = stack_.back();
    if (parent == nullptr) {
      event_ = std::move(v);
      return &event_;
    }
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    auto& slot = (*parent)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json v) {
    put(std::move(v));
    if (!stack_.empty() && stack_.back() == nullptr)
      emit();
    return true;
  }
  bool end() {
    const bool events_closed = stack_.back() == nullptr;
    stack_.pop_back();
    if (!events_closed && !stack_.empty() && stack_.back() == nullptr)
      emit();
    return true;
  }
  void emit() {
    take_(event_, index_++);
    event_ = json{};
  }

  std::function<void(const json&, std::size_t)> take_;
  const char* begin_;
  const char* end_;
  json root_;
  json event_;
  std::vector<json*> stack_;  // nullptr: the "traceEvents" array
  string_t key_;
  bool saw_events_ = false;
  std::size_t index_ = 0;
};

// A complete event (ph "X") at `ts` of `category` ("job", "part", "handler") as a span.
trace_span read_span(event_reader& read, const json& e, const json& args, double ts,
                     const std::string& category) {
  trace_span span;
  span.name = read.text(e, "name");
  span.start_us = ts;
  span.duration_us = std::max(0.0, read.number(e, "dur", 0));
  span.step = to_int(read.number(args, "step", -1));
  span.microbatch = read.index_in(args, "microbatch");
  span.replica = read.index_in(args, "replica");
  span.eval = read.text(args, "phase") == "eval";
  span.bytes = to_int(read.number(args, "bytes", 0));
  if (category == "job" || category == "part") {
    span.kind = job_kind_of(span.name);
    span.actor = read.text(args, "actor");
  }
  if (category == "job") {
    span.queued_us = std::max(0.0, read.number(args, "queued_us", 0));
  } else if (category == "part") {
    span.from = read.text(args, "in");
  } else if (category == "handler") {
    span.from = read.text(args, "from");
    span.actor = read.text(args, "to");
    span.flow = static_cast<std::uint64_t>(std::max(0.0, read.number(args, "flow", 0)));
  }
  return span;
}

}  // namespace

trace_file parse_trace(const std::string& text, const std::string& path) {
  // nlohmann parses deep nesting without recursion, but its dump() and destructor recurse
  // once per level: refuse deep nesting before it is built (Note [input limits]).
  const auto too_deep = json_too_deep_at(text.data(), text.data() + text.size());
  if (too_deep != text.size())
    throw user_error(path + ": arrays and objects nest more than " +
                     std::to_string(max_json_depth) + " levels deep at byte " +
                     std::to_string(too_deep) +
                     "; expected a trace written by troupe run --trace (it nests 4 deep)");
  trace_file out;
  out.path = path;
  // Events name their process (device) and thread (track) by number; the metadata events
  // that name them may come anywhere, so names are given once all are read.
  struct ids {
    std::int64_t pid;
    std::int64_t tid;
  };
  std::map<std::int64_t, std::string> process_names;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names;
  std::vector<ids> job_ids, handler_ids, part_ids;
  std::map<std::uint64_t, ids> send_ids;
  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  // The first event that is wrong, thrown once the document is known to be a trace at all.
  std::exception_ptr wrong_event;
  auto take = [&](const json& e, std::size_t i) {
    if (wrong_event)
      return;
    try {
      event_reader read{path, i, e};
      if (!e.is_object())
        read.fail("an event should be an object, found " + describe_json_value(e));
      auto ph = read.text(e, "ph");
      auto pid = to_int(read.number(e, "pid", 0));
      if (ph == "M") {
        auto name = read.text(read.args(), "name");
        if (read.text(e, "name") == "process_name")
          process_names[pid] = name;
        else if (read.text(e, "name") == "thread_name")
          thread_names[{pid, to_int(read.number(e, "tid", 0))}] = name;
        return;
      }
      double ts = read.number(e, "ts", std::numeric_limits<double>::quiet_NaN());
      if (ts != ts)
        read.fail("\"ts\" is missing (every event but metadata has a timestamp)");
      auto tid = to_int(read.number(e, "tid", 0));
      const auto& args = read.args();
      first = std::min(first, ts);
      last = std::max(last, ts);
      if (ph == "X") {
        const auto category = read.text(e, "cat");
        auto span = read_span(read, e, args, ts, category);
        last = std::max(last, span.end_us());
        if (category == "job") {
          out.jobs.push_back(std::move(span));
          job_ids.push_back({pid, tid});
        } else if (category == "part") {
          out.parts.push_back(std::move(span));
          part_ids.push_back({pid, tid});
        } else if (category == "handler") {
          out.handlers.push_back(std::move(span));
          handler_ids.push_back({pid, tid});
        }
      } else if (ph == "s") {
        auto id = read.number(e, "id", 0);
        if (id > 0) {
          out.sends[static_cast<std::uint64_t>(id)] = {ts, std::string{},
                                                       to_int(read.number(args, "bytes", -1))};
          send_ids[static_cast<std::uint64_t>(id)] = {pid, tid};
        }
      } else if (ph == "C") {
        out.counters[read.text(e, "name")].push_back({ts, read.number(args, "value", 0)});
      } else if (ph == "i" && read.text(e, "cat") == "marker") {
        out.markers.push_back({read.text(e, "name"), ts, to_int(read.number(args, "step", -1))});
      }
    } catch (const user_error&) {
      wrong_event = std::current_exception();
    }
  };
  if (const auto utf16 = utf16_refusal(std::string_view{text}.substr(0, 4)); !utf16.empty())
    throw user_error(path + ": " + utf16 + "; expected a trace written by troupe run --trace");
  event_stream stream{take, text};
  bool parsed = false;
  try {
    parsed = json::sax_parse(text, &stream);
  } catch (const json::exception& e) {
    throw user_error(path + ": not JSON: " + quote_user_text(e.what(), 160) +
                     "; expected a trace written by troupe run --trace");
  }
  if (!parsed)
    throw user_error(path + stream.error + "; expected a trace written by troupe run --trace");
  const auto& root = stream.root();
  auto other = root.is_object() ? root.find("otherData") : root.end();
  if (!root.is_object() || !stream.saw_events() || other == root.end() || !other->is_object() ||
      !other->contains("tracks") || !other->at("tracks").is_array())
    throw user_error(path +
                     ": not a troupe trace: expected an object with a \"traceEvents\" array and an "
                     "\"otherData\" object with \"tracks\" (written by troupe run --trace)");
  read_other_data(*other, out);
  if (wrong_event)
    std::rethrow_exception(wrong_event);

  for (const auto& [pid, name] : process_names)
    out.devices.push_back(name);
  auto device_of = [&](const ids& at) {
    auto device = process_names.find(at.pid);
    return device == process_names.end() ? std::to_string(at.pid) : device->second;
  };
  auto track_of = [&](const ids& at) {
    auto thread = thread_names.find({at.pid, at.tid});
    return thread == thread_names.end() ? std::string{} : thread->second;
  };
  for (std::size_t i = 0; i < out.jobs.size(); ++i) {
    out.jobs[i].device = device_of(job_ids[i]);
    out.jobs[i].track = track_of(job_ids[i]);
  }
  for (std::size_t i = 0; i < out.parts.size(); ++i) {
    out.parts[i].device = device_of(part_ids[i]);
    out.parts[i].track = track_of(part_ids[i]);
  }
  for (std::size_t i = 0; i < out.handlers.size(); ++i) {
    auto& span = out.handlers[i];
    span.device = device_of(handler_ids[i]);
    span.track = track_of(handler_ids[i]);
    if (span.actor.empty())
      span.actor = span.track;
  }
  for (auto& [id, send] : out.sends)
    send.from = track_of(send_ids[id]);

  if (first > last)
    first = last = 0;
  out.first_us = first;
  out.last_us = last;
  auto by_start = [](const trace_span& a, const trace_span& b) { return a.start_us < b.start_us; };
  std::stable_sort(out.jobs.begin(), out.jobs.end(), by_start);
  std::stable_sort(out.handlers.begin(), out.handlers.end(), by_start);
  std::stable_sort(out.parts.begin(), out.parts.end(), by_start);
  for (auto& [name, samples] : out.counters)
    std::stable_sort(samples.begin(), samples.end(),
                     [](const trace_sample& a, const trace_sample& b) { return a.time_us < b.time_us; });
  return out;
}

trace_file load_trace(const std::string& path) {
  const auto text = read_file_capped(path, limits::max_trace_bytes, "the trace file",
                                     "; write one with troupe run CONFIG.toml --trace FILE");
  return parse_trace(text, path);
}

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      auto i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end]))
        ++i_end;
      while (j_end < b.size() && digit(b[j_end]))
        ++j_end;
      // Compare digit runs by value: shorter (without leading zeros) is smaller.
      auto a_run = a.substr(i, i_end - i), b_run = b.substr(j, j_end - j);
      a_run.erase(0, std::min(a_run.find_first_not_of('0'), a_run.size()));
      b_run.erase(0, std::min(b_run.find_first_not_of('0'), b_run.size()));
      if (a_run.size() != b_run.size())
        return a_run.size() < b_run.size();
      if (a_run != b_run)
        return a_run < b_run;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j])
        return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace troupe
