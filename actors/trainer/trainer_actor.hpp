// trainer_actor.hpp: drives a run and watches it.
//
// It starts the optimizers (which publish parameter version 0) and the data loader,
// collects the loss reports of every micro-batch, returns one credit to the loader per
// completed item (a training step, or an evaluation batch), and answers the `start`
// request when the last item is done or when any actor reports a failure. It computes
// nothing itself and composes pieces that each do one job: run_control (counting reports
// into steps, evaluations and the end), watchdog (a run that stopped moving), progress
// (the lines on stdout), metrics_writer (the JSONL file) and the trace's step markers.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>

#include "actors/training/checkpoint_writer.hpp"
#include "actors/training/data_loader_actor.hpp"
#include "actors/trainer/metrics_writer.hpp"
#include "actors/trainer/progress.hpp"
#include "actors/trainer/run_control.hpp"
#include "actors/trainer/training_rate.hpp"
#include "actors/trainer/watchdog.hpp"
#include "runtime/model/lr_schedule.hpp"
#include "troupe/exit_code.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// What a finished run reports back to whoever started it.
struct run_outcome {
  troupe::exit_code exit_code = troupe::exit_code::ok;
  std::string failure;            // why it failed, when exit_code != ok
  std::int64_t steps = 0;         // optimizer steps completed
  double last_loss = 0;           // mean training loss of the last step
  double test_loss = 0;           // of the last evaluation
  double test_accuracy = -1;      // fraction; -1 when no evaluation ran or the loss has none
  metric_values test_metrics;     // the last evaluation's metrics; empty when none ran
  std::int64_t test_samples = 0;  // the rows the last evaluation covered
  std::string evaluated = "test"; // which split the evaluations ran on
  double train_seconds = 0;       // training time: start to the last step, evaluations left
                                  // out (Note [samples per second] in training_rate.hpp)
  double samples_per_second = 0;  // training samples / train_seconds
  /// Per device: the share of the run's wall time its stream spent computing (1 - idle share).
  std::vector<std::pair<std::string, double>> device_utilisation;
  /// Per device: the most bytes of tensors it held at once (storage_bytes_peak).
  std::vector<std::pair<std::string, std::int64_t>> device_peak_bytes;
};

struct trainer_settings {
  run_plan plan;
  lr_schedule schedule;
  std::string metrics_path;  // empty: none
  std::int64_t log_every = 50;
  bool progress_bar = false;  // a terminal: redraw one line
  bool quiet = false;         // no progress output at all
  std::string title;          // shown in the progress lines
  std::shared_ptr<run_outcome> outcome;
  const device_set* devices = nullptr;  // for utilisation; outlives the trainer
  std::uint32_t track = 0;              // trace track
  double watchdog_seconds = 60;         // no progress for this long ends the run; 0 = off
  std::vector<std::pair<std::string, caf::actor>> actors;  // every actor, for the watchdog
  caf::actor loader;                                       // filled before start
  std::vector<caf::actor> optimizers;
  checkpoint_plan checkpoints;    // the run's checkpoints: the last one ends the run
  bool watch_interrupts = false;  // stop cleanly on SIGINT / SIGTERM (actors/trainer/interrupts.hpp)
  /// This run's own request to stop, as a signal number (SIGINT, SIGTERM) once set: the
  /// clean stop a signal asks for, for this run only (the Python module's run.stop()).
  std::shared_ptr<const std::atomic<int>> stop_request;
  /// Each metrics line as it is made, whether or not a file is written (metrics_writer::listen).
  std::function<void(const std::string&)> on_record;
  /// A run over several nodes: each step's metrics line says the bytes sent between them.
  bool several_nodes = false;
};

using poll_atom = caf::atom_constant<caf::atom("poll")>;
/// (node_bytes_atom, node, bytes): the tensor bytes node `node` has sent to other nodes so
/// far, as of its last heartbeat (node watch -> trainer, for the metrics' net_bytes).
using node_bytes_atom = caf::atom_constant<caf::atom("nodebytes")>;
/// (node_lost_atom, node, what): a node of the run was lost (node watch -> trainer).
using node_lost_atom = caf::atom_constant<caf::atom("nodelost")>;

class trainer_actor : public caf::event_based_actor {
 public:
  trainer_actor(caf::actor_config& config, std::shared_ptr<trainer_settings> settings);
  caf::behavior make_behavior() override;

 private:
  void start();
  void on_report(const loss_report_msg& report);
  void finish_step(std::int64_t step, const report_totals& t);
  void finish_evaluation(std::int64_t epoch, const report_totals& t);
  void end(troupe::exit_code code, const std::string& failure);
  /// Ends the run with `code` once the checkpoint after `steps` steps is complete.
  void end_after_checkpoint(std::int64_t steps, troupe::exit_code code, std::string why);
  void on_checkpoint(std::int64_t steps, const std::string& directory);
  /// True (and the run ends, exit code 1) once a metrics write has failed.
  bool metrics_lost();
  void poll_interrupt();
  /// An interrupted run: ends once the steps under way are done (and checkpointed).
  void stop_if_drained();
  void watch();
  double seconds_since_start() const;
  /// Tensor bytes the run's nodes have sent each other so far; -1 with one node.
  std::int64_t net_bytes() const;

  std::shared_ptr<trainer_settings> settings_;
  run_control control_;
  troupe::watchdog watchdog_;
  progress progress_;
  metrics_writer metrics_;
  caf::response_promise done_;
  std::chrono::steady_clock::time_point start_;
  training_rate rate_;
  bool ended_ = false;
  std::uint64_t reports_ = 0;
  /// Tensor bytes sent to other nodes: this process's count when the run started, and each
  /// other node's own as of its last heartbeat.
  std::int64_t sent_before_ = 0;
  std::map<std::int32_t, std::int64_t> node_bytes_;
  std::int64_t last_checkpoint_ = -1;  // steps of the newest complete checkpoint
  struct pending_end {
    std::int64_t steps = -1;  // waiting for the checkpoint after this many steps; -1: none
    troupe::exit_code code = troupe::exit_code::ok;
    std::string why;
  } pending_end_;
  bool stopping_ = false;         // a signal arrived: no new steps
  std::int64_t stop_steps_ = -1;  // the steps the loader had sent when it stopped
  int signal_ = 0;
};

}  // namespace troupe
