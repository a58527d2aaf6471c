// trainer_actor.cpp: the trainer's messages, and how its pieces meet.
#include "actors/trainer/trainer_actor.hpp"

#include "troupe/device.hpp"

#include <iostream>

#include <nlohmann/json.hpp>

#include <csignal>

#include "actors/trainer/interrupts.hpp"
#include "actors/base/step_markers.hpp"
#include "actors/base/network_atoms.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/net/shared_memory.hpp"
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
      progress_(progress_of(*settings_), std::cout),
      sent_before_(stream::sent_to_nodes()) {}

// Every node counts the tensor bytes its actors send to others (stream::sent_to_nodes); the
// other nodes' counts arrive with their heartbeats ([cluster] heartbeat), so a step's line
// holds this node's bytes to its end and theirs up to a heartbeat old.
std::int64_t trainer_actor::net_bytes() const {
  if (!settings_->several_nodes)
    return -1;
  auto bytes = stream::sent_to_nodes() - sent_before_;
  for (const auto& [node, sent] : node_bytes_)
    bytes += sent;
  return bytes;
}

double trainer_actor::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

caf::behavior trainer_actor::make_behavior() {
  attach_functor([&registry = system().registry(), me = id()] { registry.erase(me); });
  return {
      [this](start_atom) {
        // Loss reports from other processes of this machine come through shared memory,
        // which finds the trainer by its id (Note [messages through shared memory]), as it
        // finds device actors. Not before the start: the registry's handle would keep a
        // trainer alive that a failed start leaves without one.
        if (net::shm_links::current() != nullptr)
          system().registry().put(id(), ctrl());
        start();
      },
      [](shm_poll_atom) {
        if (auto* links = net::shm_links::current())
          links->poll(false);
      },
      [this](loss_report_msg& report) {
        auto span = handling(settings_->track, "report", report.trace, report.tag, 0);
        ++reports_;
        on_report(report);
      },
      [this](tick_atom) { watch(); },
      [this](failure_msg& failure) {
        end(failure.bad_input ? exit_code::bad_input : exit_code::run_failed,
            failure.actor + ": " + failure.what);
      },
      [this](node_bytes_atom, std::int32_t node, std::int64_t bytes) { node_bytes_[node] = bytes; },
      [this](node_lost_atom, std::int32_t, const std::string& what) {
        end(exit_code::run_failed,
            what + "; the last completed step was " + std::to_string(control_.steps_done()));
      },
      [this](checkpoint_atom, std::int64_t steps, const std::string& directory) {
        on_checkpoint(steps, directory);
      },
      [this](poll_atom) { poll_interrupt(); },
  };
}

void trainer_actor::start() {
  done_ = make_response_promise();
  // The session checked the path before anything started (check_output_file); this is
  // the file vanishing or filling up between then and now.
  if (settings_->on_record)
    metrics_.listen(settings_->on_record);
  if (!settings_->metrics_path.empty() &&
      !metrics_.open(settings_->metrics_path, settings_->plan.first_step > 0))
    return end(exit_code::bad_input, metrics_.error());
  settings_->outcome->steps = control_.steps_done();  // a resumed run starts past 0
  start_ = std::chrono::steady_clock::now();
  rate_.start(start_);
  watchdog_.start(start_);
  if (watchdog_.enabled())
    delayed_send(this, watchdog_.interval(), tick_atom::value);
  if (settings_->watch_interrupts || settings_->stop_request)
    delayed_send(this, std::chrono::milliseconds(50), poll_atom::value);
  for (const auto& optimizer : settings_->optimizers)
    send(optimizer, start_atom::value);
  send(settings_->loader, start_atom::value);
  if (control_.done())
    end(exit_code::ok, "");
}

void trainer_actor::on_report(const loss_report_msg& report) {
  if (ended_)
    return;
  auto effect = control_.on_report(report);
  if (effect.item_done)
    send(settings_->loader, credit_atom::value);
  for (const auto& item : effect.finished)
    if (item.step)
      finish_step(*item.step, item.totals);
    else
      finish_evaluation(*item.epoch, item.totals);
  if (metrics_lost())
    return;
  if (stopping_)
    return stop_if_drained();
  if (effect.run_done) {
    const auto total = settings_->plan.total_steps;
    if (settings_->checkpoints.due(total))
      end_after_checkpoint(total, exit_code::ok, "");
    else
      end(exit_code::ok, "");
  }
}

