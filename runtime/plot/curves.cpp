// curves.cpp: reading metrics files and drawing their curves (see curves.hpp).
#include "runtime/plot/curves.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/base/xml_text.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

/// The number at `key` of a metrics line, or false when absent; throws for another type.
bool number_at(const nlohmann::json& line, const char* key, const std::string& where,
               double& out) {
  auto it = line.find(key);
  if (it == line.end() || it->is_null())
    return false;
  if (!it->is_number())
    throw user_error(where + ": \"" + key + "\" should be a number, found " +
                     describe_json_value(*it));
  out = it->get<double>();
  return std::isfinite(out);
}

}  // namespace

run_curves read_metrics(const std::string& path, const std::string& label, curve_axis axis) {
  const auto text = read_file_capped(path, limits::max_metrics_bytes, "metrics file",
                                     " (a file troupe run --metrics wrote)");
  run_curves run;
  run.label = label;
  double seconds = 0;  // of the latest step line
  std::size_t start = 0;
  int line_number = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    ++line_number;
    const char* first = text.data() + start;
    const char* last = text.data() + end;
    start = end + 1;
    if (std::all_of(first, last, [](char c) { return c == ' ' || c == '\t' || c == '\r'; }))
      continue;
    const auto where =
        "metrics file " + quote_user_path(path) + " line " + std::to_string(line_number);
    nlohmann::json line;
    try {
      line = parse_untrusted_json(first, last, where);
    } catch (const std::exception& e) {
      throw user_error(std::string{e.what()} + " (each line should be one JSON object)");
    }
    if (!line.is_object())
      throw user_error(where + ": expected a JSON object, found " + describe_json_value(line));
    if (line.contains("event"))
      continue;  // the run's summary, not a point
    double step = 0, value = 0;
    if (!number_at(line, "step", where, step))
      continue;
    if (axis == curve_axis::seconds) {
      // A step line's seconds, or, for an evaluation, those of the step line before it.
      const bool step_line = line.contains("loss");
      if (!number_at(line, "train_s", where, seconds) && step_line)
        throw user_error(where +
                         ": a step line without \"train_s\" (the seconds of training "
                         "so far), which plotting over seconds needs; plot it over steps");
      step = seconds;
    }
    if (number_at(line, "loss", where, value))
      run.train_loss.push_back({step, value});
    if (number_at(line, "test_accuracy", where, value))
      run.test_accuracy.push_back({step, value});
    if (number_at(line, "test_loss", where, value))
      run.test_loss.push_back({step, value});
  }
  if (run.train_loss.empty() && run.test_accuracy.empty() && run.test_loss.empty())
    throw user_error("metrics file " + quote_user_path(path) +
                     ": no training or evaluation lines (JSON objects with \"step\" and \"loss\" "
                     "or \"test_accuracy\")");
  return run;
}

