// init_from_config_test.cpp: [model] init_from as the config reads it: a path relative to
// the config file, checked to exist at its line, "" meaning none, and kept (absolute) by
// `troupe plan --eject`.
#include <doctest/doctest.h>

#include <string>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/config/config.hpp"
#include "runtime/graph/topology.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

// [model] is on line 12 and init_from on line 13 (the error positions count on it).
std::string config_with(const std::string& init_from_line) {
  return "[run]\nsteps = 1\n" + test::data_section({16, 64, 16, 6, 3}) + "\n[model]\n" +
         init_from_line + "\n" + test::linear(3);
}

}  // namespace

TEST_CASE("init_from is relative to the config file and must exist, at its line") {
  const test::temp_directory dir{"troupe-init-from-config"};
  write_safetensors(dir / "w.safetensors", {});
  const auto config =
      parse_config(config_with("init_from = \"w.safetensors\""), dir / "a.toml", dir.string());
  CHECK(config.model.init_from == dir / "w.safetensors");
  CHECK(config.model.init_from_where.line == 13);
  CHECK(config.model.init_from_where.column == 13);
  CHECK(parse_config(config_with("init_from = \"" + (dir / "w.safetensors") + "\""), "b.toml")
            .model.init_from == dir / "w.safetensors");  // absolute: as written
  CHECK(parse_config(config_with("init_from = \"\""), "c.toml").model.init_from.empty());
  CHECK(parse_config(config_with(""), "d.toml").model.init_from.empty());

  CHECK_THROWS_WITH_AS(
      parse_config(config_with("init_from = \"nope.safetensors\""), dir / "e.toml", dir.string()),
      doctest::Contains(
          ("e.toml:13:13: [model] init_from: '" + (dir / "nope.safetensors") + "' does not exist")
              .c_str()),
      config_error);
  CHECK_THROWS_WITH_AS(parse_config(config_with("init_from = \".\""), dir / "f.toml", dir.string()),
                       doctest::Contains("is not a regular file"), config_error);
  CHECK_THROWS_WITH_AS(parse_config(config_with("init_from = 3"), "g.toml"),
                       doctest::Contains("g.toml:13:13: [model] init_from: expected a string"),
                       config_error);
}

TEST_CASE("troupe plan --eject keeps init_from, as an absolute path") {
  const test::temp_directory dir{"troupe-init-from-config"};
  const std::vector<float> w(18, 0.5f), b(3, 0.25f);
  write_safetensors(dir / "w.safetensors", {{"0.weight", safetensors_dtype::f32, {3, 6}, w.data()},
                                            {"0.bias", safetensors_dtype::f32, {3}, b.data()}});
  const auto config =
      parse_config(config_with("init_from = \"w.safetensors\""), dir / "a.toml", dir.string());
  const auto text = format_explicit(prepare_session(config).graph, config);
  INFO(text);
  CHECK(text.find("init_from = \"" + (dir / "w.safetensors") + "\"") != std::string::npos);
  CHECK(parse_config(text, "ejected.toml").model.init_from == dir / "w.safetensors");
}
