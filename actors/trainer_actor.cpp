// trainer_actor.cpp: the trainer's messages, and how its pieces meet.
#include "actors/trainer_actor.hpp"

#include <iostream>

#include <nlohmann/json.hpp>

#include "actors/step_markers.hpp"
#include "troupe/traced.hpp"

namespace troupe {

namespace {

progress_settings progress_of(const trainer_settings& s) {
  progress_settings p;
  p.plan = s.plan;
  p.title = s.title;
  p.bar = s.progress_bar;
  p.quiet = s.quiet;
  p.log_every = s.log_every;
  return p;
}

}  // namespace

trainer_actor::trainer_actor(caf::actor_config& config, std::shared_ptr<trainer_settings> settings)
    : caf::event_based_actor(config),
      settings_(std::move(settings)),
      control_(settings_->plan),
      watchdog_(settings_->watchdog_seconds),
      progress_(progress_of(*settings_), std::cout) {}

double trainer_actor::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

caf::behavior trainer_actor::make_behavior() {
  return {
      [this](start_atom) { start(); },
      [this](loss_report_msg& report) {
        auto span = handling(settings_->track, "report", report.trace, report.tag, 0);
        ++reports_;
        on_report(report);
      },
      [this](tick_atom) { watch(); },
      [this](failure_msg& failure) {
        end(exit_code::run_failed, failure.actor + ": " + failure.what);
      },
  };
}

void trainer_actor::start() {
  done_ = make_response_promise();
  if (!settings_->metrics_path.empty() && !metrics_.open(settings_->metrics_path))
    return end(exit_code::bad_input,
               "cannot write the metrics file '" + settings_->metrics_path + "'");
  settings_->outcome->steps = control_.steps_done();  // a resumed run starts past 0
  start_ = last_step_time_ = std::chrono::steady_clock::now();
  watchdog_.start(start_);
  if (watchdog_.enabled())
    delayed_send(this, watchdog_.interval(), tick_atom::value);
  for (const auto& optimizer : settings_->optimizers)
    send(optimizer, start_atom::value);
  send(settings_->loader, start_atom::value);
  if (control_.done())
    end(exit_code::ok, "");
}

void trainer_actor::on_report(const loss_report_msg& report) {
  if (ended_)
    return;
  auto effect = control_.on_report(report.tag, report.loss_sum, report.correct, report.samples);
  if (effect.item_done)
    send(settings_->loader, credit_atom::value);
  if (effect.step)
    finish_step(*effect.step, effect.totals);
  if (effect.epoch)
    finish_evaluation(*effect.epoch, effect.totals);
  if (effect.run_done)
    end(exit_code::ok, "");
}

void trainer_actor::watch() {
  if (ended_)
    return;
  std::uint64_t progress = reports_;
  if (settings_->devices != nullptr)
    for (const auto& d : settings_->devices->all())
      progress += d->work().completed();
  double quiet = watchdog_.observe(progress, std::chrono::steady_clock::now());
  if (!watchdog_.stuck(quiet)) {
    delayed_send(this, watchdog_.interval(), tick_atom::value);
    return;
  }
  ask_actors(this, settings_->actors, [this, quiet](const std::vector<std::string>& answers) {
    end(exit_code::watchdog, watchdog_report(quiet, answers));
  });
}

void trainer_actor::finish_step(std::int64_t step, const report_totals& t) {
  auto now = std::chrono::steady_clock::now();
  double interval = std::chrono::duration<double>(now - last_step_time_).count();
  last_step_time_ = now;
  double rate = interval > 0 ? static_cast<double>(t.samples) / interval : 0;
  const auto& plan = settings_->plan;
  samples_per_second_ = control_.steps_done() == plan.first_step + 1
                            ? rate
                            : 0.9 * samples_per_second_ + 0.1 * rate;
  mark_step_done(step, plan.steps_per_epoch);
  auto& outcome = *settings_->outcome;
  outcome.steps = control_.steps_done();
  outcome.last_loss = t.mean_loss();
  outcome.train_seconds = seconds_since_start();
  if (metrics_.is_open())
    metrics_.step(step, step / plan.steps_per_epoch, outcome.last_loss, t.accuracy(),
                  settings_->schedule.at(step), samples_per_second_);
  progress_.step(step, outcome.last_loss, t.accuracy(), samples_per_second_);
}

void trainer_actor::finish_evaluation(std::int64_t epoch, const report_totals& t) {
  auto& outcome = *settings_->outcome;
  outcome.test_loss = t.mean_loss();
  outcome.test_accuracy = t.accuracy();
  if (metrics_.is_open())
    metrics_.evaluation(epoch, control_.steps_done(), outcome.test_loss, outcome.test_accuracy);
  progress_.evaluation(epoch, outcome.test_loss, outcome.test_accuracy, t.samples);
}

void trainer_actor::end(troupe::exit_code code, const std::string& failure) {
  if (ended_)
    return;
  ended_ = true;
  auto& outcome = *settings_->outcome;
  outcome.exit_code = code;
  outcome.failure = failure;
  if (outcome.train_seconds > 0)
    outcome.samples_per_second =
        static_cast<double>((outcome.steps - settings_->plan.first_step) *
                            settings_->plan.batch_size) /
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
    metrics_.end(code == exit_code::ok, outcome.steps, outcome.train_seconds,
                 outcome.samples_per_second, devices, outcome.test_accuracy, failure);
    if (!metrics_.good() && code == exit_code::ok) {
      // The run trained, but its record is incomplete: say so rather than succeed quietly.
      outcome.exit_code = exit_code::run_failed;
      outcome.failure = "writing the metrics file '" + settings_->metrics_path + "' failed";
    }
  }
  progress_.end();
  done_.deliver(exit_status(outcome.exit_code));
  quit();
}

}  // namespace troupe
