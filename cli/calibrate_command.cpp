// calibrate_command.cpp: `troupe calibrate CONFIG.toml`: what each op of a config costs on
// this machine (actors/tools/calibrate.hpp); options and output only.
#include <cstdio>

#include "actors/tools/calibrate.hpp"
#include "cli/commands.hpp"
#include "runtime/base/output_file.hpp"
#include "troupe/error.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code calibrate_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("repeats", po::value<std::int64_t>()->default_value(20),
                        "time each op this many times (the median is kept)")(
      "json", "print JSON instead of a table")("output,o", po::value<std::string>(),
                                               "write the JSON here (and print the table)");
  command_line line;
  if (auto stop = parse_command_line(
          args, "calibrate",
          "Times every layer of CONFIG.toml at the input shape and micro-batch rows the\n"
          "config gives it (global batch / (replicas x micro-batches)) on one CPU thread,\n"
          "as a cpu:N device runs it: forward, backward, and backward_input /\n"
          "backward_weight for layers that split their backward (ZB-H1); then the\n"
          "optimizer's update per parameter, the bandwidth of a copy, of a sum and of a\n"
          "batch's gather (the loader's rows into one buffer), and the loss of a\n"
          "micro-batch. Medians of --repeats runs after two warm-ups, on random inputs and\n"
          "parameters; between rounds of the layers the rest of a step (the update, a\n"
          "gather) leaves the caches as a run does, and the table says how stable the\n"
          "rounds were. Then a message to another device's thread (its wake-up), how much\n"
          "longer a job takes with two devices at once (they share the memory system),\n"
          "from steps 10-39 of a 40-step traced run of the model on one device (not for an\n"
          "explicit config) the mean time a message handled and a host turn (the\n"
          "trainer's, the loader's) take, and a message between two processes of this\n"
          "machine through CAF over loopback (its latency, its CPU time, a 4 MiB tensor's\n"
          "bandwidth). The JSON is what troupe simulate --calibration reads.",
          options, line))
    return *stop;
  auto config = load_config_and_plugins(line);
  if (line.values.count("output"))  // before the timings: exit 2 at once, not 1 at the end
    check_output_file(line.values["output"].as<std::string>(), "the calibration");
  for (const auto& device : config.parallel.devices)
    if (device.id.type == device_type::cuda) {
      std::fprintf(stderr,
                   "note: %s names GPU devices (%s); calibrate times its ops on a CPU thread "
                   "only (troupe simulate models CPU devices)\n",
                   line.config.c_str(), device.name.c_str());
      break;
    }
  const auto result = calibrate(config, line.config, line.values["repeats"].as<std::int64_t>());
  const auto json = format_calibration_json(result);
  if (line.values.count("output")) {
    write_whole_file(line.values["output"].as<std::string>(), json, "the calibration");
    std::fputs(format_calibration_text(result).c_str(), stdout);
  } else {
    std::fputs((line.values.count("json") ? json : format_calibration_text(result)).c_str(),
               stdout);
  }
  return exit_code::ok;
}

}  // namespace troupe::cli
