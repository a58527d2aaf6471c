// main.cpp: the troupe command line.
//
//   troupe run CONFIG.toml [--metrics FILE] [--quiet] [--no-progress-bar]
//   troupe layers
//   troupe --version | --help
//
// Exit codes: 0 success, 1 a run failed, 2 bad input (usage, config, data).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "actors/session.hpp"
#include "runtime/layer.hpp"

namespace po = boost::program_options;

namespace {

constexpr int exit_failure = 1;
constexpr int exit_bad_input = 2;

const char* main_usage =
    "troupe: an actor-model runtime for training neural networks.\n"
    "\n"
    "usage: troupe <command> [options]\n"
    "\n"
    "commands:\n"
    "  run CONFIG.toml   train the model a topology config describes\n"
    "  layers            list the layer types configs can use\n"
    "\n"
    "options:\n"
    "  -h, --help        show this help (also: troupe <command> --help)\n"
    "  --version         print the version\n"
    "\n"
    "exit codes: 0 success, 1 the run failed, 2 bad input (usage, config, data)\n";

int run_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("help,h", "show this help")(
      "metrics", po::value<std::string>(), "write metrics (JSON lines) here instead of [run] metrics")(
      "quiet,q", "print nothing but errors and the final result")(
      "no-progress-bar", "print progress as plain lines even on a terminal");
  po::options_description hidden;
  hidden.add_options()("config", po::value<std::string>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("config", 1);
  auto usage = [&](std::FILE* out) {
    std::ostringstream text;
    text << options;
    std::fprintf(out,
                 "usage: troupe run CONFIG.toml [options]\n\n"
                 "Trains the model that CONFIG.toml describes ([run], [data], [model],\n"
                 "[optimizer], [parallel]); see config/fashion_mlp.toml. Progress goes to\n"
                 "stdout, metrics to a JSON-lines file, errors to stderr.\n\n%s",
                 text.str().c_str());
  };
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "troupe run: %s\n\n", e.what());
    usage(stderr);
    return exit_bad_input;
  }
  if (vm.count("help")) {
    usage(stdout);
    return 0;
  }
  if (!vm.count("config")) {
    std::fprintf(stderr, "troupe run: missing CONFIG.toml\n\n");
    usage(stderr);
    return exit_bad_input;
  }
  auto config = troupe::load_config(vm["config"].as<std::string>());
  troupe::session_options session;
  session.quiet = vm.count("quiet") > 0;
  session.progress_bar = !vm.count("no-progress-bar") && isatty(fileno(stdout));
  if (vm.count("metrics"))
    session.metrics_path = vm["metrics"].as<std::string>();
  auto result = troupe::run_session(config, session);
  const auto& outcome = result.outcome;
  if (outcome.exit_code != 0) {
    std::fprintf(stderr, "troupe run: %s\n", outcome.failure.c_str());
    return outcome.exit_code;
  }
  std::printf("done: %lld steps in %.1f s (%.0f samples/s)", static_cast<long long>(outcome.steps),
              outcome.train_seconds, outcome.samples_per_second);
  if (outcome.test_accuracy >= 0)
    std::printf(", test accuracy %.2f%%", 100.0 * outcome.test_accuracy);
  std::printf("\n");
  if (outcome.device_utilisation.size() > 1) {
    std::printf("device utilisation:");
    for (const auto& [name, share] : outcome.device_utilisation)
      std::printf(" %s %.0f%%", name.c_str(), 100.0 * share);
    std::printf("\n");
  }
  return 0;
}

int layers_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("usage: troupe layers\n\nLists the layer types a config's [[model.layers]] can use.\n");
    return 0;
  }
  for (const auto& [name, description] : troupe::registered_layers())
    std::printf("%-12s %s\n", name.c_str(), description.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(main_usage, args.empty() ? stderr : stdout);
    return args.empty() ? exit_bad_input : 0;
  }
  if (args[0] == "--version") {
    std::printf("troupe %s\n", TROUPE_VERSION_STRING);
    return 0;
  }
  auto command = args[0];
  args.erase(args.begin());
  try {
    if (command == "run")
      return run_command(args);
    if (command == "layers")
      return layers_command(args);
    std::fprintf(stderr, "troupe: unknown command '%s'%s\n\n%s", command.c_str(),
                 troupe::did_you_mean(command, {"run", "layers"}).c_str(), main_usage);
    return exit_bad_input;
  } catch (const troupe::user_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: internal error: %s\n", command.c_str(), e.what());
    return exit_failure;
  }
}
