// trainer_actor.cpp: reports, credits, progress and metrics.
#include "actors/trainer_actor.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "actors/traced.hpp"

namespace troupe {

namespace {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7)
    return "--:--";
  auto s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600)
    std::snprintf(buffer, sizeof(buffer), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buffer, sizeof(buffer), "%ld:%02ld", s / 60, s % 60);
  return buffer;
}

}  // namespace

trainer_actor::trainer_actor(caf::actor_config& config, std::shared_ptr<trainer_settings> settings)
    : caf::event_based_actor(config), settings_(std::move(settings)) {
  const auto& plan = settings_->plan;
  std::int64_t evaluations = 0;
  for (std::int64_t s = 0; s < plan.total_steps; ++s)
    if (plan.evaluates_after(s))
      ++evaluations;
  items_left_ = plan.total_steps + evaluations * plan.eval_batches;
}

double trainer_actor::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

caf::behavior trainer_actor::make_behavior() {
  return {
      [this](start_atom) {
        done_ = make_response_promise();
        if (!settings_->metrics_path.empty()) {
          metrics_.open(settings_->metrics_path, std::ios::trunc);
          if (!metrics_)
            return end(2, "cannot write the metrics file '" + settings_->metrics_path + "'");
        }
        start_ = last_step_time_ = last_progress_time_ = std::chrono::steady_clock::now();
        if (settings_->watchdog_seconds > 0)
          delayed_send(this, watchdog_interval(), tick_atom::value);
        for (const auto& optimizer : settings_->optimizers)
          send(optimizer, start_atom::value);
        send(settings_->loader, start_atom::value);
        if (items_left_ == 0)
          end(0, "");
      },
      [this](loss_report_msg& report) {
        auto span = handling(settings_->track, "report", report.trace, report.tag, 0);
        ++reports_;
        on_report(report);
      },
      [this](tick_atom) { watch(); },
      [this](failure_msg& failure) { end(1, failure.actor + ": " + failure.what); },
  };
}

void trainer_actor::on_report(const loss_report_msg& report) {
  if (ended_)
    return;
  const auto& plan = settings_->plan;
  if (report.tag.stage == phase::eval) {
    eval_.loss_sum += report.loss_sum;
    eval_.correct += report.correct;
    eval_.samples += report.samples;
    send(settings_->loader, credit_atom::value);
    --items_left_;
    if (++evals_done_ % plan.eval_batches == 0) {
      finish_evaluation(report.tag.epoch, eval_);
      eval_ = totals{};
    }
  } else {
    auto& t = steps_[report.tag.step];
    t.loss_sum += report.loss_sum;
    t.correct += report.correct;
    t.samples += report.samples;
    if (++t.reports == plan.replicas * plan.microbatches) {
      auto finished = t;
      steps_.erase(report.tag.step);
      send(settings_->loader, credit_atom::value);
      --items_left_;
      finish_step(report.tag.step, finished);
    }
  }
  if (items_left_ == 0)
    end(0, "");
}

std::chrono::milliseconds trainer_actor::watchdog_interval() const {
  auto ms = static_cast<long>(settings_->watchdog_seconds * 1000 / 4);
  return std::chrono::milliseconds(std::max(10L, std::min(1000L, ms)));
}

