// layers_command.cpp: `troupe layers`: the layer types, losses and actor kinds a config can
// name.
#include <cstdio>

#include "actors/base/actor_kinds.hpp"
#include "cli/commands.hpp"
#include "runtime/graph/actor_signature.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/model/loss.hpp"
#include "runtime/plugin/plugin.hpp"

namespace troupe::cli {

exit_code layers_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf(
        "usage: troupe layers [--plugin PATH]...\n\nLists the layer types a config's "
        "[[model.layers]] can use, the losses its\n[model] loss can name, and the actor kinds "
        "an explicit config's [[actor]] tables\ncan use, with those of the plugins named.\n");
    return exit_code::ok;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--plugin" || i + 1 == args.size()) {
      std::fprintf(stderr, "troupe layers: unexpected '%s' (usage: troupe layers [--plugin PATH]...)\n",
                   args[i].c_str());
      return exit_code::bad_input;
    }
    load_plugin(args[++i]);
  }
  // A plugin's entries are marked with its name: "[plugin my_layers] ...".
  const auto line = [](const std::string& name, const std::string& description,
                       const std::string& what) {
    const auto plugin = plugin_that_registered(what + " '" + name + "'");
    const auto mark = plugin.empty() ? std::string{} : "[plugin " + plugin + "] ";
    std::printf("  %-18s %s%s\n", name.c_str(), mark.c_str(), description.c_str());
  };
  std::printf("layer types:\n");
  for (const auto& [name, description] : registered_layers())
    line(name, description, "layer type");
  std::printf("losses:\n");
  for (const auto& [name, description] : registered_losses())
    line(name, description, "loss");
  std::printf("actor kinds:\n");
  for (const auto& [name, description] : registered_actor_kinds()) {
    line(name, description, "actor kind");
    if (const auto* signature = find_actor_signature(name))
      std::printf("  %-18s (%s)\n", "", describe_signature(*signature).c_str());
  }
  return exit_code::ok;
}

}  // namespace troupe::cli
