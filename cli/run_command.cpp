// run_command.cpp: `troupe run CONFIG.toml`: train.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "actors/session/cluster.hpp"
#include "actors/trainer/interrupts.hpp"
#include "actors/session/session.hpp"
#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

// Note [a node ends with its launcher]
// troupe launch starts its nodes with posix_spawn (Note [spawn, not fork] in
// runtime/base/spawn.hpp), which cannot ask the kernel for a signal when the parent dies;
// the node asks itself, first thing, when TROUPE_LAUNCHER_PID says a launcher started it.
// SIGTERM is a clean stop (the run ends after its current step). A launcher that died
// before the request is no longer our parent: end at once. The variable is troupe
// launch's to set; anything but a process id in it is refused (exit 2) before anything
// is asked of the kernel.
exit_code ends_with_launcher() {
  const char* launcher = std::getenv("TROUPE_LAUNCHER_PID");
  if (launcher == nullptr)
    return exit_code::ok;
  const std::string text = launcher;
  if (text.empty() || text.size() > 10 ||
      text.find_first_not_of("0123456789") != std::string::npos || std::stoll(text) < 1 ||
      std::stoll(text) > std::numeric_limits<pid_t>::max()) {
    std::fprintf(stderr,
                 "troupe run: TROUPE_LAUNCHER_PID must be the process id of the troupe launch "
                 "that started this node (troupe launch sets it), found %s\n",
                 quote_user_text(text).c_str());
    return exit_code::bad_input;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (std::to_string(::getppid()) == text)
    return exit_code::ok;
  std::fprintf(stderr, "troupe run: the troupe launch that started this node has ended\n");
  return exit_code::run_failed;
}

/// A finished run's result, for people: its speed and evaluation, then what else it measured.
void print_result(const session_result& result, const run_config& config) {
  const auto& outcome = result.outcome;
  std::printf("done: %lld steps in %.1f s (%.0f samples/s)", static_cast<long long>(outcome.steps),
              outcome.train_seconds, outcome.samples_per_second);
  if (outcome.test_accuracy >= 0 && !result.sample.empty())  // a language model
    std::printf(", validation loss %.4f (%.3f bits per character)", outcome.test_loss,
                outcome.test_loss / std::log(2.0));
  else if (outcome.test_accuracy >= 0)
    std::printf(", %s accuracy %.2f%%", outcome.evaluated.c_str(), 100.0 * outcome.test_accuracy);
  else  // a regression's errors
    for (const auto& [name, value] : outcome.test_metrics)
      std::printf(", %s %s %.4f", outcome.evaluated.c_str(), name.c_str(), value);
  std::printf("\n");
  if (!result.sample.empty())
    std::printf("sample of the model's text (temperature 0.8):\n%s\n", result.sample.c_str());
  if (!result.staleness.empty()) {
    std::int64_t updates = 0, sum = 0;
    for (std::size_t s = 0; s < result.staleness.size(); ++s) {
      updates += result.staleness[s];
      sum += static_cast<std::int64_t>(s) * result.staleness[s];
    }
    std::printf("async server: %lld updates, staleness mean %.2f, max %zu (max_staleness %lld)\n",
                static_cast<long long>(updates),
                static_cast<double>(sum) / static_cast<double>(std::max<std::int64_t>(updates, 1)),
                result.staleness.size() - 1, static_cast<long long>(config.parallel.max_staleness));
  }
  if (outcome.device_utilisation.size() > 1) {
    std::printf("device utilisation:");
    for (const auto& [name, share] : outcome.device_utilisation)
      std::printf(" %s %.0f%%", name.c_str(), 100.0 * share);
    std::printf("\n");
  }
  if (!outcome.device_peak_bytes.empty()) {
    std::printf("peak memory (tensors held at once):");
    for (const auto& [name, bytes] : outcome.device_peak_bytes)
      std::printf(" %s %s", name.c_str(), human_bytes(bytes).c_str());
    std::printf("\n");
  }
}

}  // namespace

