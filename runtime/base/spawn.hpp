// spawn.hpp: starting another program from a process that has threads, and waiting for it.
//
// Note [spawn, not fork]
// By the time troupe starts a process (troupe verify's run over several nodes, after its
// single-device run; troupe launch's nodes; a test's), it has threads: OpenBLAS's pool,
// and what a finished run left. fork() copies only the calling thread, with every lock
// the others held at that moment, and runs the atfork handlers first (OpenBLAS's shuts
// its pool down, with known deadlocks of its own, OpenBLAS issue 2270). A child that then
// allocates before exec (building argv, setenv, as ours did) can wait forever for a lock
// no thread will release. posix_spawn runs no atfork handlers and nothing of ours between
// the clone and the exec (glibc's is a vfork-like clone): everything the child needs
// (arguments, environment, output file, process group) is prepared in the parent. (CI's
// hung `troupe verify` over two nodes looked like this at first; it was the checkpoint
// writer, Note [the writer's own thread] in actors/training/checkpoint_writer.cpp.) The one
// fork() left is the gradient check's, which runs a function rather than a program (a
// layer's backward with dx = null, to see whether it crashes): its child allocates nothing
// and ends itself after a deadline (runtime/model/layer_check.cpp).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace troupe {

struct spawn_options {
  /// Variables added to (or replacing those of) this process's environment.
  std::vector<std::pair<std::string, std::string>> set_environment;
  /// Variables of this process's environment the child does not get.
  std::vector<std::string> unset_environment;
  /// Its own process group (a Ctrl-C at the terminal does not reach it).
  bool own_process_group = false;
  /// Its stdout and stderr go to this file (created or truncated); empty: this process's.
  std::string output;
};

/// Starts `program` (a path) with `arguments` (argv[1], ...); its pid. Throws
/// std::system_error naming the program when it cannot be started.
pid_t spawn_process(const std::string& program, const std::vector<std::string>& arguments,
                    const spawn_options& options = {});

/// The exit code of `status` as waitpid gives it: 128 + N when signal N ended it.
int exit_code_of_status(int status);

/// Waits for the child `pid` to end (through EINTR); its exit code as exit_code_of_status.
/// Throws std::system_error if it is not this process's child.
int wait_for_exit(pid_t pid);

/// The path of this process's executable (/proc/self/exe). Throws std::system_error.
std::string own_executable();

}  // namespace troupe
