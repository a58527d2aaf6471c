// launch_command.cpp: `troupe launch -n N CONFIG.toml [run options]`: one run, N local
// processes.
//
// Starts N copies of `troupe run CONFIG.toml [run options]` on this machine, each told its
// node by troupe's own variables (TROUPE_RANK, TROUPE_WORLD_SIZE, TROUPE_LOCAL_RANK,
// TROUPE_COORDINATOR), with a fresh shared secret unless one is set, and waits for them.
// Rank 0 coordinates, prints progress and writes the metrics; the exit code is the run's.
// No process is left behind: once one has ended badly, the others get 20 s (more than
// the default node_timeout and a margin) to notice and end too, with its message (a lost
// node's name and last step), or none when it ended on bad input (exit 2: it has joined
// no run, and rank 0 would wait for it the whole [cluster] timeout); then they get
// SIGTERM, which ends a node at its next step or at once while the nodes meet, and 10 s
// later SIGKILL. A node stopped so does not decide the exit code: the first node that
// failed does. SIGINT and SIGTERM sent to the launcher alone are passed to rank 0, which
// stops the run on every node.
//
// Not here: across machines (a launcher there, torchrun, Slurm or mpirun, starts one
// `troupe run` per node: docs/guide/nodes.md, "Starting the nodes").
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "cli/commands.hpp"
#include "runtime/base/spawn.hpp"
#include "runtime/net/secret.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

std::atomic<int> forwarded_signal{0};

extern "C" void remember_signal(int signal) { forwarded_signal.store(signal); }

// A port that was free a moment ago on loopback (the coordinator binds it again).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw user_error(std::string("troupe launch: cannot open a socket: ") + std::strerror(errno),
                     exit_code::run_failed);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t size = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0)
    port = ntohs(address.sin_port);
  ::close(fd);
  if (port == 0)
    throw user_error("troupe launch: no free port on 127.0.0.1; give one with --port",
                     exit_code::run_failed);
  return port;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// The command line cut in two: what the launcher reads itself, and what goes on to each node.
struct launch_arguments {
  std::vector<std::string> own;     // the launcher's options, then CONFIG.toml
  std::vector<std::string> passed;  // the `troupe run` options after CONFIG.toml
  std::string config;               // CONFIG.toml, empty when not given
};

// Everything after CONFIG.toml goes to each `troupe run`: find it first, so that the options
// parser sees only the launcher's own.
launch_arguments split_arguments(const std::vector<std::string>& args) {
  launch_arguments out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    bool takes_value =
        a == "-n" || a == "--nodes" || a == "--port" || a == "--plugin" || a == "--set";
    if (out.config.empty() && !a.empty() && a[0] != '-') {
      out.config = a;
      continue;
    }
    // After CONFIG.toml the launcher's own options (troupe run has none of these names,
    // and --plugin is every node's either way) are still the launcher's; the rest go on.
    const bool own_option = out.config.empty() || a == "-n" || a == "--nodes" || a == "--port" ||
                            a.rfind("--nodes=", 0) == 0 || a.rfind("--port=", 0) == 0;
    auto& to = own_option ? out.own : out.passed;
    to.push_back(a);
    if (takes_value && i + 1 < args.size())
      to.push_back(args[++i]);
  }
  if (!out.config.empty())
    out.own.push_back(out.config);
  return out;
}