void trainer_actor::end_after_checkpoint(std::int64_t steps, troupe::exit_code code,
                                         std::string why) {
  if (last_checkpoint_ >= steps)
    return end(code, why);
  pending_end_ = pending_end{steps, code, std::move(why)};
}

void trainer_actor::on_checkpoint(std::int64_t steps, const std::string& directory) {
  if (ended_)
    return;
  last_checkpoint_ = std::max(last_checkpoint_, steps);
  if (metrics_.is_open())
    metrics_.checkpoint(steps, directory);
  if (metrics_lost())
    return;
  if (pending_end_.steps >= 0 && last_checkpoint_ >= pending_end_.steps)
    end(pending_end_.code, pending_end_.why);
}

// Note [lost output]
// The metrics file is the run's record: a run whose record is being lost (a full disk, a
// file system gone read-only) stops at once with exit code 1 and the file and OS error,
// instead of training on for hours into a file that ends mid-line. The steps already
// done are not undone; a checkpoint written before stays. A run that already ended for
// its own reason (a failure, a signal) keeps its exit code, and its message gets the
// metrics error added (end()).
bool trainer_actor::metrics_lost() {
  if (metrics_.good())
    return false;
  end(exit_code::run_failed, metrics_.error());
  return true;
}

void trainer_actor::poll_interrupt() {
  if (ended_)
    return;
  signal_ = settings_->watch_interrupts ? interrupt_signal() : 0;
  if (signal_ == 0 && settings_->stop_request)
    signal_ = settings_->stop_request->load();
  if (signal_ == 0 || stopping_) {
    delayed_send(this, std::chrono::milliseconds(50), poll_atom::value);
    return;
  }
  // The steps the loader has sent are finished (their gradients are in flight); nothing
  // new starts. Then the parameters after them are checkpointed, and the run ends.
  stopping_ = true;
  request(settings_->loader, caf::infinite, stop_atom::value).then([this](std::int64_t sent) {
    stop_steps_ = sent;
    stop_if_drained();
  });
}

void trainer_actor::stop_if_drained() {
  if (ended_ || stop_steps_ < 0 || control_.steps_done() < stop_steps_)
    return;
  const auto code = signal_ == SIGTERM ? exit_code::terminated : exit_code::interrupted;
  const auto why = std::string{"interrupted by "} + (signal_ == SIGTERM ? "SIGTERM" : "SIGINT") +
                   " after step " + std::to_string(stop_steps_);
  const auto& checkpoints = settings_->checkpoints;
  if (!checkpoints.enabled() || stop_steps_ <= settings_->plan.first_step)
    return end(code, why);
  if (!checkpoints.due(stop_steps_))
    for (const auto& optimizer : settings_->optimizers)
      send(optimizer, checkpoint_atom::value, stop_steps_);
  end_after_checkpoint(stop_steps_, code, why + " (checkpointed)");
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
  const auto& plan = settings_->plan;
  // Samples, not the reports' rows (a sequence loss counts every position).
  rate_.step(std::chrono::steady_clock::now(), plan.batch_size);
  const double samples_per_second = rate_.samples_per_second();
  mark_step_done(step, plan.steps_per_epoch);
  if (settings_->devices != nullptr && trace::enabled())
    for (const auto& d : settings_->devices->all())
      if (d->id().type == device_type::cuda) {
        // A GPU's memory in the trace, on its track: held in tensors now, and the most.
        const auto figures = gpu::memory(d->id().index);
        trace_counter("bytes", d->work().trace_track(), 0, figures.current);
        trace_counter("peak bytes", d->work().trace_track(), 0, figures.peak);
      }
  auto& outcome = *settings_->outcome;
  outcome.steps = step + 1;  // steps finish in order (Note [finished in order])
  outcome.last_loss = t.mean_loss();
  outcome.train_seconds = rate_.training_seconds();  // evaluations left out
  const auto metrics = t.metrics(plan.loss);
  if (metrics_.is_open())
    metrics_.step(step, step / plan.steps_per_epoch, outcome.last_loss, metrics,
                  settings_->schedule.at(step), samples_per_second, outcome.train_seconds,
                  net_bytes());
  progress_.step(step, outcome.last_loss, metrics, samples_per_second);
}

