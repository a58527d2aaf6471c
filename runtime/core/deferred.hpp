// deferred.hpp: work a stream's thread does when it would otherwise wait.
//
// Note [deferred wake-ups]
// Waking a sleeping thread costs the waker: on the development VM a notify_one of a
// sleeping thread took 16 us of the notifying thread (a paravirtualised IPI), whichever
// core the sleeper was bound to. A device thread that sends the host thread a message
// (the loss's report of a step to the trainer) need not pay that in the middle of its
// work: it puts the wake-up off, and the first stream thread with nothing to do does it.
// A task put off here runs on a stream's thread (any stream's: one list a process)
// - when that stream has had nothing to run for idle_before_deferred (20 us: a wait that
//   ends sooner costs less than the wake-up would), before it sleeps at the latest;
// - before a job that waits for another stream's event (the task may be what that other
//   stream needs to go on);
// - after a job, once the oldest task is older than deferred_patience;
// - when a stream's thread ends.
// So a task runs at most a job plus deferred_patience late, and never later than a
// thread would wait. In a GPipe step the trainer's report is then taken up by the
// first stage's device, which waits for the last micro-batch's backward meanwhile; in
// DP2 by whichever replica first waits for the ring. Only a stream's thread puts work
// off (the one that put it off will run it, if no other does first); elsewhere the caller
// must act now.
#pragma once

#include <chrono>
#include <functional>

namespace troupe {

constexpr auto deferred_patience = std::chrono::microseconds(500);

/// True on a stream's worker thread (which may put work off).
bool on_stream_worker();

/// On a stream's worker thread: keeps `task` to run on a stream's thread as Note [deferred
/// wake-ups] says, and returns true. On any other thread: does nothing, returns false.
/// `task` must not throw, and may run on any thread.
bool defer_until_idle(std::function<void()> task);

}  // namespace troupe