// Note [watchdog]
// Progress is any job a device finishes or any loss report. When there has been none for
// [run] watchdog seconds, the run is stuck (a miswired config, a capacity that can never
// be met, a lost message): every actor is idle and still answers, so the trainer asks each
// what it is waiting for, prints the answers, and ends the run with exit code 3 instead
// of hanging.
void trainer_actor::watch() {
  if (ended_)
    return;
  std::uint64_t progress = reports_;
  if (settings_->devices != nullptr)
    for (const auto& d : settings_->devices->all())
      progress += d->work().completed();
  auto now = std::chrono::steady_clock::now();
  if (progress != last_progress_) {
    last_progress_ = progress;
    last_progress_time_ = now;
  }
  double quiet = std::chrono::duration<double>(now - last_progress_time_).count();
  if (quiet < settings_->watchdog_seconds) {
    delayed_send(this, watchdog_interval(), tick_atom::value);
    return;
  }
  auto answers = std::make_shared<std::vector<std::string>>(settings_->actors.size());
  auto left = std::make_shared<std::size_t>(settings_->actors.size());
  auto report = [this, answers, quiet] {
    std::string text = "watchdog: nothing has moved for " + std::to_string(static_cast<int>(quiet)) +
                       " s, so the run is stuck; what each actor is waiting for:";
    for (const auto& line : *answers)
      text += "\n  " + line;
    end(3, text);
  };
  if (*left == 0)
    return report();
  for (std::size_t i = 0; i < settings_->actors.size(); ++i) {
    const auto& [name, handle] = settings_->actors[i];
    request(handle, std::chrono::seconds(2), status_atom::value)
        .then(
            [answers, left, report, i](const std::string& status) {
              (*answers)[i] = status;
              if (--*left == 0)
                report();
            },
            [answers, left, report, i, name = name](caf::error&) {
              (*answers)[i] = name + ": did not answer (busy or dead)";
              if (--*left == 0)
                report();
            });
  }
}

void trainer_actor::finish_step(std::int64_t step, const totals& t) {
  auto now = std::chrono::steady_clock::now();
  double interval = std::chrono::duration<double>(now - last_step_time_).count();
  last_step_time_ = now;
  double rate = interval > 0 ? static_cast<double>(t.samples) / interval : 0;
  samples_per_second_ = steps_done_ == 0 ? rate : 0.9 * samples_per_second_ + 0.1 * rate;
  ++steps_done_;
  const auto& step_plan = settings_->plan;
  if (trace::enabled()) {
    trace::event marker;
    marker.type = trace::event_type::marker;
    marker.start_ns = trace::now_ns();
    marker.name = "step";
    marker.step = step;
    marker.value = step / step_plan.steps_per_epoch;
    trace::record(marker);
    if ((step + 1) % step_plan.steps_per_epoch == 0) {
      marker.name = "epoch";
      marker.step = step / step_plan.steps_per_epoch;
      trace::record(marker);
    }
  }
  auto& outcome = *settings_->outcome;
  outcome.steps = steps_done_;
  outcome.last_loss = t.loss_sum / static_cast<double>(t.samples);
  outcome.train_seconds = seconds_since_start();
  const auto& plan = settings_->plan;
  if (metrics_.is_open()) {
    nlohmann::json record = {
        {"step", step},
        {"epoch", step / plan.steps_per_epoch},
        {"loss", outcome.last_loss},
        {"accuracy", static_cast<double>(t.correct) / static_cast<double>(t.samples)},
        {"lr", settings_->schedule.at(step)},
        {"samples_per_s", samples_per_second_},
    };
    metrics_ << record.dump() << '\n';
  }
  print_progress(step, t);
}

void trainer_actor::finish_evaluation(std::int64_t epoch, const totals& t) {
  auto& outcome = *settings_->outcome;
  outcome.test_loss = t.loss_sum / static_cast<double>(t.samples);
  outcome.test_accuracy = static_cast<double>(t.correct) / static_cast<double>(t.samples);
  if (metrics_.is_open()) {
    nlohmann::json record = {
        {"epoch", epoch},
        {"step", steps_done_},
        {"test_loss", outcome.test_loss},
        {"test_accuracy", outcome.test_accuracy},
    };
    metrics_ << record.dump() << '\n';
    metrics_.flush();
  }
  if (settings_->quiet)
    return;
  if (settings_->progress_bar)
    std::cout << '\n';
  std::printf("epoch %lld: test loss %.4f, test accuracy %.2f%% (%lld samples)\n",
              static_cast<long long>(epoch + 1), outcome.test_loss, 100.0 * outcome.test_accuracy,
              static_cast<long long>(t.samples));
  std::fflush(stdout);
}

