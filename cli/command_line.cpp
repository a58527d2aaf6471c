// command_line.cpp: option parsing shared by the commands (one positional operand each).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/plugin/plugin.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

std::optional<exit_code> parse_command_line(const std::vector<std::string>& args, const char* name,
                                      const char* description, po::options_description options,
                                      command_line& out, const char* operand) {
  // Every command that reads a config takes --set (predict, whose operand is a checkpoint,
  // adds it itself).
  if (std::string_view{operand}.find("CONFIG.toml") != std::string_view::npos)
    add_set_option(options);
  options.add_options()("plugin", po::value<std::vector<std::string>>()->composing(),
                        "load a plugin (a shared library of layers, actors, kernels); repeatable")(
      "help,h", "show this help");
  // The operand's key: a name no option has (predict has a --config of its own).
  const char* key = "operand";
  po::options_description hidden;
  hidden.add_options()(key, po::value<std::string>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add(key, 1);
  auto usage = [&](std::FILE* to) {
    std::ostringstream text;
    text << options;
    std::fprintf(to, "usage: troupe %s %s [options]\n\n%s\n\n%s", name, operand, description,
                 text.str().c_str());
  };
  if (!parse_options(args, all, positional, out.values, name)) {
    usage(stderr);
    return exit_code::bad_input;
  }
  if (out.values.count("help")) {
    usage(stdout);
    return exit_code::ok;
  }
  if (!out.values.count(key)) {
    std::fprintf(stderr, "troupe %s: missing %s\n\n", name, operand);
    usage(stderr);
    return exit_code::bad_input;
  }
  out.config = out.values[key].as<std::string>();
  return std::nullopt;
}

void load_command_line_plugins(const po::variables_map& values) {
  if (values.count("plugin"))
    for (const auto& path : values["plugin"].as<std::vector<std::string>>())
      load_plugin(path);
}

bool parse_options(const std::vector<std::string>& args, const po::options_description& all,
                   const po::positional_options_description& positional, po::variables_map& values,
                   const char* name) {
  if (args.size() > limits::max_command_line_arguments) {
    std::fprintf(stderr, "troupe %s: %zu arguments, more than the limit of %zu\n\n", name,
                 args.size(), limits::max_command_line_arguments);
    return false;
  }
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), values);
    po::notify(values);
  } catch (const po::error& e) {
    // boost's message quotes the argument whole: bounded as every echo is.
    const std::string message = e.what();
    auto cut = std::min<std::size_t>(message.size(), 400);
    while (cut < message.size() && cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
      --cut;  // at a UTF-8 character's first byte
    const auto shown = cut == message.size() ? message
                                             : message.substr(0, cut) + "... (a message of " +
                                                   std::to_string(message.size()) + " bytes)";
    std::fprintf(stderr, "troupe %s: %s\n\n", name, shown.c_str());
    return false;
  }
  return true;
}

void add_set_option(po::options_description& options) {
  options.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                        "change the config before it is read: SECTION.KEY=VALUE with a TOML "
                        "value (repeatable), e.g. --set optimizer.lr=0.01 --set "
                        "parallel.data=2 --set 'run.metrics=\"m.jsonl\"'");
}

std::vector<std::string> set_options(const command_line& line) {
  if (!line.values.count("set"))
    return {};
  return line.values["set"].as<std::vector<std::string>>();
}

run_config load_config_and_plugins(const command_line& line) {
  load_command_line_plugins(line.values);
  auto config = load_config(line.config, set_options(line));
  load_config_plugins(config);
  return config;
}

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  if (text.size() < suffix.size())
    return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[text.size() - suffix.size() + i])) !=
        suffix[i])
      return false;
  return true;
}

}  // namespace

bool picture_is_html(const std::string& command, const std::string& output) {
  if (ends_with(output, ".html") || ends_with(output, ".htm"))
    return true;
  if (ends_with(output, ".svg"))
    return false;
  throw user_error(command + ": -o " + quote_user_path(output) +
                   ": the name should end in .svg or .html (that picks the format)");
}

}  // namespace troupe::cli
