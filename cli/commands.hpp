// commands.hpp: the troupe subcommands and what they share.
//
// Each command is a function taking its arguments (after the command name) and returning
// the process exit code: 0 success, 1 a run failed, 2 bad input (usage, config, data).
// User errors thrown inside (config_error, data_error) are turned into messages by main.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "runtime/config/config.hpp"

namespace troupe::cli {

constexpr int exit_failure = 1;
constexpr int exit_bad_input = 2;

int run_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int verify_command(const std::vector<std::string>& args);
int layers_command(const std::vector<std::string>& args);
int check_layer_command(const std::vector<std::string>& args);
/// `troupe trace summary|timeline FILE`: reads a trace written by `troupe run --trace`.
int trace_command(const std::vector<std::string>& args);

/// A command line of the form `troupe NAME [options] OPERAND`.
struct command_line {
  boost::program_options::variables_map values;
  std::string config;  // the positional operand: CONFIG.toml (check-layer: the layer NAME)
};

/// Parses `args` with `options` plus --plugin, --help and one positional `operand`
/// ("CONFIG.toml", or check-layer's "NAME"). Prints the usage (`usage` line, then
/// `description`, then the options) and returns an exit code when the command should stop
/// here: 0 after --help, 2 for bad usage or a missing operand.
std::optional<int> parse_command_line(const std::vector<std::string>& args, const char* name,
                                      const char* description,
                                      boost::program_options::options_description options,
                                      command_line& out, const char* operand = "CONFIG.toml");

/// Loads the plugins named with --plugin, then the config, then the plugins its [run]
/// plugins lists (relative to the config file). Throws user_error.
run_config load_config_and_plugins(const command_line& line);

/// Loads the plugins named with --plugin (commands without a config).
void load_command_line_plugins(const boost::program_options::variables_map& values);

}  // namespace troupe::cli
