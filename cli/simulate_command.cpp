// simulate_command.cpp: `troupe simulate CONFIG.toml`: a prediction of the config's step
// time, bubble and critical path from a simulated run (actors/tools/simulate.hpp); options and
// output only.
#include <cstdio>

#include "actors/tools/simulate.hpp"
#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/plugin/plugin.hpp"
#include "troupe/error.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code simulate_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()(
      "calibration", po::value<std::string>(),
      "job costs from this file (troupe calibrate CONFIG --json -o FILE); without it the "
      "config's layers are timed first, here, at the simulated config's shapes")(
      "repeats", po::value<std::int64_t>()->default_value(20),
      "without --calibration: time each op this many times")(
      "link", po::value<std::string>(),
      "the network between nodes on machines apart, e.g. \"25 GB/s, 5 us\" or \"100 Mbit/s, "
      "20 ms\" (GB/s, Gb/s, Gbit/s, MB/s, Mb/s or Mbit/s; ns, us, ms or s): a message between "
      "nodes leaves once its tensors are written, is handled its latency later and its "
      "tensors copied at its bandwidth; without it the config's [cluster] link (the link a "
      "run emulates), and without that the nodes are processes of this machine, as troupe "
      "launch runs them (shared memory and CAF over loopback, at the calibration's measures)")(
      "steps", po::value<std::int64_t>()->default_value(20),
      "training steps to simulate (with --search: 6 a wiring unless given)")(
      "handler-us", po::value<double>(),
      "device time of each message an actor handles, in microseconds (default: the "
      "calibration's measure, the mean handler of a short run of the model on one device; "
      "2 for an explicit config)")(
      "handover-us", po::value<double>(),
      "how much later a message to another device's thread is handled, in microseconds "
      "(default: the calibration's measure of a thread's wake-up)")(
      "contention", po::value<double>(),
      "how many times longer a job takes while another device of its node computes "
      "(default: the calibration's measure, two threads running the model at once)")(
      "host-us", po::value<double>(),
      "with --cores: what each turn of a host actor (the trainer) takes of a "
      "core, in microseconds (default: the calibration's measure, the host thread's CPU "
      "time a turn; 0 without one)")(
      "cores", po::value<int>()->default_value(0),
      "the cores the devices share, device k on core k mod cores as troupe run places "
      "them (e.g. 2 to predict four devices on this 2-core machine); handlers, the host "
      "actors' turns (--host-us) and sends to other nodes then take time of a core too "
      "(docs/guide/prediction.md); 0: a core each")(
      "search", po::value<std::int64_t>(),
      "try every wiring of the model that fits this many devices (data x pipeline, "
      "micro-batches, schedules) and print the fastest by predicted samples/s, with each "
      "one's peak memory")("top", po::value<std::int64_t>()->default_value(5),
                           "with --search: how many to print")(
      "trace", po::value<std::string>(),
      "write the simulated run's trace here (virtual times; troupe trace summary, explain "
      "and timeline read it)")("json", "print JSON instead of text");
  command_line line;
  if (auto stop = parse_command_line(
          args, "simulate",
          "Predicts a wiring before it runs: runs CONFIG.toml's actors, credits, turns and\n"
          "schedules as troupe run does, on simulated devices whose jobs take the times a\n"
          "calibration of this machine gives (scaled by the rows they compute), any number\n"
          "of devices and nodes in this process. Prints the predicted step time and\n"
          "samples/s, the bubble of each pipeline stage, each device's peak memory (the\n"
          "bytes of tensors and the micro-batches it holds at once, counted as the\n"
          "simulated run allocates them), and a step's critical path. The layers' math runs\n"
          "for real, one job at a time, so simulating N devices takes about as long as the\n"
          "run would on one core, and needs the memory the run would.",
          options, line))
    return *stop;
  auto config = load_config_and_plugins(line);
  simulate_options o;
  o.steps = line.values["steps"].as<std::int64_t>();
  if (line.values.count("handler-us")) {
    o.handler_us = line.values["handler-us"].as<double>();
    if (!(o.handler_us >= 0))
      throw user_error("troupe simulate: --handler-us should be between 0 and 1e6");
  }
  if (line.values.count("contention")) {
    o.contention = line.values["contention"].as<double>();
    if (!(o.contention >= 1))
      throw user_error("troupe simulate: --contention should be a factor of at least 1");
  }
  if (line.values.count("host-us")) {
    o.host_us = line.values["host-us"].as<double>();
    if (!(o.host_us >= 0))
      throw user_error("troupe simulate: --host-us should be between 0 and 1e6");
  }
  if (line.values.count("handover-us")) {
    o.handover_us = line.values["handover-us"].as<double>();
    if (!(o.handover_us >= 0))
      throw user_error("troupe simulate: --handover-us should be at least 0");
  }
  o.cores = line.values["cores"].as<int>();
  if (line.values.count("link"))
    o.link = parse_link(line.values["link"].as<std::string>());
  if (line.values.count("trace"))
    check_output_file(line.values["trace"].as<std::string>(), "the trace file");
  // Options that would do nothing here are refused, not ignored.
  if (!line.values.count("search") && !line.values["top"].defaulted())
    throw user_error("troupe simulate: --top is a --search option");
  if (line.values.count("calibration") && !line.values["repeats"].defaulted())
    throw user_error(
        "troupe simulate: --repeats times the layers here; with --calibration "
        "nothing is timed");
  calibration costs;
  if (line.values.count("calibration")) {
    const auto path = line.values["calibration"].as<std::string>();
    costs = parse_calibration_json(
        read_file_capped(path, limits::max_config_bytes, "calibration file"), path);
  } else {
    costs = calibrate(config, line.config, line.values["repeats"].as<std::int64_t>());
  }
  if (line.values.count("search")) {
    if (line.values.count("trace") || line.values.count("json"))
      throw user_error("troupe simulate: --search prints a table; --trace and --json are for one "
                       "wiring");
    const auto top = line.values["top"].as<std::int64_t>();
    if (top < 1 || top > 1000)
      throw user_error("troupe simulate: --top should be between 1 and 1000");
    if (line.values["steps"].defaulted())
      o.steps = 6;  // per wiring: a few steps after the first
    const auto tried = search_wirings(config, costs, o, line.values["search"].as<std::int64_t>());
    std::fputs(format_search_text(tried, static_cast<std::size_t>(top)).c_str(), stdout);
    return exit_code::ok;
  }
  const auto p = simulate_run(config, costs, o);
  if (line.values.count("trace"))
    write_whole_file(line.values["trace"].as<std::string>(), p.trace_json + "\n",
                     "the trace file");
  std::fputs((line.values.count("json") ? format_prediction_json(p) : format_prediction_text(p))
                 .c_str(),
             stdout);
  return exit_code::ok;
}

}  // namespace troupe::cli
