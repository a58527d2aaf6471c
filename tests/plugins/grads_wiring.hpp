// grads_wiring.hpp: the wiring handler of the test plugins' actor kinds, each of which sits
// on one grads wire (tests/plugins/*_plugin.cpp).
//
// Header-only and for the test plugins only. Everything is in an anonymous namespace, as in
// scale_layer.hpp, so that two plugins including it (loaded with RTLD_GLOBAL) cannot
// interpose each other's symbols.
#pragma once

#include <caf/all.hpp>

#include <string>

#include "actors/messages.hpp"
#include "kernels/check.hpp"

namespace {

/// A handler for the wiring_msg of an actor named `name` that passes gradients on to exactly
/// one grads sink: keeps the trainer and that sink in `trainer` and `sink` (members of the
/// actor, which outlive its behavior).
inline auto take_grads_wiring(const std::string& name, caf::actor& trainer, caf::actor& sink) {
  return [&name, &trainer, &sink](const troupe::wiring_msg& wiring) {
    trainer = wiring.trainer;
    auto sinks = wiring.out("grads");
    TROUPE_CHECK(sinks.size() == 1, name << " needs exactly one outgoing grads wire");
    sink = sinks[0].peer;
  };
}

}  // namespace
