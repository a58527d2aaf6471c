// stream_poller.hpp: what every stream's thread polls between its jobs: the messages other
// processes of this machine left in this process's shared memory (runtime/net/
// shared_memory.hpp, delivered through actors/), which the thread takes as soon as its
// job ends, instead of waiting for CAF's network thread to be woken and scheduled.
//
// Not here: what is polled (the poller is set by the session, actors/base/device_actor.cpp).
#pragma once

namespace troupe {

class stream_poller {
 public:
  virtual ~stream_poller() = default;
  /// Between jobs and while the thread spins idle: delivers what waits (cheap if nothing).
  virtual void poll() = 0;
  /// The thread is about to sleep: false if something came meanwhile (then it spins on).
  /// After true, whoever leaves a message must wake a thread of this process.
  virtual bool before_sleep() = 0;
  /// The thread woke from that sleep.
  virtual void after_wake() = 0;
};

/// Sets this process's poller (nullptr: none); returns once no stream thread is inside a
/// call to the one before, so that it may go.
void set_stream_poller(stream_poller* poller);

}  // namespace troupe
