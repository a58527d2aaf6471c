// check.hpp: TROUPE_CHECK, the check for conditions only a bug can break (STYLE.md "Errors").
//
// It lives in kernels/ because kernels depend on nothing above them and still check their
// arguments; include/troupe/error.hpp includes it, so everything above uses the same macro.
// A failed check throws troupe::check_failure with file, line, the condition and a message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace troupe {

/// A failed TROUPE_CHECK: a bug in troupe or in a plugin, not in the user's input.
class check_failure : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace detail

}  // namespace troupe

/// Checks a condition that only a bug can break; the message may use <<.
#define TROUPE_CHECK(condition, message)                                                          \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::ostringstream troupe_check_stream_;                                                    \
      troupe_check_stream_ << message;                                                            \
      ::troupe::detail::check_failed(__FILE__, __LINE__, #condition, troupe_check_stream_.str()); \
    }                                                                                             \
  } while (false)
