// background_run.hpp: a troupe process started in the background, for CLI tests that
// signal or watch a run while it trains (tests/cli/checkpoint_command_test.cpp,
// tests/cli/output_files_test.cpp). Spawned, not forked (Note [spawn, not fork] in
// runtime/base/spawn.hpp).
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/base/spawn.hpp"

namespace troupe::testing {

/// `troupe ARGUMENTS` in the background, its stdout and stderr into `output_file`.
struct background_run {
  explicit background_run(const std::string& arguments,
                          const std::string& output_file = "/dev/null") {
    pid = spawn_process("/bin/sh", {"-c", "exec " + std::string{TROUPE_BINARY} + " " + arguments +
                                              " > " + output_file + " 2>&1"});
  }
  /// A test that fails before wait() leaves no run behind.
  ~background_run() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  background_run(const background_run&) = delete;
  background_run& operator=(const background_run&) = delete;
  /// Its exit code, or 128 + the signal that killed it.
  int wait() {
    const int code = wait_for_exit(pid);
    pid = -1;
    return code;
  }
  pid_t pid = -1;
};

/// Waits until `path` has a line with `text` (the run is training), at most 60 s.
inline void wait_for_line(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
      if (line.find(text) != std::string::npos)
        return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("no line with " << text << " in " << path << " after 60 s");
}

}  // namespace troupe::testing