// Starts the N nodes, rank 0 first; apart from the waiting so that a failed start kills just
// the nodes started before it.
std::vector<pid_t> spawn_nodes(const std::string& self, const launch_arguments& arguments,
                               int nodes, int port, const std::string& secret) {
  // Each node in its own process group, so that a Ctrl-C at the terminal reaches the
  // launcher alone, which passes it on to rank 0 once (a second one would stop it at
  // once). TROUPE_LAUNCHER_PID has each node end when the launcher dies (Note [a node
  // ends with its launcher] in cli/run_command.cpp). Started by posix_spawn, not fork
  // (Note [spawn, not fork] in runtime/base/spawn.hpp).
  std::vector<pid_t> children;
  for (int rank = 0; rank < nodes; ++rank) {
    spawn_options spawn;
    spawn.own_process_group = true;
    spawn.set_environment = {{"TROUPE_RANK", std::to_string(rank)},
                             {"TROUPE_WORLD_SIZE", std::to_string(nodes)},
                             {"TROUPE_LOCAL_RANK", std::to_string(rank)},
                             {"TROUPE_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
                             {"TROUPE_LAUNCHER_PID", std::to_string(::getpid())}};
    if (!secret.empty())
      spawn.set_environment.emplace_back("TROUPE_SECRET", secret);
    std::vector<std::string> run_arguments{"run", arguments.config};
    run_arguments.insert(run_arguments.end(), arguments.passed.begin(), arguments.passed.end());
    try {
      children.push_back(spawn_process(self, run_arguments, spawn));
    } catch (const std::system_error& e) {
      for (pid_t child : children)  // no node is left behind
        ::kill(child, SIGKILL);
      for (pid_t child : children)
        wait_for_exit(child);
      throw user_error(std::string("troupe launch: ") + e.what(), exit_code::run_failed);
    }
  }
  return children;
}

// Waits for every node and gives the run's exit code; apart from the starting because the
// ending (grace, SIGTERM, SIGKILL) is a state machine of its own.
exit_code wait_for_nodes(const std::vector<pid_t>& children) {
  // Wait for all; after a bad end, the rest get a grace period, then SIGTERM, then SIGKILL.
  using clock = std::chrono::steady_clock;
  std::vector<int> codes(children.size(), -1);
  std::vector<bool> stopped(children.size(), false);  // signalled by us, not by the run
  std::size_t running = children.size();
  enum class ending { no, grace, terminated } phase = ending::no;
  clock::time_point next_at{};  // when the phase's time is up
  int first_failure = -1;
  auto signal_the_rest = [&](int signal, const char* what) {
    for (std::size_t k = 0; k < children.size(); ++k)
      if (codes[k] < 0) {
        std::fprintf(stderr, "troupe launch: node%zu did not end with the others; %s\n", k, what);
        ::kill(children[k], signal);
        stopped[k] = true;
      }
  };
  while (running > 0) {
    if (int signal = forwarded_signal.exchange(0); signal != 0 && codes[0] < 0)
      ::kill(children[0], signal);
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (std::size_t k = 0; k < children.size(); ++k)
        if (children[k] == pid) {
          codes[k] = exit_code_of_status(status);
          --running;
          if (codes[k] != 0 && first_failure < 0) {
            first_failure = static_cast<int>(k);
            phase = ending::grace;
            next_at = clock::now() + (codes[k] == static_cast<int>(exit_code::bad_input)
                                          ? std::chrono::seconds(0)
                                          : std::chrono::seconds(20));
          }
        }
      continue;
    }
    if (phase == ending::grace && clock::now() >= next_at) {
      signal_the_rest(SIGTERM, "stopping it");
      phase = ending::terminated;
      next_at = clock::now() + std::chrono::seconds(10);
    } else if (phase == ending::terminated && clock::now() >= next_at) {
      signal_the_rest(SIGKILL, "killing it");
      phase = ending::no;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (codes[0] != 0 && !stopped[0])
    return static_cast<exit_code>(codes[0]);
  if (first_failure >= 0)
    return static_cast<exit_code>(codes[static_cast<std::size_t>(first_failure)]);
  return exit_code::ok;
}

}  // namespace

exit_code launch_command(const std::vector<std::string>& args) {
  auto arguments = split_arguments(args);

  po::options_description options("options");
  options.add_options()("nodes,n", po::value<int>(), "how many processes (nodes) to start")(
      "port", po::value<int>(), "the coordinator's port on 127.0.0.1 (default: a free one)");
  command_line line;
  if (auto stop = parse_command_line(
          arguments.own, "launch",
          "Runs CONFIG.toml over N processes on this machine: N copies of\n"
          "`troupe run CONFIG.toml [run options]`, rank 0 the coordinator (it prints\n"
          "progress and writes metrics). Options after CONFIG.toml other than -n and\n"
          "--port go to troupe run (see troupe run --help). Each process is one node\n"
          "of [cluster]: its devices are those named \"nodeK/cpu:N\", node0's also plain\n"
          "\"cpu:N\". A fresh shared secret is made unless TROUPE_SECRET or\n"
          "TROUPE_SECRET_FILE is set. Exit code: the run's (rank 0's, or the first\n"
          "failing node's).",
          options, line, "-n N CONFIG.toml"))
    return *stop;
  if (!line.values.count("nodes")) {
    std::fprintf(stderr, "troupe launch: missing -n N (how many processes)\n");
    return exit_code::bad_input;
  }
  // Plugins and changes named before CONFIG.toml are every node's: each `troupe run` takes
  // them.
  if (line.values.count("plugin"))
    for (const auto& plugin : line.values["plugin"].as<std::vector<std::string>>())
      arguments.passed.insert(arguments.passed.begin(), {"--plugin", plugin});
  for (const auto& change : set_options(line))
    arguments.passed.insert(arguments.passed.begin(), {"--set", change});
  const int nodes = line.values["nodes"].as<int>();
  if (nodes < 1 || nodes > 64) {
    std::fprintf(stderr, "troupe launch: -n must be in [1, 64] processes on one machine, got %d\n",
                 nodes);
    return exit_code::bad_input;
  }
  int port = 0;
  if (line.values.count("port")) {
    port = line.values["port"].as<int>();
    if (port < 1 || port > 65535) {
      std::fprintf(stderr, "troupe launch: --port must be in [1, 65535], got %d\n", port);
      return exit_code::bad_input;
    }
  } else {
    port = free_port();
  }
  std::string secret;
  if (std::getenv("TROUPE_SECRET") == nullptr && std::getenv("TROUPE_SECRET_FILE") == nullptr)
    secret = hex(net::random_nonce(32));

  const auto self = own_executable();

  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  return wait_for_nodes(spawn_nodes(self, arguments, nodes, port, secret));
}

}  // namespace troupe::cli
