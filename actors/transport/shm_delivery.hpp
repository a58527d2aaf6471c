// shm_delivery.hpp: how a process takes the messages other processes of its machine leave
// in its shared memory (Note [messages through shared memory] in
// runtime/net/shared_memory.cpp): CAF deserialises each on the stream thread that polls
// and enqueues it to its actor, as CAF's network thread would.
//
// Not here: the queues (runtime/net/shared_memory.hpp), the polling (runtime/core/
// stream_poller.hpp).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/message.hpp>

#include <cstddef>
#include <memory>
#include <optional>

#include "runtime/core/stream_poller.hpp"
#include "runtime/net/shared_memory.hpp"

namespace troupe {

/// A message left in shared memory (its posted_kind byte, then the message), loaded as
/// that kind's type alone, whole; nullopt (said on stderr, the first few times) for
/// anything else. What the delivery below enqueues; tests/fuzz/fuzz_message.cpp feeds it.
std::optional<caf::message> load_posted(caf::actor_system& system, const char* data,
                                        std::size_t bytes);

/// Delivers `links`' messages into `system` and makes every stream thread poll them while
/// the returned poller lives (destroy it before `system` and `links`).
std::unique_ptr<stream_poller> deliver_shared_memory(caf::actor_system& system,
                                                     net::shm_links& links);

}  // namespace troupe
