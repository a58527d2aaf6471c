// exit_code.hpp: what a troupe process (or a session inside one) reports when it ends.
//
// One list for the whole code base: user_error carries one, a session's outcome carries
// one, every CLI command returns one, and docs/reference/exit-codes.md is this list.
// It does not decide which failure gets which code; the code that detects a failure does.
#pragma once

namespace troupe {

/// The process exit status of troupe, and of a session's outcome.
enum class exit_code : int {
  ok = 0,             // success (a passed verify or check-layer too)
  run_failed = 1,     // the run failed: an actor reported an error, a check failed, verify found
                      // a difference, or an internal error
  bad_input = 2,      // bad input: usage, config, data file, plugin
  watchdog = 3,       // stopped by the watchdog: nothing moved for [run] watchdog seconds
  interrupted = 130,  // stopped by SIGINT (Ctrl-C) after finishing a step (and a checkpoint)
  terminated = 143,   // stopped by SIGTERM, likewise (128 + the signal, as shells report it)
};

/// The number a process returns from main() for `code`.
constexpr int exit_status(exit_code code) { return static_cast<int>(code); }

}  // namespace troupe
