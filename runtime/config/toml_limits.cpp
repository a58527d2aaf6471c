// toml_limits.cpp: one pass over the config's bytes, counting what toml++ would nest.
//
// The lexer knows just enough TOML to not count inside strings and comments: basic
// ("...") and literal ('...') strings, their multi-line forms (""" and '''), and comments
// from # to the end of the line. A dotted key is counted as the dots between two
// separators (a newline, =, comma, brackets or braces): a value between separators holds
// at most one dot (1.5, 07:32:00.999), so only keys and table headers can pass the limit.
#include "runtime/config/toml_limits.hpp"

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// Note [control characters in TOML]
// TOML allows no raw control character but tab and the newline (CR LF or LF) anywhere, not
// even in comments or strings (they are written as escapes there), and toml++ does not
// always check: a NUL after a table header's '[' trips an assertion inside its parser (the
// config fuzzer found it, tests/fuzz/corpus/config/), which a release build compiles to
// an assumption, so undefined behaviour. So they are refused here, at their line:col.
void check_control_characters(std::string_view text, const std::string& file) {
  int line = 1;
  int column = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n') {
      ++line;
      column = 0;
      continue;
    }
    ++column;
    if ((byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7f) {
      static const char* digits = "0123456789abcdef";
      const std::string code{'0', 'x', digits[byte >> 4], digits[byte & 15]};
      throw config_error(source_position{file, line, column},
                         "a control character (byte " + code +
                             ") is not allowed in TOML, not even in a comment or a string "
                             "(inside a string, write it as an escape like \\u00" +
                             code.substr(2) + ")");
    }
  }
}

bool is_bare_key_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

std::string describe_character(char c) {
  if (c == '\n' || c == '\r')
    return "the end of the line";
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f)
    return std::string{'\'', c, '\''};
  static const char* digits = "0123456789abcdef";
  return std::string{"byte 0x"} + digits[byte >> 4] + digits[byte & 15];
}

