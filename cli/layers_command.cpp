// layers_command.cpp: `troupe layers`: the layer types and actor kinds a config can name.
#include <cstdio>

#include "actors/actor_kinds.hpp"
#include "cli/commands.hpp"
#include "runtime/layer.hpp"

namespace troupe::cli {

int layers_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf(
        "usage: troupe layers\n\nLists the layer types a config's [[model.layers]] can use, and\n"
        "the actor kinds an explicit config's [[actor]] tables can use.\n");
    return 0;
  }
  if (!args.empty()) {
    std::fprintf(stderr, "troupe layers: takes no arguments\n");
    return exit_bad_input;
  }
  std::printf("layer types:\n");
  for (const auto& [name, description] : registered_layers())
    std::printf("  %-14s %s\n", name.c_str(), description.c_str());
  std::printf("actor kinds:\n");
  for (const auto& [name, description] : registered_actor_kinds())
    std::printf("  %-14s %s\n", name.c_str(), description.c_str());
  return 0;
}

}  // namespace troupe::cli
