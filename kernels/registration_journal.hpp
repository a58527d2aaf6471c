// registration_journal.hpp: undoing what a shared library registered while it was loaded,
// when its load fails (Note [undoing a failed load]).
//
// Note [undoing a failed load]
// A failed plugin load must leave nothing registered, and nothing that points into the
// library once it is closed. Registrations can reach the registries in two ways while the
// loader holds a library: a library without TROUPE_PLUGIN registers at once from its static
// initialisers, inside dlopen (registering_in_plugin() is false there: it looks like a
// program); and a plugin's deferred registrations are committed one by one, where one may
// throw after others went in. So while the loader has a library open, every registry
// records how to take back each name it adds (an undo, troupe's own code, not the
// library's); a failed load runs those undos, newest first, while the library is still
// mapped, and only then closes it. Registration errors recorded meanwhile (a library
// without TROUPE_PLUGIN that registers a taken name) are the library's, not troupe's, and
// go with it. The journal is per thread: dlopen runs static initialisers on the loading
// thread, and a registration on another thread at the same time is not the library's.
// The CUDA kernels' library, loaded on demand from inside a registration, is troupe's own
// and is never journaled (Note [CUDA kernels loaded on demand] in kernels/dispatch.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace troupe::detail {

/// Called by a registry right after it adds a name: keeps `undo` (which takes the name back)
/// when the calling thread has a registration_journal open; otherwise does nothing.
void record_undo(std::function<void()> undo);

/// Opens the journal of the calling thread for as long as it lives; at its end, undoes
/// everything recorded since, unless keep() was called. One at a time per thread.
class registration_journal {
 public:
  registration_journal();
  ~registration_journal();
  registration_journal(const registration_journal&) = delete;
  registration_journal& operator=(const registration_journal&) = delete;

  /// The load succeeded: what was registered stays.
  void keep() { kept_ = true; }
  /// Undoes now what was recorded (newest first), and drops the registration errors
  /// recorded since the journal opened.
  void undo();

 private:
  friend void record_undo(std::function<void()> undo);
  std::vector<std::function<void()>> undos_;
  std::size_t errors_before_ = 0;
  bool kept_ = false;
};

}  // namespace troupe::detail
