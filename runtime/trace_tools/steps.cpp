// steps.cpp: the training steps of a trace and the run's step time (Note [step time]).
#include "runtime/trace_tools/steps.hpp"

#include <algorithm>
#include <map>
#include <numeric>

namespace troupe {

std::vector<step_window> step_windows(const trace_file& trace) {
  std::map<std::int64_t, step_window> by_step;
  for (std::size_t i = 0; i < trace.jobs.size(); ++i) {
    const auto& j = trace.jobs[i];
    if (j.eval || j.step < 0)
      continue;
    auto [it, added] = by_step.try_emplace(j.step);
    auto& w = it->second;
    if (added) {
      w.step = j.step;
      w.first_job_us = j.start_us;
      w.end_us = j.end_us();
      w.last_job = i;
      continue;
    }
    w.first_job_us = std::min(w.first_job_us, j.start_us);
    if (j.end_us() > w.end_us) {
      w.end_us = j.end_us();
      w.last_job = i;
    }
  }
  std::vector<step_window> out;
  for (auto& [number, w] : by_step) {
    if (out.empty()) {
      w.start_us = w.first_job_us;
    } else {
      // A step that ends before the one before it (steps without anything that orders
      // them) takes no time of its own rather than a negative one.
      w.start_us = std::min(out.back().end_us, w.end_us);
      w.spans_steps = number - out.back().step;
    }
    out.push_back(w);
  }
  return out;
}

std::vector<std::size_t> steady_steps(const std::vector<step_window>& steps) {
  std::vector<std::size_t> order(steps.size() > 1 ? steps.size() - 1 : 0);
  std::iota(order.begin(), order.end(), std::size_t{1});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return steps[a].period_us() < steps[b].period_us();
  });
  const auto cut = order.size() / 10;
  std::vector<std::size_t> kept(order.begin() + static_cast<std::ptrdiff_t>(cut),
                                order.end() - static_cast<std::ptrdiff_t>(cut));
  std::sort(kept.begin(), kept.end());
  return kept;
}

double run_step_time_us(const std::vector<step_window>& steps) {
  const auto kept = steady_steps(steps);
  if (kept.empty())
    return 0;
  double sum = 0;
  for (auto i : kept)
    sum += steps[i].period_us();
  return sum / static_cast<double>(kept.size());
}

}  // namespace troupe
