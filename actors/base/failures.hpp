// failures.hpp: how an exception in an actor's handler reaches the trainer.
//
// Every troupe actor installs this handler: the exception's message goes to the trainer
// as failure_msg{actor name, what}, which ends the run cleanly with it, and the actor
// exits with that error. Jobs on device streams report through the stream's error
// handler instead (session.cpp).
#pragma once

#include <caf/all.hpp>

#include <string>

#include "troupe/messages.hpp"

namespace troupe {

/// Installs the handler on `self`. `trainer` is read when an exception happens (it may
/// be filled in after this call, by the wiring message).
void report_failures_to(caf::event_based_actor* self, std::string name, const caf::actor* trainer);

/// The message of an exception pointer ("unknown exception" for non-std exceptions).
std::string describe_exception(std::exception_ptr error);

/// What `actor` reports of `error` to the trainer: its message, and whether it is the
/// input's fault (a data_error: a data file that does not read, found as a batch reads it).
failure_msg failure_of(std::string actor, std::exception_ptr error);

}  // namespace troupe
