// kinds.hpp: the kinds of actors and wires a topology is made of, as enums with one
// to_string / parse pair each (the pattern of runtime/config/choices.hpp).
//
// The five built-in actor kinds are an enum; a kind a plugin registered is open-ended, so
// it is actor_kind::custom plus its name (actor_plan::custom_kind). The wire kinds are a
// closed set. What each kind means and carries is topology.hpp's header; which wires each
// actor kind accepts and emits is actor_signature.hpp.
#pragma once

#include <array>

#include "runtime/config/choices.hpp"

namespace troupe {

enum class actor_kind { data_loader, layer, loss, averager, optimizer, custom };
enum class wire_kind { activations, labels, grads, ring, params };

/// The name a config writes; "custom" for actor_kind::custom (whose own name is the plan's).
const char* to_string(actor_kind value);
const char* to_string(wire_kind value);

/// The built-in kinds only: parse_enum<actor_kind>("custom") finds nothing, since "custom"
/// is not a kind a config can name.
template <>
struct enum_values<actor_kind> {
  static constexpr std::array<actor_kind, 5> all = {actor_kind::data_loader, actor_kind::layer,
                                                    actor_kind::loss, actor_kind::averager,
                                                    actor_kind::optimizer};
};
template <>
struct enum_values<wire_kind> {
  static constexpr std::array<wire_kind, 5> all = {wire_kind::activations, wire_kind::labels,
                                                   wire_kind::grads, wire_kind::ring,
                                                   wire_kind::params};
};

}  // namespace troupe
