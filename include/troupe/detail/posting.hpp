// posting.hpp: messages left in another process's shared memory instead of sent through
// CAF (Note [messages through shared memory] in runtime/net/shared_memory.cpp). Internal:
// device_actor::send_written decides with it, and troupe's own actors and transport use it;
// it is installed only because send_written is a template. Plugins do not call it.
#pragma once

#include <caf/all.hpp>
#include <caf/binary_serializer.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "troupe/messages.hpp"

namespace troupe::detail {

/// The messages a process may leave in the shared memory of another process of its machine
/// instead of sending them through CAF (Note [messages through shared memory] in
/// runtime/net/shared_memory.cpp): a byte naming the type, before the serialised message,
/// says what the reader loads (that type only, whole). 0: not one of them. Each is one
/// whose receiver takes it in any order against what still goes through CAF and needs no
/// sender (a message from there has none): the ring keys its chunks, the loss pairs labels
/// by tag, the data loader counts a credit by its replica (a layer finds the wire of a
/// credit by its sender: those keep CAF), the trainer finishes steps in order (Note
/// [finished in order] in actors/trainer/run_control.cpp), and the rows of a batch carry their own
/// number (batch_assembler_actor.hpp, where their kind is declared).
template <class Message>
struct posted_kind : std::integral_constant<std::uint8_t, 0> {};
// 1: ring_msg (actors/base/collective_messages.hpp), 5: batch_rows_msg (actors/base/batch_rows.hpp).
template <>
struct posted_kind<labels_msg> : std::integral_constant<std::uint8_t, 2> {};
template <>
struct posted_kind<release_msg> : std::integral_constant<std::uint8_t, 3> {};
template <>
struct posted_kind<loss_report_msg> : std::integral_constant<std::uint8_t, 4> {};

/// Leaves `bytes` (a posted_kind byte, then the message) for `peer` in its node's shared
/// memory: false when it cannot (no link, no room, `peer` in this process); wakes that
/// node through CAF when none of its threads polls; counts it on trace track `track`.
bool post_bytes(const caf::actor& peer, const std::vector<char>& bytes, std::uint32_t track);
/// Whether a message to `peer` could go through shared memory at all (a run with links,
/// `peer` in another process).
bool may_post(const caf::actor& peer);

/// Leaves `message` for `peer`, an actor of another process of this machine, in that
/// process's shared memory; false when it cannot (send it through CAF then). Callable
/// from any thread (the loss reports from a job's callback).
template <class Message>
bool post_message(const caf::actor& peer, Message message, std::uint32_t track = 0) {
  static_assert(posted_kind<Message>::value != 0, "not a message that may be posted");
  if (!may_post(peer))
    return false;
  std::vector<char> buffer;
  caf::binary_serializer sink{peer->home_system(), buffer};
  auto kind = posted_kind<Message>::value;
  if (sink(kind, message))
    return false;
  return post_bytes(peer, buffer, track);
}

}  // namespace troupe::detail
