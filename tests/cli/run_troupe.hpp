// run_troupe.hpp: running the troupe binary from a test and capturing what it prints, and
// writing the config files it reads.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/temp_files.hpp"

namespace troupe::testing {

struct command_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs the shell command `command` and collects what it prints on stdout, and its exit
/// code (-1 when a signal ended it).
inline command_result run_shell(const std::string& command) {
  command_result result;
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

/// Runs `troupe ARGUMENTS` (the binary this build made) through the shell.
inline command_result run_troupe(const std::string& arguments) {
  return run_shell(std::string{TROUPE_BINARY} + " " + arguments + " 2>&1");
}

/// Writes `text` to a fresh temporary file named after `name`; its path.
inline std::string write_config(const std::string& name, const std::string& text) {
  auto path = std::filesystem::path{troupe::test::temp_file("troupe_cli_" + name + ".toml")};
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace troupe::testing
