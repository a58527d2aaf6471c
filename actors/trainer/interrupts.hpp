// interrupts.hpp: SIGINT and SIGTERM as a request to stop a run cleanly.
//
// The first signal only records itself: the trainer sees it (interrupt_signal(), polled),
// lets the steps already under way finish, takes a checkpoint when checkpointing is on,
// writes the metrics record `interrupted` and ends the run with exit code 130 (SIGINT) or
// 143 (SIGTERM). A second signal exits the process at once with that code. Only `troupe
// run` installs the handlers; a program using the library decides for itself.
#pragma once

namespace troupe {

/// Installs the handlers of SIGINT and SIGTERM (once per process).
void install_interrupt_handlers();

/// The signal that asked the run to stop (SIGINT, SIGTERM), or 0.
int interrupt_signal();

/// For tests and programs: behave as if `signal` had arrived (0 clears it).
void set_interrupt_signal(int signal);

}  // namespace troupe
