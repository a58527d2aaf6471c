// The scan a config's text passes before toml++ parses it (runtime/config/toml_limits.hpp):
// long dotted keys and deep nesting are refused at their line:col, and what only looks
// like them (inside strings and comments, a float's dot) is not.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/base/limits.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/toml_limits.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using namespace std::string_literals;

namespace {

std::string dotted(int parts) {
  std::string key = "a";
  for (int i = 1; i < parts; ++i)
    key += ".a";
  return key;
}

}  // namespace

TEST_CASE("a dotted key of a million parts is refused before toml++ sees it") {
  const auto text = "[run]\n" + dotted(1'000'000) + " = 1\n";
  // The 64th dot makes 65 parts: line 2, column 2 * 64.
  CHECK_THROWS_WITH_AS(check_toml_limits(text, "big.toml"),
                       doctest::Contains("big.toml:2:128: a dotted key or table header has more "
                                         "than 64 parts"),
                       config_error);
  CHECK_THROWS_AS(parse_config(text, "big.toml", "."), config_error);
}

TEST_CASE("a raw control character is refused at its line:col, wherever it is") {
  // The config fuzzer's finding: a NUL after '[' tripped an assertion inside toml++.
  CHECK_THROWS_WITH_AS(parse_config("[run]\n[\0zn]\nsteps = 1\n"s, "nul.toml", "."),
                       doctest::Contains("nul.toml:2:2: a control character (byte 0x00) is not "
                                         "allowed in TOML"),
                       config_error);
  for (const std::string text : {"# bell \a in a comment\n", "x = \"a\x1b[0m\"\n", "x = 1\x7f\n"})
    CHECK_THROWS_WITH_AS(check_toml_limits(text, "c.toml"),
                         doctest::Contains("is not allowed in TOML"), config_error);
  // Tab, CR LF and LF are not control characters to TOML.
  CHECK_NOTHROW(check_toml_limits("[run]\r\n\tsteps = 1 # a\tcomment\r\n", "ok.toml"));
}

TEST_CASE("a table header that does not start with a name is refused where the name should be") {
  // The config fuzzer's second finding: "[#" tripped toml++'s assertion that a key follows.
  CHECK_THROWS_WITH_AS(parse_config("[run]\nsteps = 1\n[# a comment\n", "h.toml", "."),
                       doctest::Contains("h.toml:3:2: a table header starts with its name (a "
                                         "letter, digit, _ or -, or a quoted string), not '#'"),
                       config_error);
  CHECK_THROWS_WITH_AS(check_toml_limits("[[ .x]]\n", "a.toml"), doctest::Contains("a.toml:1:4:"),
                       config_error);
  CHECK_THROWS_WITH_AS(check_toml_limits("  [\n", "b.toml"),
                       doctest::Contains("b.toml:1:4: a table header starts with its name (a "
                                         "letter, digit, _ or -, or a quoted string), not the "
                                         "end of the line"),
                       config_error);
  // Names, quoted names, an empty header (toml++ says why) and arrays of arrays pass.
  for (const std::string text :
       {"[run]\n", "[[model.layers]]\n", "[ \"a b\" ]\n", "['x']\n", "[]\n",
        "x = [\n  [1, 2],\n  [#3\n  ],\n]\n", "x = 1 # [#\n", "s = \"\"\"\n[#\n\"\"\"\n"})
    CHECK_NOTHROW(check_toml_limits(text, "ok.toml"));
}

TEST_CASE("a non-ASCII character outside a string or comment is refused at its line:col") {
  // The config fuzzer's third finding: toml++ reached TOML_UNREACHABLE on such a character.
  CHECK_THROWS_WITH_AS(parse_config("[run]\nsteps = \xc3\xa9\n", "u.toml", "."),
                       doctest::Contains("u.toml:2:9: U+00E9 '\xc3\xa9' outside a string "
                                         "or a comment"),
                       config_error);
  CHECK_THROWS_AS(check_toml_limits("\xc2\xa0x = 1\n", "nbsp.toml"), config_error);
  // A quote where no string can start is part of a bad bare value to toml++, which then
  // asks of every character after it whether it is whitespace (the fourth finding).
  CHECK_THROWS_WITH_AS(check_toml_limits("metrics =-\"/tmp/\xc3\xa9\"\n", "q.toml"),
                       doctest::Contains("q.toml:1:17: U+00E9 '\xc3\xa9' outside a string"),
                       config_error);
  // After a backslash (and in a multi-line string the whitespace after it) toml++ asks too.
  CHECK_THROWS_WITH_AS(check_toml_limits("s = \"a\\\xc3\xa9\"\n", "e.toml"),
                       doctest::Contains("e.toml:1:8: a non-ASCII character after a backslash"),
                       config_error);
  CHECK_THROWS_WITH_AS(check_toml_limits("s = \"\"\"a\\  \n  \xc3\xa9\"\"\"\n", "m.toml"),
                       doctest::Contains("m.toml:2:3: a non-ASCII character after a backslash"),
                       config_error);
  CHECK_NOTHROW(
      check_toml_limits("s = \"\"\"a\\\n  b \xc3\xa9\"\"\"\nt=\"\\u00e9 \xc3\xa9\"\n", "ok.toml"));
  // In strings and comments they are TOML, and reach toml++.
  CHECK_NOTHROW(
      check_toml_limits("# caf\xc3\xa9\nname = \"caf\xc3\xa9\"\nk = 'na\xc3\xafve'\n", "ok.toml"));
}

