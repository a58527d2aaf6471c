// unique_fd.hpp: a POSIX file descriptor closed when it goes, the one RAII holder for the
// readers and writers that use open() directly (atomic files, the secret file, capped reads,
// .npy rows) and of the front door's sockets.
#pragma once

#include <unistd.h>

namespace troupe {

class unique_fd {
 public:
  /// Takes `fd` (negative: none, as open() reports a failure).
  explicit unique_fd(int fd) : fd_(fd) {}
  ~unique_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0)
        ::close(fd_);
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  /// Gives the descriptor up to the caller, who closes it from now on.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes now and reports close()'s result (0, or -1 with errno set), for a writer whose
  /// close errors matter.
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd);  // never retried on EINTR: on Linux the descriptor is gone anyway
  }

 private:
  int fd_;
};

}  // namespace troupe