void trainer_actor::finish_evaluation(std::int64_t epoch, const report_totals& t) {
  auto& outcome = *settings_->outcome;
  const auto& plan = settings_->plan;
  outcome.test_loss = t.mean_loss();
  outcome.test_metrics = t.metrics(plan.loss);
  outcome.test_samples = t.samples;
  outcome.evaluated = plan.evaluated;
  for (const auto& [name, value] : outcome.test_metrics)
    if (name == "accuracy")
      outcome.test_accuracy = value;
  if (metrics_.is_open())
    metrics_.evaluation(epoch, control_.steps_done(), outcome.test_loss, outcome.test_metrics,
                        plan.evaluated);
  if (settings_->checkpoints.at_evaluations) {
    // The evaluation after epoch `epoch` used the parameters after its last step; its score
    // is the loss's first metric, higher better (the test accuracy, minus the RMSE).
    const auto steps = std::min((epoch + 1) * plan.steps_per_epoch, plan.total_steps);
    double score = -outcome.test_loss;
    if (!outcome.test_metrics.empty())
      score = plan.loss.metrics.front().higher_is_better ? outcome.test_metrics.front().second
                                                         : -outcome.test_metrics.front().second;
    send(settings_->checkpoints.writer, checkpoint_atom::value, steps, score);
  }
  progress_.evaluation(epoch, outcome.test_loss, outcome.test_metrics, t.samples);
  rate_.evaluation_finished();
}

void trainer_actor::end(troupe::exit_code code, const std::string& failure) {
  if (ended_)
    return;
  ended_ = true;
  auto& outcome = *settings_->outcome;
  outcome.exit_code = code;
  outcome.failure = failure;
  outcome.samples_per_second = rate_.overall();  // over training time (Note [samples per second])
  nlohmann::json devices = nlohmann::json::object();
  if (settings_->devices != nullptr && outcome.train_seconds > 0) {
    auto elapsed = seconds_since_start();
    for (const auto& d : settings_->devices->all()) {
      auto busy = d->work().busy_seconds();
      auto name = d->id().to_string();
      outcome.device_utilisation.emplace_back(name, busy / elapsed);
      const auto peak = storage_bytes_peak(d->id());
      outcome.device_peak_bytes.emplace_back(name, peak);
      devices[name] = {{"busy_s", busy}, {"utilisation", busy / elapsed}, {"peak_bytes", peak}};
      if (d->id().type == device_type::cuda) {
        // The caching allocator's: what it holds from the GPU, and how often it asked.
        const auto figures = gpu::memory(d->id().index);
        devices[name]["reserved_bytes"] = figures.reserved;
        devices[name]["device_allocations"] = figures.raw_allocations;
      }
    }
  }
  if (metrics_.is_open()) {
    const char* event = code == exit_code::ok ? "done"
                        : code == exit_code::interrupted || code == exit_code::terminated
                            ? "interrupted"
                            : "failed";
    metrics_.end(event, outcome.steps, outcome.train_seconds, outcome.samples_per_second, devices,
                 outcome.test_metrics, failure);
  }
  // Note [lost output]: the run trained, but its record is incomplete; say so rather than
  // succeed quietly, and add it to a failure of its own.
  if (!metrics_.good() && failure != metrics_.error()) {
    if (code == exit_code::ok) {
      outcome.exit_code = exit_code::run_failed;
      outcome.failure = metrics_.error();
    } else {
      outcome.failure += "; and " + metrics_.error();
    }
  }
  progress_.end();
  done_.deliver(exit_status(outcome.exit_code));
  // The checkpoint writer's thread ends once no one holds it (the session tells it to
  // finish after the last shard has reached it).
  settings_->checkpoints.writer = nullptr;
  quit();
}

}  // namespace troupe
