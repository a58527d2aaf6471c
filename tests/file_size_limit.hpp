// file_size_limit.hpp: a disk that fills up, without mounting one, for the tests of writers.
#pragma once

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>

namespace troupe::test {

/// While it lives, files this process writes may not grow past `bytes` (RLIMIT_FSIZE):
/// write() fails with EFBIG, as it fails with ENOSPC on a full disk, possibly in the middle
/// of a line. SIGXFSZ, which would kill the process, is ignored meanwhile.
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_)(int) = SIG_DFL;
};

}  // namespace troupe::test
