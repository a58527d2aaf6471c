// plan_command.cpp: `troupe plan CONFIG.toml`: the actor graph a config expands into.
#include <cstdio>
#include <iostream>

#include "actors/session/session.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code plan_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("dot", "print Graphviz DOT instead of tables")(
      "eject", "print the explicit [[actor]]/[[wire]] config that runs identically");
  command_line line;
  if (auto stop = parse_command_line(
          args, "plan",
          "Checks CONFIG.toml and prints the actors (name, kind, device, replica, stage,\n"
          "layer) and wires (from, to, kind, capacity) it expands into, and the layers that\n"
          "run fused (one actor, one job a pass: [run] fuse_layers), without running\n"
          "anything. --dot draws the graph (troupe plan --dot x.toml | dot -Tsvg > x.svg);\n"
          "--eject writes an explicit config to edit: move a layer to another device,\n"
          "change a capacity, insert an actor on a wire.",
          options, line))
    return *stop;
  if (line.values.count("dot") && line.values.count("eject")) {
    std::fprintf(stderr, "troupe plan: choose one of --dot and --eject\n");
    return exit_code::bad_input;
  }
  auto config = load_config_and_plugins(line);
  auto prepared = prepare_session(config);
  if (line.values.count("dot"))
    std::cout << format_dot(prepared.graph);
  else if (line.values.count("eject"))
    std::cout << format_explicit(prepared.graph, config);
  else {
    std::cout << format_table(prepared.graph) << format_fusion(prepared.fusion);
    if (!prepared.plan.splits_evenly()) {  // [parallel] balance
      const auto& rows = prepared.plan.replica_rows;
      std::cout << "\nrows of each step's batch of " << prepared.plan.batch_size
                << " ([parallel] balance):";
      for (std::size_t r = 0; r < rows.size(); ++r)
        std::cout << (r == 0 ? " " : ", ") << "r" << r << " " << rows[r];
      std::cout << "\n";
    }
  }
  return exit_code::ok;
}

}  // namespace troupe::cli
