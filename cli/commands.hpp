// commands.hpp: the troupe subcommands and what they share.
//
// Each command is a function taking its arguments (after the command name) and returning
// the process exit code (include/troupe/exit_code.hpp).
// User errors thrown inside (config_error, data_error) are turned into messages by main.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "runtime/config/config.hpp"
#include "troupe/exit_code.hpp"

namespace troupe::cli {

exit_code run_command(const std::vector<std::string>& args);
/// `troupe launch -n N CONFIG.toml [run options]`: N processes of one run on this machine.
exit_code launch_command(const std::vector<std::string>& args);
exit_code plan_command(const std::vector<std::string>& args);
/// `troupe calibrate CONFIG.toml`: what each op of the config costs here.
exit_code calibrate_command(const std::vector<std::string>& args);
/// `troupe simulate CONFIG.toml`: the config's run predicted on simulated devices.
exit_code simulate_command(const std::vector<std::string>& args);
exit_code verify_command(const std::vector<std::string>& args);
/// `troupe eval CONFIG.toml --checkpoint DIR`: a checkpoint's loss and metrics on a split.
exit_code eval_command(const std::vector<std::string>& args);
/// `troupe predict CHECKPOINT --config CONFIG.toml --input FILE`: a model's outputs.
exit_code predict_command(const std::vector<std::string>& args);
exit_code layers_command(const std::vector<std::string>& args);
exit_code check_layer_command(const std::vector<std::string>& args);
/// `troupe trace summary|timeline FILE`: reads a trace written by `troupe run --trace`.
exit_code trace_command(const std::vector<std::string>& args);
/// `troupe export CHECKPOINT -o FILE`: a checkpoint's parameters for PyTorch.
exit_code export_command(const std::vector<std::string>& args);
/// `troupe plot METRICS.jsonl... -o FILE`: training curves of one or more runs.
exit_code plot_command(const std::vector<std::string>& args);

/// A command line of the form `troupe NAME [options] OPERAND`.
struct command_line {
  boost::program_options::variables_map values;
  std::string config;  // the positional operand: CONFIG.toml (check-layer: the layer NAME)
};

/// Parses `args` with `options` plus --plugin, --help and one positional `operand`
/// ("CONFIG.toml", or check-layer's "NAME"). Prints the usage (`usage` line, then
/// `description`, then the options) and returns an exit code when the command should stop
/// here: ok after --help, bad_input for bad usage or a missing operand.
std::optional<exit_code> parse_command_line(const std::vector<std::string>& args, const char* name,
                                      const char* description,
                                      boost::program_options::options_description options,
                                      command_line& out, const char* operand = "CONFIG.toml");

/// Parses `args` into `values` (at most limits::max_command_line_arguments of them). On bad
/// usage prints "troupe NAME: what is wrong" (quoting no more than a few hundred bytes of
/// it) and returns false; the caller prints its usage.
bool parse_options(const std::vector<std::string>& args,
                   const boost::program_options::options_description& all,
                   const boost::program_options::positional_options_description& positional,
                   boost::program_options::variables_map& values, const char* name);

/// Adds --set SECTION.KEY=VALUE (repeatable): what every command that reads a config takes.
/// parse_command_line adds it for an operand of CONFIG.toml.
void add_set_option(boost::program_options::options_description& options);
/// The --set values, in the order given.
std::vector<std::string> set_options(const command_line& line);

/// Loads the plugins named with --plugin, then the config with the --set changes, then the
/// plugins its [run] plugins lists (relative to the config file). Throws user_error.
run_config load_config_and_plugins(const command_line& line);

/// Whether a picture's -o path asks for HTML (.html, .htm) rather than SVG (.svg), any
/// case; throws user_error ("<command>: -o '...': the name should end in .svg or .html")
/// for anything else.
bool picture_is_html(const std::string& command, const std::string& output);

/// Loads the plugins named with --plugin (commands without a config).
void load_command_line_plugins(const boost::program_options::variables_map& values);

}  // namespace troupe::cli
