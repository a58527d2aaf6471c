// progress.cpp: progress bar and plain progress lines.
#include "actors/trainer/progress.hpp"

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace troupe {

std::string format_duration(double seconds) {
  // Beyond int64 seconds there is nothing meaningful to print (and the cast would overflow).
  if (!(seconds >= 0) || !(seconds < 9.2e18))
    return "--:--";
  auto s = static_cast<std::int64_t>(seconds + 0.5);
  std::ostringstream text;
  text << std::setfill('0');
  if (s >= 3600)
    text << s / 3600 << ':' << std::setw(2) << (s / 60) % 60 << ':' << std::setw(2) << s % 60;
  else
    text << s / 60 << ':' << std::setw(2) << s % 60;
  return text.str();
}

progress::progress(progress_settings settings, std::ostream& out)
    : settings_(std::move(settings)), out_(out) {}

namespace {

/// " acc 0.912" or " rmse 0.3100 mae 0.2200": a step's metrics on a progress line.
std::string step_metrics(const metric_values& metrics) {
  std::ostringstream text;
  text << std::fixed;
  for (const auto& [name, value] : metrics)
    if (name == "accuracy")
      text << " acc " << std::setprecision(3) << value;
    else
      text << ' ' << name << ' ' << std::setprecision(4) << value;
  return text.str();
}

/// "test accuracy 91.20%" or "test rmse 0.3100, test mae 0.2200" (`split` for "test").
std::string test_metrics(const metric_values& metrics, const std::string& split) {
  std::ostringstream text;
  text << std::fixed;
  for (const auto& [name, value] : metrics) {
    text << ", " << split << ' ' << name << ' ';
    if (name == "accuracy")
      text << std::setprecision(2) << 100.0 * value << '%';
    else
      text << std::setprecision(4) << value;
  }
  return text.str();
}

}  // namespace

void progress::step(std::int64_t step, double loss, const metric_values& metrics,
                    double samples_per_second) {
  if (settings_.quiet)
    return;
  const auto& plan = settings_.plan;
  auto done = step + 1;
  bool last = done == plan.total_steps;
  double eta =
      samples_per_second > 0
          ? static_cast<double>((plan.total_steps - done) * plan.batch_size) / samples_per_second
          : -1;
  // An ETA beyond ~115 days early in a run is noise, not an estimate.
  auto eta_text = eta > 1e7 ? std::string{"--:--"} : format_duration(eta);
  auto epoch = step / plan.steps_per_epoch + 1;
  auto in_epoch = step % plan.steps_per_epoch + 1;
  std::ostringstream line;
  line << std::fixed;
  if (settings_.bar) {
    // One line redrawn in place, at most every few steps to keep the terminal cheap.
    if (!last && done % 5 != 0)
      return;
    constexpr int width = 24;
    int filled = static_cast<int>(width * static_cast<double>(in_epoch) /
                                  static_cast<double>(plan.steps_per_epoch));
    std::string bar(static_cast<std::size_t>(filled), '=');
    bar.resize(width, ' ');
    line << '\r' << settings_.title << " epoch " << epoch << '/' << plan.epochs << " [" << bar
         << "] step " << done << '/' << plan.total_steps << " loss " << std::setprecision(4) << loss
         << step_metrics(metrics) << ' ' << std::setprecision(0) << samples_per_second
         << " samples/s ETA " << eta_text << ' ';
    out_ << line.str() << std::flush;
    return;
  }
  if (!last && done % settings_.log_every != 0)
    return;
  line << settings_.title << " epoch " << epoch << '/' << plan.epochs << " step " << done << '/'
       << plan.total_steps << " loss " << std::setprecision(4) << loss << step_metrics(metrics)
       << ' ' << std::setprecision(0) << samples_per_second << " samples/s ETA " << eta_text
       << '\n';
  out_ << line.str() << std::flush;
}

void progress::evaluation(std::int64_t epoch, double loss, const metric_values& metrics,
                          std::int64_t samples) {
  if (settings_.quiet)
    return;
  std::ostringstream line;
  if (settings_.bar)
    line << '\n';
  if (settings_.plan.positions > 1 && metrics.size() == 1 && metrics[0].first == "accuracy")
    // a language model: per character, on validation text
    line << "epoch " << epoch + 1 << ": validation loss " << std::fixed << std::setprecision(4)
         << loss << " (" << std::setprecision(3) << loss / std::log(2.0)
         << " bits per character), next-character accuracy " << std::setprecision(2)
         << 100.0 * metrics[0].second << "% (" << samples << " characters)\n";
  else
    line << "epoch " << epoch + 1 << ": " << settings_.plan.evaluated << " loss " << std::fixed
         << std::setprecision(4) << loss << test_metrics(metrics, settings_.plan.evaluated) << " ("
         << samples << " samples)\n";
  out_ << line.str() << std::flush;
}

void progress::end() {
  if (settings_.bar && !settings_.quiet)
    out_ << std::endl;
}

}  // namespace troupe
