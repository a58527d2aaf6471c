// check.cpp: what a failed TROUPE_CHECK throws.
#include "troupe/check.hpp"

namespace troupe::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::ostringstream out;
  out << file << ":" << line << ": check failed: " << condition;
  if (!message.empty())
    out << ": " << message;
  throw check_failure(out.str());
}

}  // namespace troupe::detail
