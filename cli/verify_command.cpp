// verify_command.cpp: `troupe verify CONFIG.toml`: does this wiring compute what one
// device computes?
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "actors/tools/verify.hpp"
#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/spawn.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

// A fresh directory under the temporary directory, removed with its contents at scope exit.
struct scratch_directory {
  std::string path;
  scratch_directory() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "troupe-verify-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw user_error(
          "troupe verify: cannot make a temporary directory: " + std::string(std::strerror(errno)),
          exit_code::run_failed);
    path = pattern;
  }
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// Runs this troupe binary with `arguments` and waits; its exit code. Spawned, not forked:
// this process has threads by now (Note [spawn, not fork] in runtime/base/spawn.hpp).
int launch_and_wait(const std::vector<std::string>& arguments) {
  std::fflush(stdout);
  std::fflush(stderr);
  try {
    return wait_for_exit(spawn_process(own_executable(), arguments));
  } catch (const std::system_error& e) {
    throw user_error(std::string("troupe verify: ") + e.what(), exit_code::run_failed);
  }
}

}  // namespace

namespace {

/// Sets a local SGD or DiLoCo config to where it is one device's math, saying so on stderr
/// and adding each change to `changes` (for the nodes' --set); Adam's replicas' own
/// moments never are, so that is refused.
void check_local_rule_as_one_device(run_config& config, std::vector<std::string>& changes) {
  auto& p = config.parallel;
  const std::string rule = to_string(p.rule);
  if (config.optimizer.type != optimizer_type::sgd)
    throw user_error("troupe verify: [parallel] averaging = \"" + rule + "\" with the " +
                         to_string(config.optimizer.type) +
                         " optimizer keeps each replica's own moments, which one device does "
                         "not, even at sync_every = 1; verify it with [optimizer] type = "
                         "\"sgd\" (--set optimizer.type='\"sgd\"'), where it is one "
                         "device's math at sync_every = 1",
                     exit_code::bad_input);
  const bool diloco = p.rule == averaging_rule::diloco;
  const bool plain = !diloco || (!p.outer_nesterov && p.outer_lr == 1 && p.outer_momentum == 0);
  if (p.sync_every == 1 && plain)
    return;
  std::fprintf(stderr,
               "troupe verify: [parallel] averaging = \"%s\" lets the replicas drift apart "
               "between syncs%s, which one device does not; the wiring is checked with "
               "sync_every = 1%s\n",
               rule.c_str(), diloco ? " and steps an outer optimizer" : "",
               diloco ? ", outer = \"sgd\", outer_lr = 1, outer_momentum = 0" : "");
  p.sync_every = 1;
  changes.push_back("parallel.sync_every=1");
  if (diloco) {
    p.outer_nesterov = false;
    p.outer_lr = 1;
    p.outer_momentum = 0;
    changes.insert(changes.end(), {"parallel.outer=\"sgd\"", "parallel.outer_lr=1.0",
                                   "parallel.outer_momentum=0.0"});
  }
}

}  // namespace

