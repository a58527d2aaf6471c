// json_input.cpp: the depth check, the duplicate-key check and the quoting declared in
// json_input.hpp. It knows no schema; callers check what the parsed value must contain.
#include "runtime/base/json_input.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// How many bytes of `text` fit in `limit`, cut at the first byte of a UTF-8 character so
// that what is kept stays valid text.
std::size_t cut_point(const std::string& text, std::size_t limit) {
  if (text.size() <= limit)
    return text.size();
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return cut;
}

}  // namespace

std::string describe_json_value(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::string:
      return "the string " + quote_user_text(value.get_ref<const std::string&>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "the number " + value.dump();
    case nlohmann::json::value_t::array:
      return "an array of " + std::to_string(value.size()) + " elements";
    case nlohmann::json::value_t::object:
      return "an object with " + std::to_string(value.size()) + " fields";
    default:
      return "a value of another kind";
  }
}

std::size_t json_too_deep_at(const char* begin, const char* end) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char* p = begin; p != end; ++p) {
    const char c = *p;
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth)
        return static_cast<std::size_t>(p - begin);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return static_cast<std::size_t>(end - begin);
}

std::string json_error_place(const char* begin, const char* end, std::size_t byte) {
  std::string out = " at byte " + std::to_string(byte);
  const auto size = static_cast<std::size_t>(end - begin);
  if (byte < 1 || byte > size)
    return out;
  auto at = byte - 1;  // nlohmann counts from 1
  while (at > 0 && (static_cast<unsigned char>(begin[at]) & 0xC0) == 0x80)
    --at;  // the character's first byte
  const auto c = static_cast<unsigned char>(begin[at]);
  if (c < 0x20 || c >= 0x7F)
    out += ", " + describe_text_character(std::string_view{begin, size}, at);
  return out;
}

nlohmann::json parse_untrusted_json(const char* begin, const char* end, const std::string& what) {
  if (const auto utf16 = utf16_refusal(std::string_view{begin, static_cast<std::size_t>(
                                                                   std::min<std::ptrdiff_t>(end - begin, 4))});
      !utf16.empty())
    throw data_error(what + ": " + utf16);
  const auto too_deep = json_too_deep_at(begin, end);
  if (too_deep != static_cast<std::size_t>(end - begin))
    throw data_error(what + ": arrays and objects nest more than " +
                     std::to_string(max_json_depth) + " levels deep at byte " +
                     std::to_string(too_deep) + "; expected shallow JSON");
  // The keys seen so far in each open object, by depth (nlohmann reports a key at the
  // depth of its object plus one).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const nlohmann::json::parser_callback_t callback =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& value) {
        const auto level = static_cast<std::size_t>(depth);
        if (event == nlohmann::json::parse_event_t::object_start) {
          if (keys.size() < level + 2)
            keys.resize(level + 2);
          keys[level + 1].clear();
        } else if (event == nlohmann::json::parse_event_t::key && duplicate.empty()) {
          if (keys.size() < level + 1)
            keys.resize(level + 1);
          const auto& key = value.get_ref<const std::string&>();
          if (!keys[level].insert(key).second)
            duplicate = key;
        }
        return true;
      };
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(begin, end, callback);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message ends with the token it last read, which may be the rest of an
    // unterminated string: keep its start only; and its "[json.exception.parse_error.101] "
    // tag is the library's, not the reader's.
    std::string message = e.what();
    if (message.rfind("[json.exception.", 0) == 0 && message.find("] ") != std::string::npos)
      message.erase(0, message.find("] ") + 2);
    const auto cut = cut_point(message, 240);
    // The character it stopped at, named: an invisible one (a no-break space) or a byte
    // that is not UTF-8 shows as nothing, or as half a character, in nlohmann's message.
    const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&e);
    auto shown = quote_user_text(message.substr(0, cut), cut + 1);  // a byte not UTF-8 as \xNN
    shown = shown.substr(1, shown.size() - 2);                      // without the quotes
    throw data_error(what + ": not valid JSON: " + shown +
                     (cut < message.size() ? "..." : "") +
                     (syntax != nullptr ? " (" + json_error_place(begin, end, syntax->byte).substr(1) + ")"
                                        : std::string{}));
  }
  if (!duplicate.empty())
    throw data_error(what + ": the key " + quote_user_text(duplicate) +
                     " appears twice in one object; expected each key once");
  return parsed;
}

}  // namespace troupe
