// text_format.hpp: printf-style formatting into a std::string of whatever length it needs.
//
// For code that formats many numbers with printf's exact conventions ("%.3f", "%-16s"),
// where a fixed char buffer would cut long names short without a word. The compiler
// checks the arguments against the pattern (the format attribute). It does not localise:
// numbers come out as the C locale writes them.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>

namespace troupe {

/// printf(pattern, ...) into a string, never truncated.
std::string string_printf(const char* pattern, ...) __attribute__((format(printf, 1, 2)));

/// The va_list form of string_printf.
std::string string_vprintf(const char* pattern, va_list args) __attribute__((format(printf, 1, 0)));

/// "3.25 MiB", "12.0 KiB", "300 B": a byte count for a person to read.
std::string human_bytes(std::int64_t bytes);

}  // namespace troupe
