// main.cpp: the troupe command line: picks the command and turns user errors into
// messages and exit codes (include/troupe/exit_code.hpp).
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/plugin/plugin.hpp"
#include "troupe/error.hpp"

namespace {

const char* main_usage =
    "troupe: an actor-model runtime for training neural networks.\n"
    "\n"
    "usage: troupe <command> [options]\n"
    "\n"
    "commands:\n"
    "  run CONFIG.toml      train the model a topology config describes\n"
    "  launch -n N CONFIG.toml  run a config over N processes (nodes) on this machine\n"
    "  plan CONFIG.toml     print the actors and wires a config expands into (--dot, --eject)\n"
    "  verify CONFIG.toml   check that a parallel config computes what one device computes\n"
    "  eval CONFIG.toml --checkpoint DIR  a trained model's loss and metrics on its test split\n"
    "  predict CHECKPOINT --config CONFIG.toml --input FILE  a trained model's outputs\n"
    "  layers               list the layer types and actor kinds configs can use\n"
    "  check-layer NAME     check a layer's backward against finite differences\n"
    "  calibrate CONFIG.toml  time each layer of a config at its shapes on this machine\n"
    "  simulate CONFIG.toml   predict a wiring's step time, bubble and critical path\n"
    "  trace summary|explain|timeline FILE  read a trace written by troupe run --trace\n"
    "  export CHECKPOINT -o FILE    a checkpoint's parameters as safetensors for PyTorch\n"
    "  plot METRICS.jsonl... -o FILE  training curves of one or more runs (.svg, .html)\n"
    "\n"
    "options:\n"
    "  -h, --help           show this help (also: troupe <command> --help, troupe help <command>)\n"
    "  --version            print the version\n"
    "\n"
    "exit codes: 0 success, 1 the run failed, 2 bad input (usage, config, data),\n"
    "            3 stopped by the watchdog (no progress; it prints what each actor waits for),\n"
    "            130 interrupted by SIGINT, 143 interrupted by SIGTERM (after the current step\n"
    "            and, when checkpointing, a checkpoint; a second signal exits at once)\n";

// The usage lists the codes by number.
static_assert(troupe::exit_status(troupe::exit_code::run_failed) == 1 &&
              troupe::exit_status(troupe::exit_code::bad_input) == 2 &&
              troupe::exit_status(troupe::exit_code::watchdog) == 3 &&
              troupe::exit_status(troupe::exit_code::interrupted) == 130 &&
              troupe::exit_status(troupe::exit_code::terminated) == 143);

struct command_entry {
  const char* name;
  troupe::exit_code (*run)(const std::vector<std::string>& args);
};

const command_entry commands[] = {
    {"run", troupe::cli::run_command},       {"plan", troupe::cli::plan_command},
    {"verify", troupe::cli::verify_command}, {"trace", troupe::cli::trace_command},
    {"layers", troupe::cli::layers_command}, {"check-layer", troupe::cli::check_layer_command},
    {"export", troupe::cli::export_command}, {"launch", troupe::cli::launch_command},
    {"plot", troupe::cli::plot_command},     {"calibrate", troupe::cli::calibrate_command},
    {"simulate", troupe::cli::simulate_command}, {"eval", troupe::cli::eval_command},
    {"predict", troupe::cli::predict_command},
};

troupe::exit_code run(const std::string& command, const std::vector<std::string>& args) {
  using troupe::exit_code;
  try {
    troupe::check_builtin_registrations();
    std::vector<std::string> names;  // in this order for did_you_mean's suggestions
    for (const auto& c : commands) {
      if (command == c.name)
        return c.run(args);
      names.push_back(c.name);
    }
    std::fprintf(stderr, "troupe: unknown command %s%s\n\n%s",
                 troupe::quote_user_text(command).c_str(),
                 troupe::did_you_mean(command, names).c_str(), main_usage);
    return exit_code::bad_input;
  } catch (const troupe::user_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: internal error: %s\n", command.c_str(), e.what());
    return exit_code::run_failed;
  }
}

// What a command printed must have reached its stdout: `troupe plan --eject x.toml >
// explicit.toml` on a full disk would otherwise leave half a config and exit 0. A run
// that already failed keeps its code; the lost output is reported either way.
troupe::exit_code check_stdout(const std::string& command, troupe::exit_code code) {
  errno = 0;
  std::cout.flush();  // std::cout writes through stdout's buffer: this flushes both
  int error = errno;
  bool failed = !std::cout.good();
  if (std::fflush(stdout) != 0) {
    failed = true;
    error = error != 0 ? error : errno;
  }
  if (!failed && !std::ferror(stdout))
    return code;
  // The errno of a write that failed while the command ran (a buffer filled) is gone.
  std::fprintf(stderr, "troupe %s: writing the standard output failed: %s\n", command.c_str(),
               error != 0 ? troupe::describe_errno(error).c_str()
                          : "a write failed while the command ran; the output is incomplete");
  return code == troupe::exit_code::ok ? troupe::exit_code::run_failed : code;
}

}  // namespace

namespace {

// What a crash says before the signal's usual end (its exit status 128 + N, a core where
// enabled), written with write(2) alone: made before any crash, one per signal.
std::array<std::string, 32> crash_messages;

extern "C" void on_fatal_signal(int signal_number) {
  const auto& message = crash_messages[static_cast<std::size_t>(signal_number) % 32];
  [[maybe_unused]] auto written = write(2, message.data(), message.size());
  raise(signal_number);  // SA_RESETHAND: the default action now
}

// A crash is most often a plugin's code writing where it must not; say so, and how to
// check a layer. Not under a sanitizer: its own handler reports far more.
void explain_crashes() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    crash_messages[static_cast<std::size_t>(signal_number)] =
        std::string{"\ntroupe: crashed ("} + strsignal(signal_number) +
        "). If the run loads plugins, check each plugin layer with `troupe check-layer NAME "
        "--plugin PATH`: a backward that writes to dx when it is null (as it is for a first "
        "layer) ends like this.\n";
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    action.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigaction(signal_number, &action, nullptr);
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using troupe::exit_code;
  using troupe::exit_status;
  // A file past `ulimit -f` is then a write error (EFBIG, named with the file: exit 1), not
  // a process killed by SIGXFSZ with a half-written temporary file and no word.
  std::signal(SIGXFSZ, SIG_IGN);
  explain_crashes();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(main_usage, stderr);
    return exit_status(exit_code::bad_input);
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() > 1)  // `troupe help run`: that command's help
      return exit_status(check_stdout(args[1], run(args[1], {"--help"})));
    std::fputs(main_usage, stdout);
    return exit_status(check_stdout(args[0], exit_code::ok));
  }
  if (args[0] == "--version") {
    std::printf("troupe %s\n", TROUPE_VERSION_STRING);
    return exit_status(check_stdout(args[0], exit_code::ok));
  }
  auto command = args[0];
  args.erase(args.begin());
  return exit_status(check_stdout(command, run(command, args)));
}
