// network_atoms.hpp: the atoms device actors answer for the network and shared-memory
// delivery (device_actor.cpp, actors/transport/). Internal: not in the facade.
#pragma once

#include <caf/all.hpp>

namespace troupe {

/// Asks a device actor to send what it held back for another node (send_written).
using remote_flush_atom = caf::atom_constant<caf::atom("rflush")>;
/// Asks a device actor of another node of this machine for its node's shared-memory inbox
/// (runtime/net/shared_memory.hpp); the answer is a net::shm_offer's fields.
using shm_offer_atom = caf::atom_constant<caf::atom("shmoffer")>;
/// Wakes a device actor's node to take the messages left in its shared memory.
using shm_poll_atom = caf::atom_constant<caf::atom("shmpoll")>;

}  // namespace troupe
