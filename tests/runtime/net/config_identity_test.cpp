// config_identity_test.cpp: a node's identity depends on the bytes of its config and
// plugins, never on their paths; one changed byte, or plugins in another order, make a
// difference that mismatch() shows with both hashes; unreadable files are refused by name.
#include "runtime/net/config_identity.hpp"

#include <doctest/doctest.h>

#include <string>

#include "runtime/net/secret.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::test::temp_directory;

namespace {

using troupe::test::contains;

const std::string run_text = "[model]\nlayers = [\"linear 784 10\"]\n[run]\nsteps = 3\n";

}  // namespace

TEST_CASE("the same config bytes at two paths on two machines are the same identity") {
  const temp_directory here{"troupe-node-a"};
  const temp_directory there{"troupe-node-b"};
  const auto mine = identify(here.write("run.toml", run_text), {});
  const auto theirs = identify(there.write("configs/other-name.toml", run_text), {});
  CHECK(mine.config_hash == sha256_hex(run_text));
  CHECK(mine.config_hash == theirs.config_hash);
  CHECK(mine.plugins.empty());
  CHECK(mine.plugins_hash == theirs.plugins_hash);
  CHECK(mismatch(mine, theirs).empty());
}

TEST_CASE("one changed byte of the config is a mismatch that prints both hashes") {
  const temp_directory directory{"troupe-node"};
  std::string changed = run_text;
  changed[changed.size() - 2] = '4';  // steps = 4
  const auto mine = identify(directory.write("a.toml", run_text), {});
  const auto coordinator = identify(directory.write("b.toml", changed), {});
  CHECK(mine.config_hash != coordinator.config_hash);
  const auto message = mismatch(mine, coordinator);
  INFO(message);
  CHECK(contains(message, "this node's config differs from the coordinator's"));
  CHECK(contains(message, "config sha256 " + mine.config_hash + " here"));
  CHECK(contains(message, "config sha256 " + coordinator.config_hash + " on the coordinator"));
  CHECK(contains(message, "make every node run the same file"));
  CHECK_FALSE(contains(message, "plugins differ"));
}

TEST_CASE("plugins count by file name and bytes, in order, and not by directory") {
  const temp_directory here{"troupe-node-a"};
  const temp_directory there{"troupe-node-b"};
  const auto config = here.write("run.toml", run_text);
  const auto layers = here.write("lib/liblayers.so", "layers v1");
  const auto kinds = here.write("lib/libkinds.so", "kinds v1");
  const auto layers_elsewhere = there.write("opt/plugins/liblayers.so", "layers v1");
  const auto kinds_elsewhere = there.write("opt/plugins/libkinds.so", "kinds v1");
  const auto layers_changed = there.write("new/liblayers.so", "layers v2");

  const auto mine = identify(config, {layers, kinds});
  REQUIRE(mine.plugins.size() == 2);
  CHECK(mine.plugins[0] == "liblayers.so:" + sha256_hex("layers v1"));
  CHECK(mine.plugins[1] == "libkinds.so:" + sha256_hex("kinds v1"));
  CHECK(mismatch(mine, identify(config, {layers_elsewhere, kinds_elsewhere})).empty());

  SUBCASE("another order") {
    const auto swapped = identify(config, {kinds, layers});
    CHECK(swapped.plugins_hash != mine.plugins_hash);
    const auto message = mismatch(mine, swapped);
    INFO(message);
    CHECK(contains(message, "this node's plugins differ from the coordinator's"));
    CHECK(contains(message, "plugins sha256 " + mine.plugins_hash + " here"));
    CHECK(contains(message, "plugins sha256 " + swapped.plugins_hash + " on the coordinator"));
    CHECK(contains(message, "plugin 1: " + mine.plugins[0] + " here, " + swapped.plugins[0] +
                                " on the coordinator"));
    CHECK(contains(message, "in the same order"));
    CHECK_FALSE(contains(message, "config differs"));
  }
  SUBCASE("another build of one plugin") {
    const auto message = mismatch(mine, identify(config, {layers_changed, kinds}));
    INFO(message);
    CHECK(contains(message, "plugin 1: liblayers.so:" + sha256_hex("layers v1") +
                                " here, liblayers.so:" + sha256_hex("layers v2") +
                                " on the coordinator"));
    CHECK_FALSE(contains(message, "plugin 2:"));
  }
  SUBCASE("one plugin fewer") {
    const auto message = mismatch(mine, identify(config, {layers}));
    CHECK(contains(message, "plugin 2: " + mine.plugins[1] + " here, none on the coordinator"));
  }
  SUBCASE("a different config and different plugins are both reported") {
    const auto other = identify(there.write("other.toml", run_text + "# changed\n"), {layers});
    const auto message = mismatch(mine, other);
    CHECK(contains(message, "config differs"));
    CHECK(contains(message, "plugins differ"));
  }
}

TEST_CASE("a config or plugin that cannot be read is refused, naming it") {
  const temp_directory directory{"troupe-node"};
  const auto config = directory.write("run.toml", run_text);
  const auto missing = directory / "missing.toml";
  auto message = std::string{};
  try {
    identify(missing, {});
  } catch (const user_error& e) {
    message = e.what();
  }
  CHECK(contains(message, "cannot read the config file '" + missing + "'"));
  CHECK(contains(message, "No such file or directory"));
  message.clear();
  try {
    identify(config, {directory.string()});
  } catch (const user_error& e) {
    message = e.what();
  }
  CHECK(contains(message, "cannot read the plugin '" + directory.string() + "'"));
  CHECK(contains(message, "Is a directory"));
}
