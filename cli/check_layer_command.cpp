// check_layer_command.cpp: `troupe check-layer NAME`: the finite-difference gradient check
// of any registered layer, built-in or from a plugin.
#include <cstdio>
#include <sstream>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/model/layer_check.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

// "out=8" -> integer 8; "eps=1e-5" -> float; "bias=false" -> boolean; else a string.
setting_value parse_setting(const std::string& text, std::string& key) {
  auto equals = text.find('=');
  if (equals == std::string::npos || equals == 0)
    throw user_error("--set expects KEY=VALUE, found " + quote_user_text(text));
  key = text.substr(0, equals);
  auto value = text.substr(equals + 1);
  source_position where{"--set " + quote_user_text(text)};
  if (value == "true" || value == "false")
    return {value == "true", where};
  try {
    std::size_t used = 0;
    auto integer = std::stoll(value, &used);
    if (used == value.size())
      return {static_cast<std::int64_t>(integer), where};
    auto number = std::stod(value, &used);
    if (used == value.size())
      return {number, where};
  } catch (const std::exception&) {
  }
  return {value, where};
}

/// "7" -> (7); "1x28x28" (or "1,28,28") -> (1, 28, 28): the per-sample input shape.
shape_t parse_input_shape(const std::string& text) {
  const auto refuse = [&] {
    return user_error("--input expects a size or sizes joined by 'x' (7, or 1x28x28 for an "
                      "image), each a positive integer; found " +
                      quote_user_text(text));
  };
  shape_t shape;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find_first_of("x,", start);
    const auto part = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
      throw refuse();
    try {
      shape.push_back(std::stoll(part));
    } catch (const std::exception&) {
      throw refuse();
    }
    if (shape.back() < 1 || shape.size() > 8)
      throw refuse();
    if (end == std::string::npos)
      return shape;
    start = end + 1;
  }
}

}  // namespace

exit_code check_layer_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("input", po::value<std::string>()->default_value("7"),
                        "the per-sample input shape: features (7), or an image as CxHxW "
                        "(1x28x28)")(
      "batch", po::value<std::int64_t>()->default_value(3), "samples")(
      "seed", po::value<std::uint64_t>()->default_value(1), "seed for inputs and parameters")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "a layer setting KEY=VALUE, as in [[model.layers]] (repeatable), e.g. --set out=5");
  command_line line;
  if (auto stop = parse_command_line(
          args, "check-layer",
          "Runs layer NAME's backward against central finite differences of its forward\n"
          "(dx and every parameter gradient), element by element: each within 0.01\n"
          "relative plus the differences' own noise (estimated from two steps). Checks\n"
          "that accumulate adds, that a split backward computes what backward does, and\n"
          "that backward with dx = null (a first layer's) neither writes it nor skips the\n"
          "parameter gradients (in a child process); checks again at drawn values of the\n"
          "settings the layer declares that --set does not give; prints the worst element.\n"
          "Exit code 0 when it passes, 1 when it does not.",
          options, line, "NAME"))
    return *stop;
  const auto& values = line.values;
  load_command_line_plugins(values);
  layer_config layer;
  layer.type = line.config;
  layer.where = layer.type_where = source_position{"the command line"};
  if (values.count("set"))
    for (const auto& text : values["set"].as<std::vector<std::string>>()) {
      std::string key;
      auto value = parse_setting(text, key);
      layer.settings[key] = value;
    }
  gradient_check_options check;
  check.input_shape = parse_input_shape(values["input"].as<std::string>());
  check.batch = values["batch"].as<std::int64_t>();
  check.seed = values["seed"].as<std::uint64_t>();
  if (check.batch < 1) {
    std::fprintf(stderr, "troupe check-layer: --batch must be at least 1\n");
    return exit_code::bad_input;
  }
  auto result = check_layer_gradients(layer, check);
  std::printf("%s\n", result.summary.c_str());
  for (const auto& failure : result.failures)
    std::printf("  FAIL %s\n", failure.c_str());
  std::printf("%s\n", result.passed ? "PASS" : "FAIL");
  return result.passed ? exit_code::ok : exit_code::run_failed;
}

}  // namespace troupe::cli
