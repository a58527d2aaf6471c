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

bool decode_utf8(std::string_view text, std::size_t at, std::uint32_t& code, std::size_t& length) {
  const auto lead = static_cast<unsigned char>(text[at]);
  std::uint32_t minimum = 0;
  if (lead < 0x80) {
    code = lead;
    length = 1;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    code = lead & 0x1F, length = 2, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    code = lead & 0x0F, length = 3, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    code = lead & 0x07, length = 4, minimum = 0x10000;
  } else {
    return false;
  }
  if (at + length > text.size())
    return false;
  for (std::size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[at + k]);
    if ((next & 0xC0) != 0x80)
      return false;
    code = (code << 6) | (next & 0x3F);
  }
  return code >= minimum && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
}

const char* name_of_character(std::uint32_t code) {
  switch (code) {
    case 0x00A0: return "a no-break space";
    case 0x00AD: return "a soft hyphen";
    case 0x200B: return "a zero-width space";
    case 0x200C: return "a zero-width non-joiner";
    case 0x200D: return "a zero-width joiner";
    case 0x2028: return "a line separator";
    case 0x2029: return "a paragraph separator";
    case 0x202F: return "a narrow no-break space";
    case 0x2060: return "a word joiner";
    case 0xFEFF: return "a byte-order mark";
    case 0x2018: case 0x2019: return "a curly single quote";
    case 0x201C: case 0x201D: return "a curly double quote";
    case 0x2013: return "an en dash";
    case 0x2014: return "an em dash";
    case 0x2212: return "a minus sign";
    default: return nullptr;
  }
}

std::string utf16_refusal(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  std::string why;
  if (text.size() >= 2 && byte(0) == 0xFF && byte(1) == 0xFE)
    why = "it starts with the byte-order mark FF FE";
  else if (text.size() >= 2 && byte(0) == 0xFE && byte(1) == 0xFF)
    why = "it starts with the byte-order mark FE FF";
  else if (text.size() >= 2 && byte(0) != 0 && byte(1) == 0)
    why = "its second byte is 0";
  else
    return {};
  return "is UTF-16 text (" + why +
         ", as Windows Notepad's \"Unicode\" and PowerShell's > write); save it as UTF-8";
}

std::string describe_text_character(std::string_view text, std::size_t at, std::size_t* length) {
  std::uint32_t code = 0;
  std::size_t size = 1;
  const auto byte = static_cast<unsigned char>(text.at(at));
  const bool valid = decode_utf8(text, at, code, size);
  if (length != nullptr)
    *length = valid ? size : 1;
  if (!valid)
    return string_printf("byte 0x%02x (not UTF-8: is the file in another encoding? save it as "
                         "UTF-8)", byte);
  if (code < 0x20 || code == 0x7F)
    return string_printf("byte 0x%02x (a control character)", byte);
  if (code < 0x80)
    return std::string{'\'', static_cast<char>(code), '\''};
  if (const char* name = name_of_character(code))
    return string_printf("U+%04X (%s)", code, name);
  if (code >= 0x80 && code < 0xA0)
    return string_printf("U+%04X (a control character)", code);
  return string_printf("U+%04X '%.*s'", code, static_cast<int>(size), text.data() + at);
}

}  // namespace troupe