namespace {

// Layout, px.
constexpr double left_margin = 70;
constexpr double right_margin = 20;
constexpr double panel_height = 220;
constexpr double panel_gap = 56;
constexpr double top_margin = 40;
constexpr double legend_row = 18;

const char* const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                               "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/// A "nice" tick step (1, 2 or 5 times a power of ten) for about `count` ticks over span.
double tick_step(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

/// At most `buckets` points: the mean step and value of consecutive runs of points.
std::vector<curve_point> bucketed(const std::vector<curve_point>& points, std::size_t buckets) {
  if (points.size() <= buckets)
    return points;
  std::vector<curve_point> out;
  const double per = static_cast<double>(points.size()) / static_cast<double>(buckets);
  for (std::size_t b = 0; b < buckets; ++b) {
    const auto from = static_cast<std::size_t>(b * per);
    const auto to = std::min(points.size(), static_cast<std::size_t>((b + 1) * per));
    if (from >= to)
      continue;
    curve_point mean;
    for (std::size_t i = from; i < to; ++i) {
      mean.step += points[i].step;
      mean.value += points[i].value;
    }
    mean.step /= static_cast<double>(to - from);
    mean.value /= static_cast<double>(to - from);
    out.push_back(mean);
  }
  return out;
}

struct panel {
  const char* title;
  std::vector<curve_point> run_curves::*series;
  bool percent;  // values in [0, 1] drawn as percentages
};

}  // namespace

std::string render_curves_svg(const std::vector<run_curves>& runs, double width, curve_axis axis) {
  const panel panels[] = {{"training loss", &run_curves::train_loss, false},
                          {"test accuracy", &run_curves::test_accuracy, true},
                          {"test loss", &run_curves::test_loss, false}};
  std::vector<const panel*> shown;
  double max_step = 0;
  for (const auto& p : panels) {
    bool any = false;
    for (const auto& run : runs)
      for (const auto& point : run.*(p.series)) {
        any = true;
        max_step = std::max(max_step, point.step);
      }
    if (any)
      shown.push_back(&p);
  }
  if (max_step <= 0)
    max_step = 1;
  const double plot_width = width - left_margin - right_margin;
  const double legend_height = legend_row * static_cast<double>(runs.size()) + 10;
  const double height = top_margin + legend_height +
                        static_cast<double>(shown.size()) * (panel_height + panel_gap);
  std::string svg = string_printf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height);
  svg += string_printf("<text x=\"%.1f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
                       "training curves</text>\n",
                       left_margin);
  svg += "<g class=\"legend\">\n";
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const double y = top_margin + legend_row * static_cast<double>(r);
    const char* colour = palette[r % (sizeof palette / sizeof *palette)];
    svg += string_printf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                         "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                         left_margin, y + 5, left_margin + 24, y + 5, colour, left_margin + 30,
                         y + 9, xml_text(runs[r].label).c_str());
  }
  svg += "</g>\n";
  double top = top_margin + legend_height + 16;
  const auto buckets = static_cast<std::size_t>(std::max(10.0, plot_width / 2));
  for (const panel* p : shown) {
    double low = std::numeric_limits<double>::infinity(), high = -low;
    for (const auto& run : runs)
      for (const auto& point : run.*(p->series)) {
        low = std::min(low, point.value);
        high = std::max(high, point.value);
      }
    if (p->percent) {
      low = std::floor(low * 20) / 20;  // to 5 points
      high = std::ceil(high * 20) / 20;
    }
    if (!(high > low)) {
      low -= 0.5;
      high += 0.5;
    }
    const auto x_of = [&](double step) { return left_margin + plot_width * step / max_step; };
    const auto y_of = [&](double value) {
      return top + panel_height * (1 - (value - low) / (high - low));
    };
    svg += string_printf("<g class=\"panel\" data-title=\"%s\">\n", p->title);
    svg += string_printf("<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n",
                         left_margin, top - 8, p->title);
    svg += string_printf("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"none\" stroke=\"#444\"/>\n",
                         left_margin, top, plot_width, panel_height);
    const double value_step = tick_step(high - low, 5);
    // Counted, not accumulated: where the values are huge and close, step < ulp(v), and
    // v += step would never move.
    const double first_tick = std::ceil(low / value_step) * value_step;
    for (int tick = 0; tick <= 12; ++tick) {
      const double v = first_tick + tick * value_step;
      if (v > high + 1e-12 * std::fabs(high))
        break;
      svg += string_printf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#e4e4e4\"/><text x=\"%.1f\" y=\"%.1f\" "
                           "text-anchor=\"end\">%s</text>\n",
                           left_margin, y_of(v), left_margin + plot_width, y_of(v),
                           left_margin - 6, y_of(v) + 4,
                           p->percent ? string_printf("%.0f%%", v * 100).c_str()
                                      : string_printf("%.3g", v).c_str());
    }
    const double step_step = tick_step(max_step, 6);
    for (int tick = 0; tick <= 12 && tick * step_step <= max_step * (1 + 1e-12); ++tick)
      svg += string_printf(
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x_of(tick * step_step),
          top + panel_height + 16,
          string_printf(axis == curve_axis::seconds ? "%g" : "%.0f", tick * step_step).c_str());
    svg += string_printf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                         left_margin + plot_width, top + panel_height + 32,
                         axis == curve_axis::seconds ? "seconds of training" : "step");
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const auto& points = runs[r].*(p->series);
      if (points.empty())
        continue;
      const char* colour = palette[r % (sizeof palette / sizeof *palette)];
      std::string path;
      for (const auto& point : bucketed(points, buckets))
        path += string_printf("%.1f,%.1f ", x_of(point.step), y_of(point.value));
      svg += string_printf("<polyline class=\"run-%zu\" fill=\"none\" stroke=\"%s\" "
                           "stroke-width=\"1.5\" points=\"%s\"/>\n",
                           r, colour, path.c_str());
      if (points.size() <= 50)  // evaluations: mark each one
        for (const auto& point : points)
          svg += string_printf("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                               x_of(point.step), y_of(point.value), colour);
    }
    svg += "</g>\n";
    top += panel_height + panel_gap;
  }
  return svg + "</svg>\n";
}

std::string render_curves_html(const std::vector<run_curves>& runs, double width, curve_axis axis) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>training curves</title>"
         "</head>\n<body>\n" +
         render_curves_svg(runs, width, axis) + "</body></html>\n";
}

}  // namespace troupe
