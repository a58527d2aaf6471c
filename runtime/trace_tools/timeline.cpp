// timeline.cpp: SVG and HTML schedule pictures of a trace.
#include "runtime/trace_tools/timeline.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/base/xml_text.hpp"
#include "runtime/trace_tools/critical_path.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// Layout, px.
constexpr double label_width = 150;  // row labels on the left
constexpr double right_margin = 20;
constexpr double title_height = 36;
constexpr double job_height = 28;
constexpr double credit_height = 5;  // the credit-wait band under a row's jobs
constexpr double row_gap = 10;
constexpr double axis_height = 34;
constexpr double row_height = job_height + credit_height + row_gap;
constexpr double label_min_width = 14;  // narrowest job that gets its micro-batch number
constexpr double node_header_height = 20;  // above each node's rows, in a multi-node trace

// The kinds of job the timeline gives a colour of their own (the legend's).
bool coloured(job_kind kind) {
  return kind == job_kind::forward || kind == job_kind::backward ||
         kind == job_kind::backward_weight || kind == job_kind::loss ||
         kind == job_kind::update || kind == job_kind::reduce || kind == job_kind::copy;
}

// A class name from a job name: letters, digits and '-' only, so CSS and tests can use it;
// kinds this file has no colour for also get "other".
std::string css_class(const trace_span& job) {
  std::string out;
  for (char c : job.name)
    out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  if (coloured(job.kind))
    return out;
  return (out.empty() ? "job" : out) + " other";
}

struct row {
  std::string device;
  std::string label;  // second line: "stage 1", "r0 stage 1"
  int node = 0;
  double y = 0;
};

std::vector<row> make_rows(const trace_file& trace) {
  std::set<std::string> used;
  for (const auto& t : trace.tracks)
    if (t.kind == "stream")
      used.insert(t.device);
  for (const auto& job : trace.jobs)
    used.insert(job.device);
  std::vector<std::string> order = trace.devices;
  for (const auto& d : used)
    if (std::find(order.begin(), order.end(), d) == order.end())
      order.push_back(d);
  std::vector<row> rows;
  for (const auto& device : order) {
    if (!used.count(device))
      continue;
    std::set<std::int32_t> stages, replicas;
    for (const auto& t : trace.tracks)
      if (t.kind == "layer" && t.device == device) {
        if (t.stage >= 0)
          stages.insert(t.stage);
        if (t.replica >= 0)
          replicas.insert(t.replica);
      }
    std::string label;
    auto list = [](const std::set<std::int32_t>& values) {
      std::string text;
      for (auto v : values)
        text += (text.empty() ? "" : ",") + std::to_string(v);
      return text;
    };
    if (trace.replicas > 1 && !replicas.empty())
      label += (replicas.size() > 1 ? "replicas " : "replica ") + list(replicas);
    if (trace.stages > 1 && !stages.empty())
      label += std::string{label.empty() ? "" : ", "} + (stages.size() > 1 ? "stages " : "stage ") +
               list(stages);
    rows.push_back({device, label, node_of_device(device), 0});
  }
  // Each node's rows together, under a band naming it, when the trace has several nodes.
  std::stable_sort(rows.begin(), rows.end(),
                   [](const row& a, const row& b) { return a.node < b.node; });
  const bool several_nodes = !rows.empty() && rows.front().node != rows.back().node;
  double y = title_height;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (several_nodes && (i == 0 || rows[i].node != rows[i - 1].node))
      y += node_header_height;
    rows[i].y = y;
    y += row_height;
  }
  return rows;
}

