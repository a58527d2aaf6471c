// actor_signature.hpp: which kinds of wires each kind of actor takes in and sends out.
//
// The topology code (runtime/) must read and check [[actor]] kinds it has never heard of,
// yet it may not look into actors/, where the factories live. So every actor kind also
// has a signature here: the wire kinds it accepts (wires that end at it) and the wire
// kinds it emits (wires that start at it). The five built-in kinds are here from the
// start; a plugin's kind gets its signature from its registration line
// (TROUPE_REGISTER_ACTOR_KIND with troupe::accepts / troupe::emits, actors/base/actor_kinds.hpp).
//
// A signature only says which wires may touch an actor. What flows on each kind of wire
// is fixed (topology.hpp), and the stricter rules among the built-in kinds (a params wire
// goes optimizer -> layer only) stay in topology_validate.cpp.
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct actor_signature {
  std::string kind;
  std::vector<std::string> accepts;  // wire kinds that may end at this kind of actor
  std::vector<std::string> emits;    // wire kinds that may start at it
  bool built_in = false;             // one of troupe's five kinds

  bool accepts_wire(const std::string& wire_kind) const;
  bool emits_wire(const std::string& wire_kind) const;
};

/// The wire kinds there are: activations, labels, grads, ring, params.
const std::vector<std::string>& wire_kinds();

/// Declares what wires a kind of actor takes. Throws std::logic_error when the kind has a
/// signature already, or when a wire kind is not one of wire_kinds().
void register_actor_signature(const std::string& kind, std::vector<std::string> accepts,
                              std::vector<std::string> emits);

/// The kind's signature, or nullptr when it has none (unknown kind).
const actor_signature* find_actor_signature(const std::string& kind);

/// The kinds with a signature, sorted.
std::vector<std::string> actor_signature_kinds();

/// "accepts grads; emits grads" (for listings and error messages).
std::string describe_signature(const actor_signature& signature);

}  // namespace troupe
