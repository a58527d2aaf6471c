// topology_custom_actor_test.cpp: an actor kind from a plugin in an explicit config.
//
// The test plugin's "test_grad_scaler" (tests/plugins/good_plugin.cpp) accepts and emits
// grads wires. Placed between layer l0 and its optimizer in the two-stage config of
// topology_test_configs.hpp, it must be read with its settings, pass validation, print
// and read back; wired wrongly, it must be refused with the kinds named.
#include <doctest/doctest.h>

#include "actors/session/session.hpp"
#include "runtime/graph/topology.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/runtime/graph/test_configs.hpp"
#include "tests/text_checks.hpp"

using namespace topology_test;
using troupe::config_error;

namespace {

const std::string grads_l0 = wire_table("l0", "opt.l0") + "\nkind = \"grads\"\n";

const std::string scaler_actor = R"(
[[actor]]
name = "scaler"
kind = "test_grad_scaler"
device = "cpu:0"
factor = 0.25
)";

/// two_stages with the scaler on l0's grads wire: l0 -> scaler -> opt.l0.
std::string with_scaler() {
  test_plugins::load();
  auto text = replaced(two_stages, grads_l0,
                       wire_table("l0", "scaler") + "\nkind = \"grads\"\n\n" +
                           wire_table("scaler", "opt.l0") + "\nkind = \"grads\"\n");
  return text + scaler_actor;
}

using troupe::test::contains;

}  // namespace

TEST_CASE("a custom actor on a grads wire is read with its settings and validates") {
  auto t = load(with_scaler());
  const auto* scaler = t.find("scaler");
  REQUIRE(scaler != nullptr);
  CHECK(scaler->kind == troupe::actor_kind::custom);
  CHECK(scaler->custom_kind == "test_grad_scaler");
  CHECK(scaler->kind_name() == "test_grad_scaler");
  CHECK(scaler->replica == -1);
  CHECK(scaler->layer == -1);
  REQUIRE(scaler->settings.count("factor") == 1);
  CHECK(std::get<double>(scaler->settings.at("factor").value) == 0.25);
  CHECK(scaler->settings.at("factor").where.line == position_of(with_scaler(), "factor").first);
}

TEST_CASE("a custom actor and its settings round-trip through format_explicit") {
  auto text = with_scaler();
  auto config = troupe::parse_config(text, "t.toml");
  auto t = load(text);
  auto ejected = troupe::format_explicit(t, config);
  CHECK(contains(ejected, "kind = \"test_grad_scaler\"\ndevice = \"cpu:0\"\nfactor = 0.25\n"));
  auto again = load(ejected);
  REQUIRE(again.find("scaler") != nullptr);
  CHECK(again.find("scaler")->settings.at("factor").value ==
        t.find("scaler")->settings.at("factor").value);
  CHECK(again.wires.size() == t.wires.size());

  auto table = troupe::format_table(t);
  CHECK(contains(table, "settings"));
  CHECK(contains(table, "test_grad_scaler"));
  CHECK(contains(table, "factor=0.25"));
  auto dot = troupe::format_dot(t);
  CHECK(contains(dot, "\"scaler\" [label=\"scaler\\ntest_grad_scaler\\nfactor=0.25\"]"));
  // Without custom actors the table keeps its columns.
  CHECK_FALSE(contains(troupe::format_table(load(two_stages)), "settings"));
}