TEST_CASE("a table header of a million parts is refused at its line and column") {
  const auto text = "# a comment\n[" + dotted(1'000'000) + "]\n";
  CHECK_THROWS_WITH_AS(check_toml_limits(text, "h.toml"), doctest::Contains("h.toml:2:129:"),
                       config_error);
}

TEST_CASE("arrays and inline tables nested past the limit are refused where they pass it") {
  const std::string deep = "x = " + std::string(100'000, '[') + std::string(100'000, ']') + "\n";
  CHECK_THROWS_WITH_AS(check_toml_limits(deep, "d.toml"),
                       doctest::Contains("d.toml:1:69: arrays, inline tables and table headers "
                                         "nest more than 64 levels deep"),
                       config_error);
  std::string tables = "x = ";
  for (int i = 0; i < 1000; ++i)
    tables += "{a = ";
  CHECK_THROWS_AS(check_toml_limits(tables, "t.toml"), config_error);
}

TEST_CASE(
    "keys and nesting within the limits pass, and strings, comments and floats are not counted") {
  check_toml_limits("[optimizer.schedule]\ntype = \"cosine\"\n" + dotted(64) + " = 1\n", "ok.toml");
  check_toml_limits("x = " + std::string(64, '[') + std::string(64, ']') + "\n", "ok.toml");
  // Many dots and brackets, none of them structure.
  const std::string dots(10'000, '.');
  const std::string brackets(10'000, '[');
  check_toml_limits("a = \"" + dots + brackets + "\"\n", "s.toml");
  check_toml_limits("a = '" + dots + brackets + "'\n", "s.toml");
  check_toml_limits("a = \"\"\"\n" + dots + "\n" + brackets + "\n\"\"\"\n", "s.toml");
  check_toml_limits("a = '''" + dots + brackets + "'''\n", "s.toml");
  check_toml_limits("# " + dots + brackets + "\n", "s.toml");
  check_toml_limits("a = \"\\\"" + dots + "\"\n", "s.toml");  // an escaped quote
  std::string floats = "x = [";
  for (int i = 0; i < 1000; ++i)
    floats += "1.5, 2.25e3, ";
  check_toml_limits(floats + "0.5]\nt = 1979-05-27T07:32:00.999\n", "f.toml");
}

TEST_CASE("a key longer than the name limit is refused at its position, quoted short") {
  const auto key = std::string(10'000'000, 'k');
  try {
    parse_config("[optimizer]\n" + key + " = 1\n", "k.toml", ".");
    FAIL("expected a config_error");
  } catch (const config_error& e) {
    const std::string message = e.what();
    CHECK(message.rfind("k.toml:2:1: the key 'kkk", 0) == 0);
    CHECK(message.find("(10000000 bytes) is longer than 256 bytes") != std::string::npos);
    CHECK(message.size() < 300);
  }
}

TEST_CASE("a config saved with a byte-order mark and CR LF line ends reads as without them") {
  const std::string text =
      "\xEF\xBB\xBF[run]\r\nsteps = 3\r\n[data]\r\nsource = \"synthetic\"\r\n"
      "[[model.layers]]\r\ntype = \"linear\"\r\nout = 10\r\n";
  auto config = troupe::parse_config(text, "windows.toml");
  CHECK(config.run.steps == 3);
  CHECK(config.model.layers.size() == 1);
  // Positions count from after the mark, as an editor shows them.
  try {
    troupe::parse_config("\xEF\xBB\xBF[run]\r\nstepz = 3\r\n", "typo.toml");
    FAIL("an unknown key was accepted");
  } catch (const troupe::config_error& e) {
    CHECK(std::string{e.what()}.find("typo.toml:2:1:") != std::string::npos);
  }
}

TEST_CASE("a byte troupe refuses is named, by code point or as what it is, at its line:col") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"x = 1\xC2\xA0\n", "n.toml:1:6: U+00A0 (a no-break space) outside a string or a comment; "
                          "write a plain space"},
      {"x = \xE2\x80\x9C" "a\xE2\x80\x9D\n", "q.toml:1:5: U+201C (a curly double quote) outside a "
                                          "string or a comment; write a straight quote"},
      {"x = 1\n\xEF\xBB\xBFy = 2\n", "b.toml:2:1: U+FEFF (a byte-order mark) outside a string or "
                                     "a comment; a byte-order mark is accepted only as the "
                                     "file's first character"},
      {"x = \xC3\xA9\n", "e.toml:1:5: U+00E9 '\xC3\xA9' outside a string or a comment; TOML allows"},
      {"x = 1 \xFF\n", "l.toml:1:7: byte 0xff (not UTF-8: is the file in another encoding? save it "
                       "as UTF-8) outside a string or a comment; a config is UTF-8 text"},
  };
  for (const auto& [text, message] : cases) {
    const std::string name = message.substr(0, message.find(':'));
    try {
      troupe::check_toml_limits(text, name);
      FAIL("accepted: " << text);
    } catch (const troupe::config_error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(message) != std::string::npos);
    }
  }
}