exit_code verify_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("steps", po::value<std::int64_t>()->default_value(20),
                        "optimizer steps to train both runs")(
      "tolerance", po::value<double>(),
      "largest relative difference ||a - b||_inf / ||a||_inf allowed per parameter (default "
      "1e-5; 2^-8 = 0.0039 for a config in [run] precision = \"bf16\")");
  command_line line;
  if (auto stop = parse_command_line(
          args, "verify",
          "Trains CONFIG.toml's wiring and the same model on one device (same seed, data,\n"
          "global batch, and the wiring's R x M micro-batches, accumulated in order) for\n"
          "--steps steps and compares every parameter. Parallelism should change speed,\n"
          "never the math: differences come only from float summation order. Exit code 0\n"
          "when all are within --tolerance, 1 otherwise. A ring in bf16 ([parallel]\n"
          "reduce_dtype = \"bf16\") is checked as a ring in fp32, and says so.\n"
          "A config over several nodes ([cluster] nodes > 1) runs as that many local\n"
          "processes (troupe launch), so the network is part of what is checked.",
          options, line))
    return *stop;
  auto steps = line.values["steps"].as<std::int64_t>();
  if (steps < 1 || steps > limits::max_steps) {
    std::fprintf(stderr, "troupe verify: --steps must be in [1, %lld] (the limit), got %lld\n",
                 static_cast<long long>(limits::max_steps), static_cast<long long>(steps));
    return exit_code::bad_input;
  }
  const bool tolerance_given = line.values.count("tolerance") > 0;
  double tolerance = tolerance_given ? line.values["tolerance"].as<double>() : 1e-5;
  if (!(tolerance >= 0) || !std::isfinite(tolerance)) {  // NaN fails every comparison
    std::fprintf(stderr,
                 "troupe verify: --tolerance must be a finite number >= 0 (a relative "
                 "difference, e.g. 1e-5), got %g\n",
                 tolerance);
    return exit_code::bad_input;
  }
  auto config = load_config_and_plugins(line);
  if (!tolerance_given)
    tolerance = default_tolerance(config);
  // A ring in bf16 rounds the gradients on purpose (Note [a ring in bf16] in
  // actors/averaging/ring_collective.cpp), which one device never does: the wiring is
  // checked with the ring in fp32, and the user told.
  std::vector<std::string> changes = set_options(line);
  if (config.parallel.reduce_bf16) {
    std::fprintf(stderr,
                 "troupe verify: [parallel] reduce_dtype = \"bf16\" rounds the gradients on the "
                 "ring, which one device does not; the wiring is checked with reduce_dtype = "
                 "\"fp32\"\n");
    config.parallel.reduce_bf16 = false;
    changes.push_back("parallel.reduce_dtype=\"fp32\"");
  }
  // Local SGD is one device's math at sync_every = 1 with SGD only, DiLoCo where its outer
  // step is plain averaging too (Notes [local SGD] in actors/averaging/
  // allreduce_averager_actor.cpp, [DiLoCo] in actors/training/optimizer_actor.cpp): the
  // wiring is checked there.
  if (config.parallel.rule == averaging_rule::async && config.parallel.data > 1)
    throw user_error(
        "troupe verify: [parallel] averaging = \"async\" lets each replica compute "
        "on parameters up to max_staleness updates old, in an order that timing "
        "decides, which is no one device's math; verify the same model with "
        "averaging = \"central\" (and no max_staleness) instead",
        exit_code::bad_input);
  if (config.parallel.rule != averaging_rule::synchronous)
    check_local_rule_as_one_device(config, changes);
  // A config over several nodes trains as that many local processes (troupe launch),
  // which end with a checkpoint: the comparison covers the network too.
  parallel_run over_nodes;
  if (config.nodes() > 1)
    over_nodes = [&](const run_config& c, std::int64_t n) {
      scratch_directory checkpoints;
      std::vector<std::string> launch{"launch", "-n", std::to_string(c.nodes()), c.path,
                                      "--steps", std::to_string(n), "--checkpoint",
                                      checkpoints.path, "-q", "--metrics", "/dev/null"};
      for (const auto& change : changes)  // each node reads the config as changed
        launch.insert(launch.end(), {"--set", change});
      int code = launch_and_wait(launch);
      if (code != 0)
        throw user_error("the run over " + std::to_string(c.nodes()) +
                             " processes failed (exit code " + std::to_string(code) +
                             "; its messages are above)",
                         exit_code::run_failed);
      return parameters_in_checkpoint(c, checkpoints.path);
    };
  auto result = verify_against_single_device(config, steps, tolerance, over_nodes);
  std::printf("%-6s %-14s %-12s %s\n", "layer", "type", "parameter", "relative difference");
  for (const auto& d : result.differences)
    std::printf("%-6lld %-14s %-12s %.3g\n", static_cast<long long>(d.layer),
                d.layer_type.c_str(), d.name.c_str(), d.relative);
  std::printf("%s: worst relative difference %.3g after %lld steps (tolerance %.3g)\n",
              result.passed ? "PASS" : "FAIL", result.worst, static_cast<long long>(steps),
              tolerance);
  return result.passed ? exit_code::ok : exit_code::run_failed;
}

}  // namespace troupe::cli