// The one pass over the text: a class so that lexing (strings, comments, headers) and
// counting (nesting, dots) are functions of their own that share the position.
class toml_scanner {
 public:
  toml_scanner(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  // Note [non-ASCII outside strings]
  // TOML allows non-ASCII characters only in strings and comments (bare keys are ASCII,
  // whitespace is tab and space). toml++ 3's table of non-ASCII whitespace has holes: for
  // U+00A1 to U+0499 (and more) outside a string it reaches TOML_UNREACHABLE, which is
  // undefined behaviour in a release build of g++ too (the config fuzzer found it with an
  // 'é' where a key or value starts). So a byte >= 0x80 outside them is refused here.
  void run() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (static_cast<unsigned char>(c) >= 0x80)
        refuse_non_ascii();
      const bool opens_string =
          (c == '"' || c == '\'') &&
          std::string_view{"\n=[{,."}.find(last_significant_) != std::string_view::npos;
      if (c == '\n') {
        line_start_ = true;
        last_significant_ = '\n';
      } else if (c != ' ' && c != '\t' && c != '\r') {
        if (c == '[' && depth_ == 0 && line_start_)
          check_header_start();
        line_start_ = false;
        if (c != '#')
          last_significant_ = c;
      }
      if (opens_string) {
        skip_string(c, c == '"');
        continue;
      }
      if (c == '#') {
        while (i_ < text_.size() && text_[i_] != '\n')
          step();
        continue;
      }
      step();  // column is now c's
      count(c);
    }
  }

 private:
  source_position at() const { return source_position{file_, line_, column_}; }

  // Names the character (Note [non-ASCII outside strings]) and what to write instead.
  [[noreturn]] void refuse_non_ascii() const {
    const auto what = describe_text_character(text_, i_);
    std::string hint = "TOML allows non-ASCII characters only in strings and comments (quote "
                       "the value: \"...\")";
    if (what.find("curly") != std::string::npos)
      hint = "write a straight quote (\" or ') instead";
    else if (what.find("space") != std::string::npos || what.find("joiner") != std::string::npos)
      hint = "write a plain space, or nothing";
    else if (what.find("byte-order mark") != std::string::npos)
      hint = "a byte-order mark is accepted only as the file's first character";
    else if (what.find("dash") != std::string::npos || what.find("minus") != std::string::npos)
      hint = "write a plain '-' instead";
    else if (what.find("not UTF-8") != std::string::npos)
      hint = "a config is UTF-8 text";
    throw config_error(source_position{file_, line_, column_ + 1},
                       what + " outside a string or a comment; " + hint);
  }

  // Advances past text[i], keeping line and column.
  void step() {
    if (text_[i_] == '\n') {
      ++line_;
      column_ = 0;
    } else {
      ++column_;
    }
    ++i_;
  }

  bool starts(std::string_view token) const { return text_.substr(i_, token.size()) == token; }

  // Skips a string that starts at text[i] with `quote`; `escapes`: backslash escapes.
  void skip_string(char quote, bool escapes) {
    const std::string triple(3, quote);
    const bool multi_line = starts(triple);
    for (int k = 0; k < (multi_line ? 3 : 1); ++k)
      step();
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (escapes && c == '\\') {
        step();
        // toml++ asks whether what follows a backslash (and, in a multi-line string, the
        // spaces and line breaks after it) is whitespace: Note [non-ASCII outside strings].
        if (multi_line)
          while (i_ < text_.size() &&
                 (text_[i_] == ' ' || text_[i_] == '\t' || text_[i_] == '\r' || text_[i_] == '\n'))
            step();
        if (i_ < text_.size() && static_cast<unsigned char>(text_[i_]) >= 0x80)
          throw config_error(source_position{file_, line_, column_ + 1},
                             "a non-ASCII character after a backslash in a string; TOML's "
                             "escapes are \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX and \\UXXXXXXXX");
        if (i_ < text_.size())
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
        for (int k = 0; k < 2 && i_ < text_.size() && text_[i_] == quote; ++k)
          step();
        return;
      }
      step();
    }
  }

  // Note [table headers and toml++]
  // toml++ 3 assumes that a table header's '[' (or "[[") and spaces are followed by a key:
  // a bare key character or a quote (parser.inl, parse_key's TOML_ASSERT_ASSUME). Anything
  // else ("[#", "[.", a '[' alone on its line) trips that assertion (the config fuzzer
  // found it), or in a clang release build is undefined behaviour. So it is refused here.
  void check_header_start() const {
    std::size_t j = i_ + 1;
    if (j < text_.size() && text_[j] == '[')
      ++j;
    while (j < text_.size() && (text_[j] == ' ' || text_[j] == '\t'))
      ++j;
    if (j == text_.size())
      return;  // toml++ reports the end of the file
    const char first = text_[j];
    if (is_bare_key_character(first) || first == '"' || first == '\'' || first == ']')
      return;
    throw config_error(source_position{file_, line_, column_ + 1 + static_cast<int>(j - i_)},
                       "a table header starts with its name (a letter, digit, _ or -, or a "
                       "quoted string), not " +
                           describe_character(first));
  }

  // Counts c, just stepped past, against the limits: apart from the lexing, which decides
  // which characters reach here, because this is all that toml++ would nest.
  void count(char c) {
    switch (c) {
      case '[':
      case '{':
        dots_ = 0;
        if (++depth_ > limits::max_toml_nesting)
          throw config_error(at(), "arrays, inline tables and table headers nest more than " +
                                       std::to_string(limits::max_toml_nesting) +
                                       " levels deep here; the limit is " +
                                       std::to_string(limits::max_toml_nesting) +
                                       " (a troupe config needs 3)");
        break;
      case ']':
      case '}':
        dots_ = 0;
        if (depth_ > 0)
          --depth_;
        break;
      case '\n':
      case '=':
      case ',':
        dots_ = 0;
        break;
      case '.':
        if (++dots_ + 1 > limits::max_toml_key_parts)
          throw config_error(at(), "a dotted key or table header has more than " +
                                       std::to_string(limits::max_toml_key_parts) +
                                       " parts (the limit); a troupe config's keys have at "
                                       "most 3, like [optimizer.schedule]");
        break;
      default:
        break;
    }
  }

  std::string_view text_;
  const std::string& file_;
  int line_ = 1;
  int column_ = 0;  // of text[i], 1-based
  int depth_ = 0;
  int dots_ = 0;            // dots since the last separator
  bool line_start_ = true;  // only spaces and tabs so far on this line
  // The last character outside strings and comments that is not a space or a tab ('\n'
  // at the start): a quote opens a string only where TOML can have one, after one of
  // "\n=[{,." (a key or a value starts there). Elsewhere ("x = -\"a\"") toml++ reads it
  // as part of a bad bare value, and so does this scan.
  char last_significant_ = '\n';
  std::size_t i_ = 0;
};

}  // namespace

void check_toml_limits(std::string_view text, const std::string& file) {
  check_control_characters(text, file);
  toml_scanner(text, file).run();
}

}  // namespace troupe