exit_code run_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("metrics", po::value<std::string>(),
                        "write metrics (JSON lines) here instead of [run] metrics (\"\": none)")(
      "steps", po::value<std::int64_t>(), "train this many steps (overrides [run] epochs/steps)")(
      "trace", po::value<std::string>(),
      "record every message and job into this Chrome trace (overrides [run] trace; \"\": none); "
      "open it in Perfetto or read it with troupe trace summary|explain|timeline")(
      "log-messages", po::value<std::string>()->implicit_value(""),
      "print messages to stderr as they are handled; optional FILTER (the next word: put "
      "CONFIG.toml before it, or write --log-messages=FILTER): actor=NAME,kind=KIND,step=N or a "
      "word")(
      "watchdog", po::value<double>(),
      "stop a run that has made no progress for this many seconds, printing what each actor "
      "waits for (overrides [run] watchdog; 0 = off)")(
      "checkpoint", po::value<std::string>(),
      "write checkpoints into this directory (overrides [run] checkpoint; \"\": none): every "
      "--checkpoint-every steps and at the end; the newest [run] checkpoint_keep are kept")(
      "checkpoint-every", po::value<std::int64_t>(),
      "steps between checkpoints (overrides [run] checkpoint_every; 0 = only at the end)")(
      "resume", po::value<std::string>(),
      "continue from a checkpoint: a checkpoint directory, or a directory of them (its newest "
      "complete one); --steps and [run] epochs still count from the start of the run")(
      "quiet,q",
      "print nothing but errors and the run's summary (result, peak memory, device "
      "utilisation, files written)")("no-progress-bar",
                                     "print progress as plain lines even on a terminal");
  command_line line;
  if (auto stop = parse_command_line(
          args, "run",
          "Trains the model that CONFIG.toml describes ([run], [data], [model],\n"
          "[optimizer], [parallel], or an explicit [[actor]]/[[wire]] graph); see\n"
          "config/fashion_mlp.toml. Progress goes to stdout, metrics to a JSON-lines\n"
          "file, errors to stderr.\n\n"
          "A config over several nodes ([cluster], devices like \"node1/cpu:0\") runs as one\n"
          "troupe run per node: troupe launch -n N starts them here, or a launcher's\n"
          "environment says which node each is (torchrun: RANK, WORLD_SIZE, MASTER_ADDR,\n"
          "MASTER_PORT; Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST; Open MPI:\n"
          "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, with MASTER_ADDR). The secret comes\n"
          "from TROUPE_SECRET, TROUPE_SECRET_FILE or [cluster] secret_file.",
          options, line))
    return *stop;
  if (auto launched = ends_with_launcher(); launched != exit_code::ok)
    return launched;
  auto config = load_config_and_plugins(line);
  if (line.values.count("steps")) {
    auto steps = line.values["steps"].as<std::int64_t>();
    if (steps < 1 || steps > limits::max_steps) {
      std::fprintf(stderr, "troupe run: --steps must be in [1, %lld] (the limit), got %lld\n",
                   static_cast<long long>(limits::max_steps), static_cast<long long>(steps));
      return exit_code::bad_input;
    }
    config.run.steps = steps;
  }
  if (line.values.count("checkpoint"))
    config.run.checkpoint = line.values["checkpoint"].as<std::string>();
  if (line.values.count("checkpoint-every")) {
    auto every = line.values["checkpoint-every"].as<std::int64_t>();
    if (every < 0) {
      std::fprintf(stderr, "troupe run: --checkpoint-every must be 0 or more steps, got %lld\n",
                   static_cast<long long>(every));
      return exit_code::bad_input;
    }
    if (config.run.checkpoint.empty()) {
      std::fprintf(stderr,
                   "troupe run: --checkpoint-every needs a directory: --checkpoint DIR "
                   "or [run] checkpoint\n");
      return exit_code::bad_input;
    }
    config.run.checkpoint_every = every;
  }
  session_options session;
  if (line.values.count("resume"))
    session.resume = line.values["resume"].as<std::string>();
  session.watch_interrupts = true;
  install_interrupt_handlers();
  session.quiet = line.values.count("quiet") > 0;
  session.progress_bar = !line.values.count("no-progress-bar") && isatty(fileno(stdout));
  if (line.values.count("metrics"))
    session.metrics_path = line.values["metrics"].as<std::string>();
  if (line.values.count("trace"))
    session.trace_path = line.values["trace"].as<std::string>();
  if (line.values.count("log-messages")) {
    session.log_messages = true;
    session.log_filter = line.values["log-messages"].as<std::string>();
  }
  if (line.values.count("watchdog")) {
    session.watchdog = line.values["watchdog"].as<double>();
    if (!(session.watchdog >= 0 && session.watchdog < limits::max_seconds)) {
      std::fprintf(stderr,
                   "troupe run: --watchdog must be in [0, %g) seconds (the limit), got %g\n",
                   limits::max_seconds, session.watchdog);
      return exit_code::bad_input;
    }
  }
  // Under a launcher (troupe launch, torchrun, Slurm, mpirun): this process is one node.
  session.cluster = cluster_from_environment(config);
  const bool worker = session.cluster && !session.cluster->coordinator();
  if (worker)
    session.quiet = true;  // the coordinator prints progress and the result
  auto result = run_session(config, session);
  const auto& outcome = result.outcome;
  if (worker) {
    if (outcome.exit_code != exit_code::ok && !outcome.failure.empty())
      std::fprintf(stderr, "troupe run: node%d: %s\n", session.cluster->rank,
                   outcome.failure.c_str());
    return outcome.exit_code;
  }
  // A failed or interrupted run's trace is written too: it shows how the run got there.
  if (!result.trace_written.empty())
    std::printf("trace written to %s (open it in Perfetto, or: troupe trace summary %s)\n",
                result.trace_written.c_str(), result.trace_written.c_str());
  if (outcome.exit_code != exit_code::ok) {
    std::fprintf(stderr, "troupe run: %s\n", outcome.failure.c_str());
    return outcome.exit_code;
  }
  print_result(result, config);
  return exit_code::ok;
}

}  // namespace troupe::cli
