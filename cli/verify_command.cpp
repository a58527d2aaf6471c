// verify_command.cpp: `troupe verify CONFIG.toml`: does this wiring compute what one
// device computes?
#include <cstdio>

#include "actors/verify.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code verify_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("steps", po::value<std::int64_t>()->default_value(20),
                        "optimizer steps to train both runs")(
      "tolerance", po::value<double>()->default_value(1e-5),
      "largest relative difference ||a - b||_inf / ||a||_inf allowed per parameter");
  command_line line;
  if (auto stop = parse_command_line(
          args, "verify",
          "Trains CONFIG.toml's wiring and the same model on one device (same seed, data\n"
          "and global batch) for --steps steps and compares every parameter. Parallelism\n"
          "should change speed, never the math: differences come only from float\n"
          "summation order. Exit code 0 when all are within --tolerance, 1 otherwise.",
          options, line))
    return *stop;
  auto steps = line.values["steps"].as<std::int64_t>();
  if (steps < 1) {
    std::fprintf(stderr, "troupe verify: --steps must be at least 1\n");
    return exit_code::bad_input;
  }
  auto tolerance = line.values["tolerance"].as<double>();
  auto config = load_config_and_plugins(line);
  auto result = verify_against_single_device(config, steps, tolerance);
  std::printf("%-8s %-10s %s\n", "layer", "parameter", "relative difference");
  for (const auto& d : result.differences)
    std::printf("%-8lld %-10lld %.3g\n", static_cast<long long>(d.layer),
                static_cast<long long>(d.parameter), d.relative);
  std::printf("%s: worst relative difference %.3g after %lld steps (tolerance %.3g)\n",
              result.passed ? "PASS" : "FAIL", result.worst, static_cast<long long>(steps),
              tolerance);
  return result.passed ? exit_code::ok : exit_code::run_failed;
}

}  // namespace troupe::cli
