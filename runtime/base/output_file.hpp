// output_file.hpp: the files a run writes besides checkpoints (the metrics file, the trace,
// the pictures and exports of the CLI), checked up front and written with every error seen.
//
// A run's output is lost quietly in three ways, and each has its function here:
// - its directory cannot be made, or the file cannot be created: check_output_file says so
//   before anything starts (a user_error with exit_code::bad_input naming the path and
//   the reason), instead of an "internal error" from std::filesystem or a failure after
//   the data has loaded;
// - a write fails (a full disk): write_whole_file checks every write() and the close()
//   and names the file and strerror(errno) (a user_error with exit_code::run_failed);
// - the message says "failed" without why: describe_errno gives the OS's words, its errno
//   and a hint for the common cases.
// It does not write atomically (runtime/checkpoint/atomic_file.hpp does, for files that a
// later run reads back) and does not buffer: callers hand it whole texts or lines.
#pragma once

#include <string>

namespace troupe {

/// "No space left on device (errno 28); the disk or quota is full: ...": strerror(error),
/// the number, and a hint where one helps; `elsewhere` ends the hint for a full disk
/// ("free space or write elsewhere").
std::string describe_errno(int error, const std::string& elsewhere = "write elsewhere");

/// Note [paths the system cannot take]
/// A path of PATH_MAX bytes or more, or with a name of more than NAME_MAX, cannot be opened
/// on Linux (ENAMETOOLONG). Such a path is refused before anything walks it: std::filesystem
/// (create_directories, parent_path in a loop) copies the path once per level, so a path of
/// 100,000 levels took a minute of one core before the error. Throws user_error (bad
/// input) naming `what` and the path, quoted short.
void check_path_length(const std::string& path, const std::string& what);

/// Makes the directories above `path` and checks that `path` can be opened for writing,
/// without changing it (a file that did not exist is removed again). `what` names the file
/// in the message ("the metrics file"). Throws user_error (exit_code::bad_input) naming the
/// path, the directory or file that failed and the reason, with a hint.
void check_output_file(const std::string& path, const std::string& what);

/// Replaces the file `path` with `text`: every write() is checked (short writes continue)
/// and so is close(). Throws user_error (exit_code::run_failed) naming `what`, the path
/// and describe_errno; what was written before the failure stays in the file.
void write_whole_file(const std::string& path, const std::string& text, const std::string& what);

/// Writes all of `size` bytes at `data` to `fd`, continuing short writes and EINTR.
/// Returns 0, or the errno of the write that failed (ENOSPC for a write that wrote nothing
/// on a full device).
int write_all(int fd, const char* data, std::size_t size);

}  // namespace troupe
