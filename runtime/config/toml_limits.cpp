// toml_limits.cpp: one pass over the config's bytes, counting what toml++ would nest.
//
// The lexer knows just enough TOML to not count inside strings and comments: basic
// ("...") and literal ('...') strings, their multi-line forms (""" and '''), and comments
// from # to the end of the line. A dotted key is counted as the dots between two
// separators (a newline, =, comma, brackets or braces): a value between separators holds
// at most one dot (1.5, 07:32:00.999), so only keys and table headers can pass the limit.
#include "runtime/config/toml_limits.hpp"

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"

namespace troupe {

void check_toml_limits(std::string_view text, const std::string& file) {
  int line = 1;
  int column = 0;  // of text[i], 1-based
  int depth = 0;
  int dots = 0;  // dots since the last separator
  std::size_t i = 0;
  auto at = [&] { return source_position{file, line, column}; };
  // Advances past text[i], keeping line and column.
  auto step = [&] {
    if (text[i] == '\n') {
      ++line;
      column = 0;
    } else {
      ++column;
    }
    ++i;
  };
  auto starts = [&](std::string_view token) { return text.substr(i, token.size()) == token; };
  // Skips a string that starts at text[i] with `quote`; `escapes`: backslash escapes.
  auto skip_string = [&](char quote, bool escapes) {
    const std::string triple(3, quote);
    const bool multi_line = starts(triple);
    for (int k = 0; k < (multi_line ? 3 : 1); ++k)
      step();
    while (i < text.size()) {
      const char c = text[i];
      if (escapes && c == '\\') {
        step();
        if (i < text.size())
          step();
        continue;
      }
      if (!multi_line && (c == quote || c == '\n')) {
        if (c == quote)
          step();
        return;  // an unterminated string ends at its line (toml++ reports it)
      }
      if (multi_line && starts(triple)) {
        for (int k = 0; k < 3; ++k)
          step();
        // Up to two more quotes belong to the string's content ("""a"""" ends in a quote).
        for (int k = 0; k < 2 && i < text.size() && text[i] == quote; ++k)
          step();
        return;
      }
      step();
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      skip_string(c, c == '"');
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n')
        step();
      continue;
    }
    step();  // column is now c's
    switch (c) {
      case '[':
      case '{':
        dots = 0;
        if (++depth > limits::max_toml_nesting)
          throw config_error(at(), "arrays, inline tables and table headers nest more than " +
                                       std::to_string(limits::max_toml_nesting) +
                                       " levels deep here; the limit is " +
                                       std::to_string(limits::max_toml_nesting) +
                                       " (a troupe config needs 3)");
        break;
      case ']':
      case '}':
        dots = 0;
        if (depth > 0)
          --depth;
        break;
      case '\n':
      case '=':
      case ',':
        dots = 0;
        break;
      case '.':
        if (++dots + 1 > limits::max_toml_key_parts)
          throw config_error(at(), "a dotted key or table header has more than " +
                                       std::to_string(limits::max_toml_key_parts) +
                                       " parts (the limit); a troupe config's keys have at "
                                       "most 3, like [optimizer.schedule]");
        break;
      default:
        break;
    }
  }
}

}  // namespace troupe