void trainer_actor::print_progress(std::int64_t step, const totals& t) {
  if (settings_->quiet)
    return;
  const auto& plan = settings_->plan;
  auto done = step + 1;
  bool last = done == plan.total_steps;
  double loss = t.loss_sum / static_cast<double>(t.samples);
  double accuracy = static_cast<double>(t.correct) / static_cast<double>(t.samples);
  double eta = samples_per_second_ > 0
                   ? static_cast<double>((plan.total_steps - done) * plan.batch_size) /
                         samples_per_second_
                   : -1;
  auto epoch = step / plan.steps_per_epoch + 1;
  auto in_epoch = step % plan.steps_per_epoch + 1;
  if (settings_->progress_bar) {
    // One line redrawn in place, at most every few steps to keep the terminal cheap.
    if (!last && done % 5 != 0)
      return;
    constexpr int width = 24;
    int filled = static_cast<int>(width * static_cast<double>(in_epoch) /
                                  static_cast<double>(plan.steps_per_epoch));
    std::string bar(static_cast<std::size_t>(filled), '=');
    bar.resize(width, ' ');
    std::printf("\r%s epoch %lld/%lld [%s] step %lld/%lld loss %.4f acc %.3f %.0f samples/s ETA %s ",
                settings_->title.c_str(), static_cast<long long>(epoch),
                static_cast<long long>(plan.epochs), bar.c_str(), static_cast<long long>(done),
                static_cast<long long>(plan.total_steps), loss, accuracy, samples_per_second_,
                format_duration(eta).c_str());
    std::fflush(stdout);
    return;
  }
  if (!last && done % settings_->log_every != 0)
    return;
  std::printf("%s epoch %lld/%lld step %lld/%lld loss %.4f acc %.3f %.0f samples/s ETA %s\n",
              settings_->title.c_str(), static_cast<long long>(epoch),
              static_cast<long long>(plan.epochs), static_cast<long long>(done),
              static_cast<long long>(plan.total_steps), loss, accuracy, samples_per_second_,
              format_duration(eta).c_str());
  std::fflush(stdout);
}

void trainer_actor::end(int exit_code, const std::string& failure) {
  if (ended_)
    return;
  ended_ = true;
  auto& outcome = *settings_->outcome;
  outcome.exit_code = exit_code;
  outcome.failure = failure;
  if (outcome.train_seconds > 0)
    outcome.samples_per_second = static_cast<double>(outcome.steps * settings_->plan.batch_size) /
                                 outcome.train_seconds;
  nlohmann::json devices = nlohmann::json::object();
  if (settings_->devices != nullptr && outcome.train_seconds > 0) {
    auto elapsed = seconds_since_start();
    for (const auto& d : settings_->devices->all()) {
      auto busy = d->work().busy_seconds();
      auto name = d->id().to_string();
      outcome.device_utilisation.emplace_back(name, busy / elapsed);
      devices[name] = {{"busy_s", busy}, {"utilisation", busy / elapsed}};
    }
  }
  if (metrics_.is_open()) {
    nlohmann::json record = {
        {"event", exit_code == 0 ? "done" : "failed"},
        {"steps", outcome.steps},
        {"train_seconds", outcome.train_seconds},
        {"samples_per_s", outcome.samples_per_second},
        {"devices", devices},
    };
    if (outcome.test_accuracy >= 0)
      record["test_accuracy"] = outcome.test_accuracy;
    if (!failure.empty())
      record["error"] = failure;
    metrics_ << record.dump() << '\n';
    metrics_.close();
  }
  if (settings_->progress_bar && !settings_->quiet)
    std::cout << std::endl;
  done_.deliver(exit_code);
  quit();
}

}  // namespace troupe
