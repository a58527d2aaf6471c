// run_troupe.hpp: running the troupe binary from a test and capturing what it prints.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace troupe::testing {

struct command_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs `troupe ARGUMENTS` (the binary this build made) through the shell.
inline command_result run_troupe(const std::string& arguments) {
  command_result result;
  std::string command = std::string{TROUPE_BINARY} + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    result.output.append(buffer, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace troupe::testing
