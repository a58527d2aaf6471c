// output_file.cpp: checking and writing output files with POSIX calls, so that every
// error's errno is seen where it happens (no stdio or iostream buffer between).
#include "runtime/base/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"

namespace troupe {

std::string describe_errno(int error, const std::string& elsewhere) {
  std::string out = std::strerror(error);
  out += " (errno " + std::to_string(error) + ")";
  if (error == ENOSPC || error == EDQUOT)
    out += "; the disk or quota is full: free space or " + elsewhere;
  else if (error == EFBIG)
    out += "; the file is larger than this file system or process limit allows";
  else if (error == EACCES || error == EPERM || error == EROFS)
    out += "; choose a path this user may write";
  return out;
}

int write_all(int fd, const char* data, std::size_t size) {
  std::size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    if (n == 0)
      return ENOSPC;  // a regular file writes nothing only when the device is full
    written += static_cast<std::size_t>(n);
  }
  return 0;
}

namespace {

// The nearest of `directory` and the directories above it that exists ("." for a
// relative path with none), so that a message can say which part of a path is wrong.
std::filesystem::path nearest_existing(std::filesystem::path directory) {
  std::error_code ignored;
  while (!directory.empty() && !std::filesystem::exists(directory, ignored))
    directory = directory.parent_path();
  return directory.empty() ? std::filesystem::path{"."} : directory;
}

[[noreturn]] void refuse(const std::string& what, const std::string& path,
                         const std::string& reason) {
  throw user_error("cannot write " + what + " " + quote_user_path(path) + ": " + reason +
                       "; nothing ran: give a path in a writable directory",
                   exit_code::bad_input);
}

}  // namespace

void check_path_length(const std::string& path, const std::string& what) {
  // Note [paths the system cannot take]: refused before any directory is made or any
  // parent walked (std::filesystem's walks copy the path per level: quadratic in its
  // depth, a minute for 100,000 levels, where open() says ENAMETOOLONG at once).
  if (path.size() >= PATH_MAX)
    throw user_error(what + " " + quote_user_path(path) + " is " + std::to_string(path.size()) +
                         " bytes long, longer than this system takes (" +
                         std::to_string(PATH_MAX - 1) + " bytes)",
                     exit_code::bad_input);
  std::size_t start = 0;
  while (start < path.size()) {
    auto end = path.find('/', start);
    if (end == std::string::npos)
      end = path.size();
    if (end - start > NAME_MAX)
      throw user_error(what + " " + quote_user_path(path) + " has a name of " +
                           std::to_string(end - start) + " bytes, longer than this system " +
                           "takes (" + std::to_string(NAME_MAX) +
                           " bytes a name): " + quote_user_text(path.substr(start, end - start)),
                       exit_code::bad_input);
    start = end + 1;
  }
}

void check_output_file(const std::string& path, const std::string& what) {
  check_path_length(path, what);
  const std::filesystem::path file{path};
  const auto parent = file.parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error || !std::filesystem::is_directory(parent)) {
      const auto existing = nearest_existing(parent);
      std::error_code ignored;
      if (!std::filesystem::is_directory(existing, ignored))
        refuse(what, path, quote_user_path(existing.string()) + " is a file, not a directory");
      refuse(what, path,
             "cannot create the directory " + quote_user_path(parent.string()) + ": " +
                 (error ? error.message() : std::string{"it is not a directory"}));
    }
  }
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0) {
    if (S_ISDIR(status.st_mode))
      refuse(what, path, "it is a directory");
    // It exists: open it as the run will, but without truncating it.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      refuse(what, path, describe_errno(errno));
    ::close(fd);
    return;
  }
  // It does not exist: create it, and remove it again (the run creates it when it starts).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    refuse(what, path, "cannot create it: " + describe_errno(errno));
  ::close(fd);
  ::unlink(path.c_str());
}

void write_whole_file(const std::string& path, const std::string& text, const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    throw user_error(
        "cannot write " + what + " " + quote_user_path(path) + ": " + describe_errno(errno),
        exit_code::run_failed);
  if (const int error = write_all(fd, text.data(), text.size())) {
    ::close(fd);
    throw user_error(
        "writing " + what + " " + quote_user_path(path) + " failed: " + describe_errno(error),
        exit_code::run_failed);
  }
  // close() can report a deferred write error (NFS, some FUSE file systems).
  if (::close(fd) != 0)
    throw user_error("writing " + what + " " + quote_user_path(path) +
                         " failed at close: " + describe_errno(errno),
                     exit_code::run_failed);
}

}  // namespace troupe