TEST_CASE("wires to and from a custom actor follow its signature") {
  auto text = with_scaler();
  SUBCASE("an activations wire into a grads-only kind") {
    auto bad = replaced(text, wire_table("l0", "scaler") + "\nkind = \"grads\"",
                        wire_table("l0", "scaler") + "\nkind = \"activations\"");
    check_error(bad, wire_table("l0", "scaler"),
                "an activations wire cannot go from 'l0' (a layer) to 'scaler' (a "
                "test_grad_scaler); a test_grad_scaler accepts grads wires");
  }
  SUBCASE("a params wire out of a kind that emits grads only") {
    auto bad = replaced(text, wire_table("opt.l0", "l0") + "\nkind = \"params\"",
                        wire_table("scaler", "l0") + "\nkind = \"params\"");
    check_error(bad, wire_table("scaler", "l0"),
                "a params wire cannot go from 'scaler' (a test_grad_scaler) to 'l0' (a layer); "
                "a test_grad_scaler emits grads wires");
  }
  SUBCASE("a custom actor that passes the gradients on to no one") {
    auto bad = replaced(text, wire_table("scaler", "opt.l0") + "\nkind = \"grads\"\n", "");
    check_error(bad, wire_table("l0", "scaler"),
                "the gradients of 'l0' (layer 0 of replica 0) go to 'scaler' (a "
                "test_grad_scaler), which sends them on to no one: add a grads wire from "
                "'scaler' to an averager or an optimizer");
  }
  SUBCASE("gradients that reach the optimizer of another layer through it") {
    auto bad = replaced(text, wire_table("scaler", "opt.l0"), wire_table("scaler", "opt.l2"));
    check_error(bad, wire_table("l0", "scaler"),
                "'l0' (layer 0 of replica 0) is wired to 'opt.l2' (through 'scaler'), which "
                "serves layer 2");
  }
  SUBCASE("a custom actor that names a model layer that does not exist") {
    auto bad = replaced(text, "factor = 0.25", "factor = 0.25\nlayer = 7");
    check_error(bad, actor_table("scaler"),
                "'scaler' has layer = 7, but the model's layers are numbered 0..2");
  }
}

TEST_CASE("replicated gradients through a custom actor must still reach an averager") {
  test_plugins::load();
  // two_replicas: r0.l0 -> avg.l0 -> opt.l0. Put the scaler between the averager and the
  // optimizer (allowed), then also between r0.l0 and the optimizer (not averaged: refused).
  auto text = two_replicas + scaler_actor;
  auto after_averager = replaced(text, wire_table("avg.l0", "opt.l0"),
                                 wire_table("scaler", "opt.l0") + "\nkind = \"grads\"\n\n" +
                                     wire_table("avg.l0", "scaler"));
  CHECK_NOTHROW(load(after_averager));
  auto unaveraged = replaced(after_averager, wire_table("r0.l0", "avg.l0"),
                             wire_table("r0.l0", "scaler"));
  check_error(unaveraged, wire_table("r0.l0", "scaler"),
              "with 2 replicas the gradients of 'r0.l0' (layer 0 of replica 0) must be "
              "averaged: send them to an averager, not to 'opt.l0' (through 'scaler')");
}

TEST_CASE("an unknown actor kind lists the registered kinds, the plugin's too, with the nearest") {
  auto text = replaced(with_scaler(), "kind = \"test_grad_scaler\"", "kind = \"test_grad_scalr\"");
  check_error(text, "kind = \"test_grad_scalr\"",
              "[[actor]] 'scaler' kind: unknown actor kind 'test_grad_scalr'; did you mean "
              "'test_grad_scaler'? (expected one of 'averager', 'data_loader', 'layer', 'loss', "
              "'optimizer', ");
  try {
    load(text);
  } catch (const config_error& e) {
    CHECK(contains(e.what(), "'test_grad_scaler'"));
  }
}

TEST_CASE("with a sharded optimizer nothing may sit between a ring averager and its optimizer") {
  test_plugins::load();
  // Note [sharded optimizer]: the averager and its optimizer pass shards back and forth.
  auto shorthand = troupe::parse_config(header + R"(
[[model.layers]]
type = "linear"
out = 3
[parallel]
devices = ["cpu:0", "cpu:1"]
data = 2
averaging = "ring"
shard_optimizer = true
)",
                                        "s.toml");
  auto text = troupe::format_explicit(troupe::prepare_session(shorthand).graph, shorthand);
  CHECK_NOTHROW(load(text));
  auto scaled = replaced(text, wire_table("r0.avg_0", "r0.optimizer_0"),
                         wire_table("scaler", "r0.optimizer_0") + "\nkind = \"grads\"\n\n" +
                             wire_table("r0.avg_0", "scaler")) +
                scaler_actor;
  check_error(scaled, wire_table("r0.avg_0", "scaler"),
              "ring averager 'r0.avg_0' sends its sums to 'scaler' (a test_grad_scaler), but "
              "with [parallel] shard_optimizer = true it exchanges shards with its optimizer "
              "directly");
  CHECK_NOTHROW(load(replaced(scaled, "shard_optimizer = true", "shard_optimizer = false")));
}
