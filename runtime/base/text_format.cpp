// text_format.cpp: measure, then write.
#include "runtime/base/text_format.hpp"

#include <cstdint>
#include <cstdio>

#include "troupe/check.hpp"

namespace troupe {

std::string string_vprintf(const char* pattern, va_list args) {
  va_list measure;
  va_copy(measure, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, measure);
  va_end(measure);
  TROUPE_CHECK(size >= 0, "bad printf pattern '" << pattern << "'");
  std::string out(static_cast<std::size_t>(size) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), pattern, args);
  out.resize(static_cast<std::size_t>(size));
  return out;
}

std::string string_printf(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  auto out = string_vprintf(pattern, args);
  va_end(args);
  return out;
}

std::string human_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    return string_printf("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024)
    return string_printf("%.2f MiB", b / (1024.0 * 1024));
  if (b >= 1024.0)
    return string_printf("%.1f KiB", b / 1024.0);
  return string_printf("%lld B", static_cast<long long>(bytes));
}

}  // namespace troupe
