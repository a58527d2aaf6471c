// The scan a config's text passes before toml++ parses it (runtime/config/toml_limits.hpp):
// long dotted keys and deep nesting are refused at their line:col, and what only looks
// like them (inside strings and comments, a float's dot) is not.
#include <doctest/doctest.h>

#include <string>

#include "runtime/base/limits.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/toml_limits.hpp"
#include "troupe/error.hpp"

using namespace troupe;

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
