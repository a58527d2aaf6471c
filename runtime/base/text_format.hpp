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
#include <string_view>

namespace troupe {

/// printf(pattern, ...) into a string, never truncated.
std::string string_printf(const char* pattern, ...) __attribute__((format(printf, 1, 2)));

/// The va_list form of string_printf.
std::string string_vprintf(const char* pattern, va_list args) __attribute__((format(printf, 1, 0)));

/// "3.25 MiB", "12.0 KiB", "300 B": a byte count for a person to read.
std::string human_bytes(std::int64_t bytes);

/// "is UTF-16 text (it starts with the byte-order mark FF FE, ...); save it as UTF-8" when
/// `text` looks like UTF-16 (a UTF-16 byte-order mark first, or a NUL as its second byte:
/// what Windows Notepad's "Unicode" and PowerShell 5's `>` write), else "". troupe reads
/// UTF-8 (and ASCII) text only; its readers say this instead of naming a NUL at 1:2.
std::string utf16_refusal(std::string_view text);

/// The code point of the UTF-8 sequence at text[at] and its length in bytes; false when the
/// bytes there are not one (a stray continuation byte, a cut sequence, an overlong form).
bool decode_utf8(std::string_view text, std::size_t at, std::uint32_t& code, std::size_t& length);

/// "a no-break space", "a byte-order mark", "a curly double quote", ...: the invisible or
/// look-alike characters editors and word processors put into text; nullptr for others.
const char* name_of_character(std::uint32_t code);

/// The character that starts at text[at], for a message about a byte troupe refuses: "'x'",
/// "byte 0x01 (a control character)", "U+00E9 'é'", "U+00A0 (a no-break space)",
/// "U+FEFF (a byte-order mark)", "U+201C (a curly quote)", "byte 0xff (not UTF-8: is the
/// file in another encoding?)". `length` is set to the bytes it takes (1 when not UTF-8).
std::string describe_text_character(std::string_view text, std::size_t at, std::size_t* length = nullptr);

}  // namespace troupe