// Intervals [start, end) in which counter `samples` is at least `capacity`.
std::vector<std::pair<double, double>> saturated(const std::vector<trace_sample>& samples,
                                                 double capacity, double trace_end) {
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].value < capacity)
      continue;
    double end = i + 1 < samples.size() ? samples[i + 1].time_us : trace_end;
    if (!out.empty() && out.back().second >= samples[i].time_us)
      out.back().second = std::max(out.back().second, end);
    else
      out.emplace_back(samples[i].time_us, end);
  }
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span`.
double tick_spacing(double span, int ticks) {
  double raw = span / ticks;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double nice : {1.0, 2.0, 5.0})
    if (nice * magnitude >= raw)
      return nice * magnitude;
  return 10 * magnitude;
}

}  // namespace

timeline_window choose_window(const trace_file& trace, const timeline_options& options) {
  std::int64_t lowest = -1, highest = -1;
  for (const auto& job : trace.jobs)
    if (!job.eval && job.step >= 0) {
      lowest = lowest < 0 ? job.step : std::min(lowest, job.step);
      highest = std::max(highest, job.step);
    }
  timeline_window window;
  std::int64_t first = options.first_step, last = options.last_step;
  if (first < 0) {
    // The default: steps 1 to 3 (step 0 warms up), if the run got that far.
    if (lowest < 0 || highest < 1) {
      window.start_us = trace.first_us;
      window.end_us = trace.last_us;
      return window;
    }
    first = std::max<std::int64_t>(1, lowest);
    last = std::min<std::int64_t>(3, highest);
  }
  bool found = false;
  for (const auto& job : trace.jobs)
    if (!job.eval && job.step >= first && job.step <= last) {
      window.start_us = found ? std::min(window.start_us, job.start_us) : job.start_us;
      window.end_us = found ? std::max(window.end_us, job.end_us()) : job.end_us();
      found = true;
    }
  if (!found)
    throw user_error(trace.path + ": no training steps " + std::to_string(first) + " to " +
                     std::to_string(last) + " in the trace" +
                     (lowest < 0 ? std::string{" (it has no training steps)"}
                                 : " (it has steps " + std::to_string(lowest) + " to " +
                                       std::to_string(highest) + ")"));
  window.first_step = first;
  window.last_step = last;
  return window;
}

void parse_step_range(const std::string& text, timeline_options& options) {
  auto bad = [&] {
    return user_error("--steps " + quote_user_text(text) + ": expected A:B, two step numbers with A <= B (e.g. 1:3)");
  };
  auto colon = text.find(':');
  auto first = text.substr(0, colon);
  auto last = colon == std::string::npos ? first : text.substr(colon + 1);
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 15 || s.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    return std::stoll(s);
  };
  options.first_step = number(first);
  options.last_step = number(last);
  if (options.first_step > options.last_step)
    throw bad();
}

// One timeline picture being drawn: the window of time shown, the rows, the scale, and
// the SVG so far; each part of the picture is a method, drawn in render order.
class timeline_canvas {
 public:
  timeline_canvas(const trace_file& trace, const timeline_options& options)
      : trace_(trace),
        options_(options),
        window_(choose_window(trace, options)),
        rows_(make_rows(trace)),
        width_(std::max(options.width, label_width + right_margin + 100)),
        plot_width_(width_ - label_width - right_margin),
        plot_bottom_(rows_.empty() ? title_height : rows_.back().y + row_height),
        height_(plot_bottom_ + axis_height),
        // A trace without timed events still gets a sensible (1 ms) axis.
        span_(window_.end_us > window_.start_us ? window_.end_us - window_.start_us : 1000) {}

  std::string draw() {
    draw_header();
    draw_node_bands();
    draw_axis_and_rows();
    draw_markers();
    find_chunks_and_critical_paths();
    draw_jobs();
    draw_credit_waits();
    draw_critical_hops();
    svg_ += "</svg>\n";
    return std::move(svg_);
  }

 private:
  double x_of(double us) const { return label_width + (us - window_.start_us) / span_ * plot_width_; }
  const row* row_of(const std::string& device) const {
    for (const auto& r : rows_)
      if (r.device == device)
        return &r;
    return nullptr;
  }

  void draw_header();
  void draw_node_bands();
  void draw_axis_and_rows();
  void draw_markers();
  void find_chunks_and_critical_paths();
  void draw_jobs();
  void draw_credit_waits();
  void draw_critical_hops();

  const trace_file& trace_;
  const timeline_options& options_;
  const timeline_window window_;
  const std::vector<row> rows_;
  const double width_, plot_width_, plot_bottom_, height_, span_;
  std::map<std::string, bool> odd_chunk_;           // by actor (interleaved stages)
  std::map<std::size_t, std::int64_t> critical_;    // job -> its step
  std::vector<std::vector<std::size_t>> paths_;     // critical jobs, in path order per step
  std::string svg_;  // the picture so far
};

void timeline_canvas::draw_header() {
  svg_ = string_printf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width_, height_, width_, height_);
  svg_ += "<defs><pattern id=\"credit-hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbdada\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d62728\" stroke-width=\"3\"/>"
         "</pattern></defs>\n";
  svg_ +=
      "<style>rect.forward{fill:#4e79a7}rect.backward{fill:#59a14f}"
      "rect.backward-weight{fill:#b07aa1}rect.loss{fill:#8c8c8c}"
      "rect.update{fill:#6b6b6b}rect.reduce{fill:#a5a5a5}rect.copy{fill:#c8c8c8}"
      "rect.other{fill:#b4b4b4}rect.eval{opacity:0.4}rect.credit-wait{fill:url(#credit-hatch)}"
      "rect.forward.odd-chunk{fill:#2a4d73}rect.backward.odd-chunk{fill:#356b2f}"
      "g.jobs rect.critical{stroke:#d62728;stroke-width:2.5}"
      "line.critical-hop{stroke:#d62728;stroke-width:1.5}"
      "g.jobs "
      "rect{stroke:#fff;stroke-width:0.5}text.mb{fill:#fff;font-size:10px;pointer-events:none}</"
      "style>\n";
  std::string title = "troupe schedule";
  if (window_.first_step >= 0)
    title += window_.first_step == window_.last_step
                 ? ", step " + std::to_string(window_.first_step)
                 : ", steps " + std::to_string(window_.first_step) + " to " +
                       std::to_string(window_.last_step);
  if (trace_.stages > 1)
    title += string_printf(" (P = %lld%s, M = %lld%s%s)",
                    static_cast<long long>(trace_.stages / trace_.virtual_stages),
                    trace_.virtual_stages > 1
                        ? string_printf(", v = %lld", static_cast<long long>(trace_.virtual_stages)).c_str()
                        : "",
                    static_cast<long long>(trace_.microbatches), trace_.schedule.empty() ? "" : ", ",
                    trace_.schedule.c_str());
  svg_ += string_printf("<text x=\"%.1f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
                label_width, xml_text(title).c_str());
}

void timeline_canvas::draw_node_bands() {
  // Node bands under everything: each node's rows on a shaded band with its name above.
  if (!rows_.empty() && rows_.front().node != rows_.back().node) {
    svg_ += "<g class=\"nodes\">\n";
    for (std::size_t i = 0; i < rows_.size();) {
      std::size_t j = i;
      while (j < rows_.size() && rows_[j].node == rows_[i].node)
        ++j;
      const double top = rows_[i].y - node_header_height;
      const double bottom = rows_[j - 1].y + row_height - row_gap / 2;
      svg_ += string_printf(
          "<rect class=\"node\" data-node=\"%d\" x=\"0\" y=\"%.1f\" width=\"%.0f\" "
          "height=\"%.1f\" fill=\"%s\"/><line x1=\"0\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
          "stroke=\"#777\"/><text x=\"8\" y=\"%.1f\" font-weight=\"bold\" "
          "fill=\"#444\">node%d%s</text>\n",
          rows_[i].node, top, width_, bottom - top, rows_[i].node % 2 ? "#f1f4f8" : "#fafafa", top,
          width_, top, top + 14, rows_[i].node, rows_[i].node == 0 ? " (coordinator)" : "");
      i = j;
    }
    svg_ += "</g>\n";
  }
}

void timeline_canvas::draw_axis_and_rows() {
  // Axis and grid first, so that jobs draw over the grid lines.
  const double start_ms = window_.start_us / 1000, end_ms = window_.start_us / 1000 + span_ / 1000;
  const double tick = tick_spacing(span_ / 1000, 10);
  const int decimals = tick >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(tick) - 1e-9));
  svg_ += "<g class=\"axis\">\n";
  svg_ += string_printf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                label_width, plot_bottom_, label_width + plot_width_, plot_bottom_);
  // Ticks counted by an integer, never by adding tick to t: far from 0 (a large timestamp)
  // t + tick can round back to t and the loop would never end (Note [input limits]).
  const double first_tick = std::ceil(start_ms / tick - 1e-9);
  const double tick_count = std::floor((end_ms + 1e-9 * tick) / tick) - first_tick + 1;
  for (int i = 0; i < std::min(tick_count, 100.0); ++i) {
    double t = (first_tick + i) * tick;
    if (std::abs(t) < 1e-6 * tick)
      t = 0;  // not "-0.0"
    double x = x_of(t * 1000);
    svg_ += string_printf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>\n",
                  x, title_height - 4, x, plot_bottom_ + 4, x, plot_bottom_ + 17, decimals, t);
  }
  svg_ += string_printf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">ms since the trace began</text>\n",
                label_width + plot_width_, plot_bottom_ + 31);
  svg_ += "</g>\n<g class=\"rows\">\n";
  for (const auto& r : rows_) {
    svg_ += string_printf("<text x=\"8\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n", r.y + 13,
                  xml_text(r.device).c_str());
    if (!r.label.empty())
      svg_ += string_printf("<text x=\"8\" y=\"%.1f\" fill=\"#555\">%s</text>\n", r.y + 27,
                    xml_text(r.label).c_str());
  }
}

void timeline_canvas::draw_markers() {
  svg_ += "</g>\n<g class=\"markers\">\n";
  for (const auto& m : trace_.markers)
    if (m.time_us >= window_.start_us && m.time_us <= window_.end_us) {
      double x = x_of(m.time_us);
      svg_ += string_printf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" "
                    "stroke-dasharray=\"3,3\"><title>%s at %.3f ms</title></line>\n",
                    x, title_height - 4, x, plot_bottom_, xml_text(m.name).c_str(), m.time_us / 1000);
    }
}

void timeline_canvas::find_chunks_and_critical_paths() {
  // Interleaved stages: a device's odd chunks (stage / P odd) in darker shades, as in
  // Megatron's figure, so a micro-batch's two visits to a device tell apart.
  if (trace_.virtual_stages > 1)
    for (const auto& t : trace_.tracks)
      if (t.stage >= 0)
        odd_chunk_[t.name] = (t.stage / (trace_.stages / trace_.virtual_stages)) % 2 == 1;
  // Jobs on the shown steps' critical paths_, in path order per step.
  if (options_.critical_path) {
    for (const auto& step : explain_trace(trace_).steps) {
      if (step.start_us + step.time_us <= window_.start_us || step.start_us >= window_.end_us)
        continue;
      paths_.emplace_back();
      for (const auto& piece : step.path)
        if (piece.kind == path_kind::job && piece.job >= 0) {
          critical_[static_cast<std::size_t>(piece.job)] = step.step;
          paths_.back().push_back(static_cast<std::size_t>(piece.job));
        }
    }
  }
}

void timeline_canvas::draw_jobs() {
  svg_ += "</g>\n<g class=\"jobs\">\n";
  for (const auto& job : trace_.jobs) {
    if (job.end_us() <= window_.start_us || job.start_us >= window_.end_us)
      continue;
    const row* r = row_of(job.device);
    if (!r)
      continue;
    double x0 = x_of(std::max(job.start_us, window_.start_us));
    double x1 = x_of(std::min(job.end_us(), window_.end_us));
    double w = std::max(x1 - x0, 0.5);  // a very short job stays visible as a hairline
    std::string kind = css_class(job);
    if (auto found = odd_chunk_.find(job.actor); found != odd_chunk_.end() && found->second)
      kind += " odd-chunk";
    std::string details = job.name + " by " + (job.actor.empty() ? "?" : job.actor);
    if (job.step >= 0)
      details += string_printf(", %s %lld", job.eval ? "eval" : "step", static_cast<long long>(job.step));
    if (job.microbatch >= 0)
      details += string_printf(", micro-batch %d", job.microbatch);
    if (job.replica >= 0)
      details += string_printf(", replica %d", job.replica);
    details += string_printf(": %.3f ms from %.3f ms", job.duration_us / 1000, job.start_us / 1000);
    if (job.queued_us > 0)
      details += string_printf(", waited %.3f ms for the device", job.queued_us / 1000);
    if (job.bytes > 0)
      details += string_printf(", %lld bytes", static_cast<long long>(job.bytes));
    const auto on_path = critical_.find(static_cast<std::size_t>(&job - trace_.jobs.data()));
    if (on_path != critical_.end()) {
      kind += " critical";
      details += string_printf("; on the critical path of step %lld",
                               static_cast<long long>(on_path->second));
    }
    svg_ += string_printf("<rect class=\"%s%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                  "data-step=\"%lld\" data-microbatch=\"%d\" data-actor=\"%s\"><title>%s</title></rect>\n",
                  kind.c_str(), job.eval ? " eval" : "", x0, r->y, w, job_height,
                  static_cast<long long>(job.step), job.microbatch, xml_text(job.actor).c_str(),
                  xml_text(details).c_str());
    if ((job.kind == job_kind::forward || job.kind == job_kind::backward ||
         job.kind == job_kind::backward_weight) &&
        job.microbatch >= 0 && w >= label_min_width)
      svg_ += string_printf("<text class=\"mb\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n",
                    x0 + w / 2, r->y + job_height / 2 + 4, job.microbatch);
  }
}

void timeline_canvas::draw_credit_waits() {
  svg_ += "</g>\n<g class=\"credit-waits\">\n";
  for (const auto& [name, samples] : trace_.counters) {
    const std::string prefix = "credits ";
    auto arrow = name.find(" -> ");
    if (name.compare(0, prefix.size(), prefix) != 0 || arrow == std::string::npos)
      continue;
    auto sender = name.substr(prefix.size(), arrow - prefix.size());
    auto receiver = name.substr(arrow + 4);
    std::int64_t capacity = 0;
    for (const auto& w : trace_.wires)
      if (w.from == sender && w.to == receiver && w.capacity > 0 &&
          (capacity == 0 || w.kind == "activations"))
        capacity = w.capacity;
    const auto* track = trace_.find_track(sender);
    const row* r = track ? row_of(track->device) : nullptr;
    if (capacity <= 0 || !r)
      continue;
    for (auto [start, end] : saturated(samples, static_cast<double>(capacity), trace_.last_us)) {
      start = std::max(start, window_.start_us);
      end = std::min(end, window_.end_us);
      if (end <= start)
        continue;
      double x0 = x_of(start), x1 = x_of(end);
      svg_ += string_printf("<rect class=\"credit-wait\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                    "height=\"%.1f\" data-wire=\"%s\"><title>%s -&gt; %s: all %lld credits in use "
                    "for %.3f ms from %.3f ms (the sender could not send more)</title></rect>\n",
                    x0, r->y + job_height, std::max(x1 - x0, 0.5), credit_height,
                    xml_text(sender + " -> " + receiver).c_str(), xml_text(sender).c_str(),
                    xml_text(receiver).c_str(), static_cast<long long>(capacity),
                    (end - start) / 1000, start / 1000);
    }
  }
  svg_ += "</g>\n";
}

void timeline_canvas::draw_critical_hops() {
  if (!paths_.empty()) {
    svg_ += "<g class=\"critical-path\">\n";
    for (const auto& path : paths_)
      for (std::size_t k = 1; k < path.size(); ++k) {
        const auto& a = trace_.jobs[path[k - 1]];
        const auto& b = trace_.jobs[path[k]];
        const row* ra = row_of(a.device);
        const row* rb = row_of(b.device);
        if (!ra || !rb || a.device == b.device)
          continue;  // on one row the outlines show the path
        const double from = std::clamp(a.end_us(), window_.start_us, window_.end_us);
        const double to = std::clamp(b.start_us, window_.start_us, window_.end_us);
        svg_ += string_printf(
            "<line class=\"critical-hop\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>\n",
            x_of(from), ra->y + job_height / 2, x_of(to), rb->y + job_height / 2);
      }
    svg_ += "</g>\n";
  }
}

std::string render_timeline_svg(const trace_file& trace, const timeline_options& options) {
  return timeline_canvas{trace, options}.draw();
}

std::string render_timeline_html(const trace_file& trace, const timeline_options& options) {
  auto svg = render_timeline_svg(trace, options);
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>troupe "
      "schedule: " + xml_text(trace.path) + "</title>\n<style>\n"
      "body{font-family:sans-serif;margin:16px;color:#222}\n"
      ".legend span{display:inline-block;margin-right:16px}\n"
      ".legend i{display:inline-block;width:14px;height:14px;margin-right:4px;vertical-align:-2px}\n"
      "svg rect:hover{stroke:#000;stroke-width:1.5}\n"
      ".figure{overflow-x:auto}\n"
      "</style>\n</head>\n<body>\n<h1>troupe schedule</h1>\n<p>" + xml_text(trace.path);
  if (!trace.config.empty())
    html += " (config " + xml_text(trace.config) + ")";
  html += ". Hover over a job for its actor, step, micro-batch and times.</p>\n<p class=\"legend\">";
  const char* legend[][2] = {
      {"#4e79a7", "forward"}, {"#59a14f", "backward"}, {"#b07aa1", "backward_weight"},
      {"#8c8c8c", "loss"},    {"#6b6b6b", "update"},   {"#a5a5a5", "reduce"},
      {"#c8c8c8", "copy"},    {"#b4b4b4", "other job"}};
  for (const auto& [colour, what] : legend)
    html += std::string{"<span><i style=\"background:"} + colour + "\"></i>" + what + "</span>";
  html += "<span><i style=\"background:repeating-linear-gradient(45deg,#d62728 0 2px,#fbdada 2px "
          "5px)\"></i>credits exhausted (the sender had to wait)</span>";
  if (trace.virtual_stages > 1)
    html += "<span><i style=\"background:#2a4d73\"></i><i style=\"background:#356b2f\"></i>"
            "forward and backward of a device's odd chunks (interleaved stages)</span>";
  html += "<span><i style=\"background:#4e79a7;opacity:0.4\"></i>eval phase</span>";
  if (options.critical_path)
    html += "<span><i style=\"border:2.5px solid #d62728;box-sizing:border-box\"></i>on a step's "
            "critical path (troupe trace explain)</span>";
  html += "</p>\n";
  html += "<div class=\"figure\">\n" + svg + "</div>\n</body>\n</html>\n";
  return html;
}

}  // namespace troupe
