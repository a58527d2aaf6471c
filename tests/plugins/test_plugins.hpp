// test_plugins.hpp: where CMake put the test plugins (tests/plugins/*.cpp), for the tests
// that load them, and how those tests put a plugin's actor kind into a run's graph.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/graph/topology.hpp"
#include "runtime/plugin/plugin.hpp"

namespace test_plugins {

/// test_scale and test_grad_scaler.
inline std::string good() { return TROUPE_TEST_PLUGIN_GOOD; }
/// test_wrong_gradient, test_throwing_backward, and the actor kind test_throwing_task.
inline std::string faulty() { return TROUPE_TEST_PLUGIN_FAULTY; }
/// A shared library without TROUPE_PLUGIN that registers test_unmarked_layer, the kernel
/// test_unmarked.op and the actor kind test_unmarked_kind from its static initialisers.
inline std::string not_a_plugin() { return TROUPE_TEST_NOT_A_PLUGIN; }
/// Layers each wrong in one way (and test_leaky_right), for the gradient check: the list
/// is at the top of tests/plugins/broken_layers_plugin.cpp.
inline std::string broken_layers() { return TROUPE_TEST_PLUGIN_BROKEN_LAYERS; }
/// Registers test_registered_before_the_throw, then a registration whose commit throws.
inline std::string throwing_registration() { return TROUPE_TEST_PLUGIN_THROWING_REGISTRATION; }
/// Exports ABI version TROUPE_ABI_VERSION + 1; would add test_abi_mismatch_layer, the
/// kernel test_abi_mismatch.op and the actor kind test_abi_mismatch_kind.
inline std::string abi_mismatch() { return TROUPE_TEST_PLUGIN_ABI_MISMATCH; }
/// Registers "linear" again, besides test_clash_innocent, test_clash.op, test_clash_kind.
inline std::string clashing() { return TROUPE_TEST_PLUGIN_CLASHING; }

/// A [[model.layers]] entry of `type` with no settings, for the plugin layers' tests.
inline troupe::layer_config layer_of_type(const std::string& type) {
  troupe::layer_config config;
  config.type = type;
  config.where = config.type_where = troupe::source_position{"a plugin test"};
  return config;
}

/// Loads the good and the faulty plugin (a no-op once they are loaded).
inline void load() {
  troupe::load_plugin(good());
  troupe::load_plugin(faulty());
}

/// Puts a custom actor `name` of kind `custom_kind`, on the graph's first device, on the
/// grads wire that leaves model layer `layer` (between the layer and its optimizer), as a
/// user would put it into the text of `troupe plan --eject`; the new actor, for its
/// settings.
inline troupe::actor_plan& insert_on_grads_wire(troupe::topology& graph, std::int32_t layer,
                                                const std::string& name,
                                                const std::string& custom_kind) {
  using namespace troupe;
  auto grads = std::find_if(graph.wires.begin(), graph.wires.end(), [&](const wire_plan& w) {
    const auto* from = graph.find(w.from);
    return w.kind == wire_kind::grads && from->kind == actor_kind::layer && from->layer == layer;
  });
  REQUIRE(grads != graph.wires.end());
  wire_plan onward{name, grads->to, wire_kind::grads, 0, {}};
  grads->to = name;
  graph.wires.push_back(onward);
  actor_plan actor;
  actor.name = name;
  actor.kind = actor_kind::custom;
  actor.custom_kind = custom_kind;
  actor.device = graph.devices.front();
  graph.actors.push_back(actor);
  return graph.actors.back();
}

}  // namespace test_plugins
