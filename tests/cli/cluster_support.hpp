// cluster_support.hpp: what the tests of runs over several processes share
// (tests/cli/cluster_test.cpp, tests/cli/cluster_tls_test.cpp): a free port, a `troupe`
// process started with its own environment and its output in a file, troupe's launch
// variables, a small config, and the final parameters of two runs compared.
//
// Test-only and header-only. Not the launcher (cli/launch_command.cpp): these start each
// node by hand, so a test can give one node another config or kill it.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/tools/verify.hpp"
#include "runtime/base/spawn.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "tests/config_text.hpp"

namespace troupe::testing::cluster {

using clock_type = std::chrono::steady_clock;

/// Seconds from `start` to now.
inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// Every tensor of the newest checkpoint under `root`.
inline std::map<std::string, std::vector<float>> final_parameters(const std::string& root) {
  auto checkpoint = resolve_resume_path(root);
  return read_checkpoint_tensors(checkpoint.path, verify_checkpoint(checkpoint.path));
}

/// The same tensors, each within 1e-5 relative, measured as the equivalence test and
/// `troupe verify` measure it (compare_parameters in actors/tools/verify.hpp): the largest
/// difference over the tensor's largest magnitude. tests/actors/session/equivalence_test.cpp's
/// header says why 1e-5 separates float summation order from a wiring bug. (An
/// element-wise measure is not that test: after 20 Adam steps a weight near zero differs
/// by summation order alone; on an AMD EPYC with OpenBLAS's Haswell kernels one of PP2's
/// did by 1.35e-5 of itself, with or without nodes.)
inline void check_same_parameters(const std::map<std::string, std::vector<float>>& got,
                                  const std::map<std::string, std::vector<float>>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& entry : want) {
    // Named references, not a structured binding: clang 14 (the sanitizer builds) does not
    // let INFO's lambda capture a binding.
    const auto& name = entry.first;
    const auto& values = entry.second;
    INFO("tensor " << name);
    REQUIRE(got.count(name) == 1);
    const auto& other = got.at(name);
    REQUIRE(other.size() == values.size());
    auto differences = compare_parameters({{values}}, {{other}});
    REQUIRE(differences.size() == 1);
    CHECK(differences[0].relative <= 1e-5);
  }
}

/// A port that was free a moment ago.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// One `troupe` process started with its own environment, its output in a file.
class node_process {
 public:
  node_process(const std::vector<std::pair<std::string, std::string>>& environment,
               const std::vector<std::string>& arguments, std::string log)
      : log_(std::move(log)) {
    spawn_options options;
    options.unset_environment = {
        "TROUPE_RANK",   "TROUPE_WORLD_SIZE",  "TROUPE_COORDINATOR",  "TROUPE_LOCAL_RANK",
        "TROUPE_SECRET", "TROUPE_SECRET_FILE", "TROUPE_LAUNCHER_PID", "RANK",
        "WORLD_SIZE",    "MASTER_ADDR",        "MASTER_PORT",         "LOCAL_RANK"};
    options.set_environment = environment;
    options.output = log_;
    pid_ = spawn_process(TROUPE_BINARY, arguments, options);
  }
  ~node_process() {
    if (code_ == unset) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  node_process(const node_process&) = delete;
  node_process& operator=(const node_process&) = delete;

  /// The exit code (128 + N for a signal), or -1 if it is still running after `seconds`
  /// (it is killed then).
  int wait(double seconds) {
    if (code_ != unset)
      return code_;
    auto deadline = clock_type::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (clock_type::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = exit_code_of_status(status);
        return code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    code_ = -1;
    return code_;
  }
  void signal(int number) { ::kill(pid_, number); }
  pid_t pid() const { return pid_; }
  std::string output() const { return read_text(log_); }
  /// Waits until the output contains `text` (true), or `seconds` pass (false).
  bool wait_for_output(const std::string& text, double seconds) const {
    auto deadline = clock_type::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (clock_type::now() < deadline) {
      if (output().find(text) != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  static constexpr int unset = -1000;
  pid_t pid_ = -1;
  int code_ = unset;
  std::string log_;
};

using node_environment = std::vector<std::pair<std::string, std::string>>;

/// troupe's own variables for node `rank` of `nodes`.
inline node_environment troupe_env(int rank, int nodes, int port,
                                   const std::string& secret = "s3cret") {
  return {{"TROUPE_RANK", std::to_string(rank)},
          {"TROUPE_WORLD_SIZE", std::to_string(nodes)},
          {"TROUPE_LOCAL_RANK", std::to_string(rank)},
          {"TROUPE_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
          {"TROUPE_SECRET", secret}};
}

/// A small model on synthetic data; `parallel` and `cluster` sections appended.
inline std::string cluster_config(const std::string& parallel, std::int64_t steps = 20,
                                  const std::string& run_extra = "") {
  return "[run]\nsteps = " + std::to_string(steps) +
         "\nseed = 11\nevaluate = false\nwatchdog = 0\n" + run_extra +
         test::data_section({24, 480, 10, 20, 5}) + test::linear(16) + test::layer("relu") +
         test::linear(12) + test::layer("tanh") + test::linear(5) +
         "\n[optimizer]\ntype = \"adam\"\nlr = 0.01\n\n" + parallel;
}

}  // namespace troupe::testing::cluster
