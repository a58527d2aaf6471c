// limits.cpp: the helpers of limits.hpp.
#include "runtime/base/limits.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/text_format.hpp"
#include "runtime/base/unique_fd.hpp"
#include "troupe/error.hpp"

namespace troupe {

std::string quote_user_text(std::string_view text, std::size_t limit) {
  std::size_t cut = text.size();
  if (cut > limit) {
    cut = limit;
    // Back up to the first byte of a UTF-8 character (continuation bytes are 10xxxxxx), so
    // that what is kept stays valid text.
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;
  }
  std::string out = "'";
  out.reserve(cut + 32);
  for (std::size_t i = 0; i < cut;) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F)
        out += string_printf("\\x%02X", c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Bytes that are not UTF-8 as \xNN; an invisible or look-alike character (a no-break
    // space in a CSV cell) or a C1 control as \uXXXX, so that a message shows it.
    std::uint32_t code = 0;
    std::size_t length = 1;
    if (!decode_utf8(text, i, code, length) || i + length > cut)
      out += string_printf("\\x%02X", c), length = 1;
    else if (name_of_character(code) != nullptr || (code >= 0x80 && code < 0xA0))
      out += string_printf("\\u%04X", code);
    else
      out.append(text.data() + i, length);
    i += length;
  }
  out += "'";
  if (cut < text.size())
    out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::optional<std::int64_t> checked_multiply(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    return std::nullopt;
  return out;
}

std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    return std::nullopt;
  return out;
}

std::string describe_bytes(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 30) && bytes % (std::int64_t{1} << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (std::int64_t{1} << 20) && bytes % (std::int64_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

std::string read_file_capped(const std::string& path, std::int64_t max_bytes,
                             const std::string& what, const std::string& hint) {
  const auto name = quote_user_path(path);
  // A plain blocking open, as cat's: a FIFO waits for its writer.
  unique_fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.get() < 0)
    throw user_error("cannot open " + what + " " + name + ": " + std::strerror(errno) + hint);
  struct stat info {};
  if (::fstat(file.get(), &info) == 0 && S_ISDIR(info.st_mode))
    throw user_error("cannot open " + what + " " + name + ": it is a directory");
  // A regular file says its size up front; anything else (a FIFO, /dev/zero) is read up
  // to one byte past the cap.
  if (S_ISREG(info.st_mode) && info.st_size > max_bytes)
    throw user_error(what + " " + name + " is " + std::to_string(info.st_size) +
                     " bytes, more than the limit of " + describe_bytes(max_bytes) +
                     "; is it the right file?");
  std::string text;
  constexpr std::int64_t chunk = 1 << 16;
  for (;;) {
    const auto room = std::min(chunk, max_bytes + 1 - static_cast<std::int64_t>(text.size()));
    if (room <= 0)
      throw user_error(what + " " + name + " holds more than the limit of " +
                       describe_bytes(max_bytes) + "; is it the right file?");
    const auto old_size = text.size();
    text.resize(old_size + static_cast<std::size_t>(room));
    const auto got = ::read(file.get(), text.data() + old_size, static_cast<std::size_t>(room));
    if (got < 0) {
      if (errno == EINTR) {
        text.resize(old_size);
        continue;
      }
      throw user_error("cannot read " + what + " " + name + ": " + std::strerror(errno));
    }
    text.resize(old_size + static_cast<std::size_t>(got));
    if (got == 0)
      return text;
  }
}

}  // namespace troupe
