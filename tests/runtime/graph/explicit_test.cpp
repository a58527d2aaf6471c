// topology_explicit_test.cpp: the explicit config form ([[actor]] / [[wire]]), read by
// parse_config + topology_from_explicit and checked by validate_topology.
//
// Two hand-written configs (tests/runtime/graph/test_configs.hpp) are read back field
// by field; then each error class is provoked by one small edit of them and checked for
// its message and its exact file:line:column.
#include "runtime/graph/topology.hpp"

#include <doctest/doctest.h>

#include "tests/runtime/graph/test_configs.hpp"

using namespace topology_test;
using troupe::config_error;
using troupe::parse_config;
using troupe::setting_value;
using troupe::shape_t;

namespace {

/// Every occurrence of `from` replaced by `to`.
std::string replaced_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// The error of parse_config alone (errors the loader finds before any topology exists).
void check_parse_error(const std::string& text, const std::string& needle,
                       const std::string& expected) {
  auto [line, column] = position_of(text, needle);
  try {
    parse_config(text, "t.toml");
  } catch (const config_error& error) {
    INFO("message: " << std::string(error.what()));
    CHECK(error.where().line == line);
    CHECK(error.where().column == column);
    CHECK(std::string(error.what()).find(expected) != std::string::npos);
    return;
  }
  FAIL("expected a config_error containing: " << expected);
}

/// check_error at an explicit position, for edits that make the needle ambiguous.
void check_error_at(const std::string& text, std::pair<int, int> position,
                    const std::string& expected) {
  try {
    load(text);
  } catch (const config_error& error) {
    INFO("message: " << std::string(error.what()));
    CHECK(error.where().line == position.first);
    CHECK(error.where().column == position.second);
    CHECK(std::string(error.what()).find(expected) != std::string::npos);
    return;
  }
  FAIL("expected a config_error containing: " << expected);
}

std::int64_t integer(const setting_value& value) {
  return std::get<std::int64_t>(value.value);
}
std::string text(const setting_value& value) {
  return std::get<std::string>(value.value);
}

}  // namespace

TEST_CASE("an explicit config of two replicas reads into the expected topology") {
  auto t = load(two_replicas);
  CHECK(t.devices.size() == 2);
  CHECK(t.devices[1].to_string() == "cpu:1");
  CHECK(t.replicas == 2);
  CHECK(t.stages == 1);
  CHECK(t.microbatches == 2);
  CHECK(t.schedule == troupe::pipeline_schedule::gpipe);
  CHECK(t.averaging == troupe::averaging_method::central);
  CHECK(t.shapes == std::vector<shape_t>{{8}, {4}, {4}, {3}});
  CHECK(t.actors.size() == 13);
  CHECK(t.wires.size() == 20);

  const auto* loader = t.find("loader");
  REQUIRE(loader != nullptr);
  CHECK(loader->kind == troupe::actor_kind::data_loader);
  CHECK(loader->kind_name() == "data_loader");
  CHECK(loader->replica == -1);
  CHECK(loader->layer == -1);
  CHECK(loader->where.line == position_of(two_replicas, actor_table("loader")).first);

  const auto* layer = t.find("r1.l2");
  REQUIRE(layer != nullptr);
  CHECK(layer->kind == troupe::actor_kind::layer);
  CHECK(layer->device.to_string() == "cpu:1");
  CHECK(layer->replica == 1);
  CHECK(layer->stage == 0);  // a layer's stage defaults to 0
  CHECK(layer->layer == 2);
  CHECK(layer->math.type == "linear");
  REQUIRE(layer->math.settings.size() == 2);  // out and init; no name, kind, device, ...
  CHECK(integer(layer->math.settings.at("out")) == 3);
  CHECK(text(layer->math.settings.at("init")) == "xavier");
  CHECK(layer->math.where.line == layer->where.line);
  auto out_at = layer->math.settings.at("out").where;
  CHECK(out_at.line == position_of(two_replicas, actor_table("r1.l2")).first + 7);
  CHECK(out_at.column == 1);

  const auto* averager = t.find("avg.l2");
  REQUIRE(averager != nullptr);
  CHECK(averager->layer == 2);
  CHECK(averager->replica == -1);
  CHECK(averager->method == troupe::averaging_method::central);
  CHECK(averager->settings.empty());
  CHECK(t.find("nobody") == nullptr);

  const auto& first = t.wires.front();
  CHECK(first.from == "loader");
  CHECK(first.to == "r0.l0");
  CHECK(first.kind == troupe::wire_kind::activations);
  CHECK(first.capacity == 2);
  CHECK(first.where.line == position_of(two_replicas, wire_table("loader", "r0.l0")).first);
  CHECK(first.where.column == 1);
  CHECK(t.wires.back().kind == troupe::wire_kind::params);
  CHECK(t.wires.back().capacity == 0);  // unbounded by default
}

TEST_CASE("an explicit config of two pipeline stages reads into the expected topology") {
  auto t = load(two_stages);
  CHECK(t.replicas == 1);
  CHECK(t.stages == 2);
  CHECK(t.microbatches == 4);
  CHECK(t.schedule == troupe::pipeline_schedule::one_f_one_b);
  CHECK(
      t.averaging ==
      troupe::averaging_method::ring);  // [parallel] default; no averager uses it with one replica
  CHECK(t.find("l2")->stage == 1);
  CHECK(t.find("l2")->device.to_string() == "cpu:1");
  CHECK(t.find("loss")->stage == -1);
  CHECK(std::get<bool>(t.find("l0")->math.settings.at("bias").value) == false);
  CHECK(t.wires[2].capacity == 3);
}

TEST_CASE("an averager's method defaults to the parallel section's averaging") {
  auto text = replaced(two_replicas, "layer = 0\nmethod = \"central\"\n", "layer = 0\n");
  auto t = load(text);
  CHECK(t.find("avg.l0")->method == troupe::averaging_method::central);
  CHECK(t.find("avg.l0")->method_where.line == position_of(text, actor_table("avg.l0")).first);
}

TEST_CASE("the parallel section reads stages, share_devices and bucket_kib") {
  auto config = parse_config(R"([data]
source = "synthetic"
[model]
[[model.layers]]
type = "linear"
[parallel]
pipeline = 2
stages = [[0, 1], [2, 4]]
share_devices = true
bucket_kib = 64
)",
                             "t.toml");
  CHECK(config.parallel.stage_ranges ==
        std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {2, 4}});
  CHECK(config.parallel.stages_where.line == 8);
  CHECK(config.parallel.stages_where.column == 10);
  CHECK(config.parallel.share_devices);
  CHECK(config.parallel.bucket_kib == 64);
  CHECK_FALSE(config.is_explicit());

  auto defaults = parse_config(
      "[data]\nsource = \"synthetic\"\n[model]\n[[model.layers]]\n"
      "type = \"relu\"\n",
      "t.toml");
  CHECK(defaults.parallel.stage_ranges.empty());
  CHECK_FALSE(defaults.parallel.share_devices);
  CHECK(defaults.parallel.bucket_kib == 1024);
}

TEST_CASE("the config loader rejects malformed stages and shorthand keys in an explicit config") {
  const std::string shorthand =
      "[data]\nsource = \"synthetic\"\n[model]\n[[model.layers]]\n"
      "type = \"relu\"\n[parallel]\n";
  check_parse_error(shorthand + "stages = [[0, 1], [3, 2]]\n", "[3, 2]",
                    "expected layer indices 0 <= first <= last, found [3, 2]");
  check_parse_error(shorthand + "stages = [[0, 1], [2]]\n", "[2]",
                    "expected a pair of layer indices [first, last], found an array of 1 values");
  check_parse_error(shorthand + "bucket_kib = 0\n", "0\n",
                    "expected an integer in [1, 1073741824], found 0");
  check_parse_error(shorthand + "share_devices = 1\n", "1\n", "expected a boolean");

  SUBCASE("model layers together with actor tables") {
    auto text = replaced(two_stages, "[parallel]",
                         "[model]\n[[model.layers]]\ntype = \"relu\"\n\n[parallel]");
    check_parse_error(text, "[[model.layers]]",
                      "an explicit config lists its layers as [[actor]] tables; remove "
                      "[[model.layers]] or the [[actor]] tables");
  }
  SUBCASE("data, pipeline or stages in an explicit config") {
    for (const std::string line : {"data = 2", "pipeline = 2", "stages = [[0, 2]]"}) {
      auto text = replaced(two_stages, "microbatches = 4\n", "microbatches = 4\n" + line + "\n");
      check_parse_error(text, line, "an explicit config's [[actor]] tables");
    }
  }
  SUBCASE("actor tables without wire tables") {
    auto text = two_stages.substr(0, two_stages.find("[[wire]]"));
    check_parse_error(text, actor_table("loader"), "an explicit config needs [[wire]] tables too");
  }
  SUBCASE("wire tables without actor tables") {
    check_parse_error(shorthand + "[[wire]]\nfrom = \"a\"\n", "[[wire]]",
                      "[[wire]] tables need [[actor]] tables");
  }
  SUBCASE("a value that is not a scalar") {
    auto text = replaced(two_stages, "out = 3\n", "out = [3]\n");
    check_parse_error(text, "[3]", "[[actor]] #4 out: expected a scalar");
  }
  SUBCASE("actor written as a single table") {
    check_parse_error(shorthand + "[actor]\nname = \"a\"\n", "actor]",
                      "'actor' must be an array of tables [[actor]]");
  }
}

TEST_CASE("topology_from_explicit names the key of a bad actor or wire table") {
  SUBCASE("unknown actor kind, with a suggestion") {
    auto text = replaced(two_replicas, "kind = \"data_loader\"", "kind = \"dataloader\"");
    check_error(text, "kind = \"dataloader\"",
                "[[actor]] 'loader' kind: unknown actor kind 'dataloader'; did you mean "
                "'data_loader'?");
  }
  SUBCASE("a device that does not parse") {
    auto text = replaced(two_replicas, "name = \"r0.l1\"\nkind = \"layer\"\ndevice = \"cpu:0\"",
                         "name = \"r0.l1\"\nkind = \"layer\"\ndevice = \"gpu:0\"");
    check_error(text, "device = \"gpu:0\"",
                "[[actor]] 'r0.l1' device: expected a device like 'cpu:0', 'cuda:0' or "
                "'node1/cpu:0', found 'gpu:0'");
  }
  SUBCASE("a second spelling of a device") {
    auto text = replaced(two_stages, "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:1\"",
                         "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:01\"");
    check_error(text, "device = \"cpu:01\"", "found 'cpu:01'");
  }
  SUBCASE("an actor without a name") {
    auto text = replaced(two_stages, "[[actor]]\nname = \"loader\"\n", "[[actor]]\n");
    check_error(text, "[[actor]]\nkind = \"data_loader\"", "[[actor]] #1: missing key 'name'");
  }
  SUBCASE("a layer without its model index") {
    auto text = replaced(two_stages, "device = \"cpu:0\"\nlayer = 1\n", "device = \"cpu:0\"\n");
    check_error(text, actor_table("l1"), "[[actor]] 'l1': missing key 'layer'");
  }
  SUBCASE("a setting on an actor that takes none, with a suggestion for a typo") {
    auto text = replaced(two_stages, "kind = \"loss\"\n", "kind = \"loss\"\nreplia = 0\n");
    check_error(text, "replia", "[[actor]] 'loss': unknown key 'replia'; did you mean 'replica'?");
    text = replaced(two_stages, "kind = \"data_loader\"\n", "kind = \"data_loader\"\nout = 44\n");
    check_error(text, "out = 44", "[[actor]] 'loader': unknown key 'out'");
  }
  SUBCASE("an unknown averaging method") {
    auto text =
        replaced(two_replicas, "layer = 0\nmethod = \"central\"", "layer = 0\nmethod = \"mean\"");
    check_error(text, "method = \"mean\"", "unknown averaging method 'mean'");
  }
  SUBCASE("unknown wire kind, with a suggestion") {
    auto text =
        replaced(two_stages, "to = \"loss\"\nkind = \"labels\"", "to = \"loss\"\nkind = \"label\"");
    check_error(
        text, "kind = \"label\"",
        "[[wire]] 'loader' -> 'loss' kind: unknown wire kind 'label'; did you mean 'labels'?");
  }
  SUBCASE("a negative capacity") {
    auto text = replaced(two_stages, "capacity = 3", "capacity = -1");
    check_error(text, "capacity = -1",
                "capacity: expected an integer in [0, 2147483647], found -1");
  }
  SUBCASE("model layer indices with a gap") {
    auto text = replaced_all(two_stages, "layer = 2", "layer = 3");
    check_error(text, actor_table("l2"), "no layer actor holds model layer 2");
  }
  SUBCASE("layer settings are the layer's to check") {
    auto text = replaced(two_stages, "out = 3\n", "out = 3\nouts = 3\n");
    check_error(text, "outs", "outs");
  }
}

TEST_CASE("validate_topology names the table of each broken actor or wire") {
  SUBCASE("a duplicate name") {
    auto at = position_of(two_replicas, actor_table("r1.loss"));
    auto text = replaced(two_replicas, "name = \"r1.loss\"", "name = \"r0.loss\"");
    check_error_at(text, at, "actor name 'r0.loss' is used twice (first at t.toml:");
  }
  SUBCASE("a device that [parallel] does not list") {
    auto text = replaced(two_stages, "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:1\"",
                         "name = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:2\"");
    check_error(
        text, actor_table("loss"),
        "'loss' runs on cpu:2, which [parallel] devices does not list (it lists cpu:0, cpu:1)");
  }
  SUBCASE("a wire to an actor that does not exist") {
    auto text = replaced(two_replicas, wire_table("r0.l1", "r0.l2"), wire_table("r0.l1", "r0.l3"));
    check_error(text, wire_table("r0.l1", "r0.l3"), "wire to 'r0.l3': no actor has that name");
  }
  SUBCASE("a wire kind that cannot join those kinds of actors") {
    auto text = replaced(two_replicas, wire_table("r0.l2", "r0.loss") + "\nkind = \"activations\"",
                         wire_table("r0.l2", "r0.loss") + "\nkind = \"params\"");
    check_error(text, wire_table("r0.l2", "r0.loss"),
                "a params wire cannot go from 'r0.l2' (a layer) to 'r0.loss' (a loss); params "
                "wires go optimizer -> layer");
  }
  SUBCASE("a key a built-in kind does not read, or a stage out of range") {
    // They were accepted and ignored: a user who wrote them meant something by them.
    check_error(replaced(two_stages, "kind = \"data_loader\"\ndevice = \"cpu:0\"",
                         "kind = \"data_loader\"\ndevice = \"cpu:0\"\nlayer = 3"),
                actor_table("loader"),
                "'loader' is the data loader, which serves every replica, stage and layer: it "
                "takes no layer = N");
    check_error(replaced(two_stages, "kind = \"data_loader\"\ndevice = \"cpu:0\"",
                         "kind = \"data_loader\"\ndevice = \"cpu:0\"\nreplica = 0"),
                actor_table("loader"), "it takes no replica = N");
    check_error(replaced(two_stages, "kind = \"loss\"\ndevice = \"cpu:1\"",
                         "kind = \"loss\"\ndevice = \"cpu:1\"\nlayer = 2"),
                actor_table("loss"),
                "'loss' is a loss, which reads the model's last layer: it takes no layer = N");
    check_error(replaced(two_stages, "kind = \"optimizer\"\ndevice = \"cpu:1\"\nlayer = 2",
                         "kind = \"optimizer\"\ndevice = \"cpu:1\"\nlayer = 2\nstage = 5"),
                actor_table("opt.l2"),
                "'opt.l2' has stage = 5, but the stages are numbered 0..1");
    check_error(replaced(two_stages, "kind = \"loss\"\ndevice = \"cpu:1\"",
                         "kind = \"loss\"\ndevice = \"cpu:1\"\nstage = 2"),
                actor_table("loss"), "'loss' has stage = 2, but the stages are numbered 0..1");
  }
  SUBCASE("two data loaders") {
    auto text =
        replaced(two_stages, "[[wire]]\nfrom = \"loader\"\nto = \"l0\"",
                 "[[actor]]\nname = \"loader2\"\nkind = \"data_loader\"\ndevice = \"cpu:1\"\n\n"
                 "[[wire]]\nfrom = \"loader\"\nto = \"l0\"");
    check_error(text, actor_table("loader2"), "a second data_loader 'loader2'");
  }
  SUBCASE("a layer without incoming activations") {
    auto text = replaced(two_stages, wire_table("loader", "l0") + "\nkind = \"activations\"\n", "");
    check_error(text, actor_table("l0"),
                "'l0' (layer 0 of replica 0) has 0 incoming activations wires");
  }
  SUBCASE("a layer without outgoing activations") {
    auto text = replaced(two_stages,
                         wire_table("l1", "l2") + "\nkind = \"activations\"\ncapacity = 3\n", "");
    check_error(text, actor_table("l1"),
                "'l1' (layer 1 of replica 0) has 0 outgoing activations wires");
  }
  SUBCASE("a layer with two inputs") {
    auto text = two_stages + "\n[[wire]]\nfrom = \"l0\"\nto = \"l2\"\nkind = \"activations\"\n";
    auto at = position_of(text, "[[wire]]\nfrom = \"l0\"\nto = \"l2\"");
    check_error_at(
        text, at,
        "'l2' (layer 2) has 2 incoming activations wires, needs 1 (only a layer that sums its "
        "inputs, like 'add', reads several); this one, from 'l0' to 'l2', is one too many");
  }
  SUBCASE("a layer whose output goes nowhere") {
    auto text = replaced(two_stages,
                         wire_table("l1", "l2") + "\nkind = \"activations\"\ncapacity = 3\n",
                         wire_table("l0", "l2") + "\nkind = \"activations\"\ncapacity = 3\n");
    check_error(text, actor_table("l1"),
                "'l1' (layer 1 of replica 0) feeds nothing: no later layer reads its output");
  }
  SUBCASE("an add with one input") {
    check_error(replaced(two_stages, "type = \"tanh\"", "type = \"add\""), actor_table("l1"),
                "'l1' is 'add', which sums two or more inputs, and one activations wire comes "
                "in");
  }
  SUBCASE("an add with two wires from one layer") {
    auto text = replaced(two_stages, "type = \"tanh\"", "type = \"add\"") +
                "\n[[wire]] # again\nfrom = \"l0\"\nto = \"l1\"\nkind = \"activations\"\n";
    check_error(text, "[[wire]] # again",
                "a second wire from layer 0 into layer 1; one wire per input");
  }
  SUBCASE("a layer that reads a later one") {
    auto text = replaced(two_stages, "type = \"tanh\"", "type = \"add\"") +
                "\n[[wire]]\nfrom = \"l2\"\nto = \"l1\"\nkind = \"activations\"\n";
    check_error(text, "[[wire]]\nfrom = \"l2\"\nto = \"l1\"",
                "it goes back from layer 2 to layer 1 (a cycle, or layers numbered out of "
                "order); a layer reads earlier layers only");
  }
  SUBCASE("a cycle along activations") {
    auto text = replaced(two_stages, wire_table("loader", "l0") + "\nkind = \"activations\"\n", "");
    text = replaced(text, wire_table("l2", "loss"), wire_table("l2", "l0"));
    check_error(text, wire_table("l2", "l0"),
                "it goes back from layer 2 to layer 0 (a cycle, or layers numbered out of "
                "order)");
  }
  SUBCASE("no loss") {
    auto text = replaced(two_stages,
                         "[[actor]]\nname = \"loss\"\nkind = \"loss\"\ndevice = \"cpu:1\"\n", "");
    text = replaced(text, wire_table("l2", "loss") + "\nkind = \"activations\"\n", "");
    text = replaced(text, wire_table("loader", "loss") + "\nkind = \"labels\"\n", "");
    check_error(text, actor_table("l2"),
                "no loss actor: the model's last layer 'l2' must send its activations to a loss");
  }
  SUBCASE("a loss without labels") {
    auto text = replaced(two_stages, wire_table("loader", "loss") + "\nkind = \"labels\"\n", "");
    check_error(text, actor_table("loss"), "'loss' has 0 incoming labels wires");
  }
  SUBCASE("a shape mismatch along a wire names both actors and shapes") {
    auto text = replaced(two_stages, "out = 3\n", "out = 5\n");
    check_error(text, wire_table("l2", "loss"),
                "activations wire from 'l2' to 'loss': 'l2' puts out (5) per sample but 'loss' "
                "takes (3), one logit per class");
  }
  SUBCASE("a replica missing a layer") {
    auto text = replaced(two_replicas,
                         actor_table("r1.l1") +
                             "\nkind = \"layer\"\ndevice = \"cpu:1\"\n"
                             "replica = 1\nlayer = 1\ntype = \"relu\"\n",
                         "");
    text = replaced(text, wire_table("r1.l1", "r1.l2") + "\nkind = \"activations\"\n", "");
    text = replaced(text, wire_table("r1.l0", "r1.l1"), wire_table("r1.l0", "r1.l2"));
    check_error(text, actor_table("r1.l0"),
                "replica 1 has no layer 1 ('r0.l1' is layer 1 of replica 0)");
  }
  SUBCASE("a replica whose layer differs from replica 0's") {
    auto text = replaced(two_replicas, "replica = 1\nlayer = 0\ntype = \"linear\"\nout = 4",
                         "replica = 1\nlayer = 0\ntype = \"linear\"\nout = 5");
    check_error(text, actor_table("r1.l0"),
                "'r1.l0' (layer 0 of replica 1) differs from 'r0.l0' (layer 0 of replica 0): its "
                "out is 5, not 4");
  }
  SUBCASE("an activations wire from one replica to another") {
    auto text = replaced(two_replicas, wire_table("r0.l0", "r0.l1"), wire_table("r0.l0", "r1.l1"));
    text = replaced(text, wire_table("r1.l0", "r1.l1"), wire_table("r1.l0", "r0.l1"));
    check_error(text, wire_table("r0.l0", "r1.l1"),
                "activations wire from 'r0.l0' to 'r1.l1': it crosses from replica 0 to replica 1");
  }
  SUBCASE("a parameterless layer with a params wire") {
    auto text = two_stages + "\n[[wire]]\nfrom = \"opt.l0\"\nto = \"l1\"\nkind = \"params\"\n";
    check_error(
        text, wire_table("opt.l0", "l1"),
        "'l1' (layer 1 of replica 0) is 'tanh', which has no parameters: remove this params wire");
  }
  SUBCASE("a layer without an optimizer") {
    auto text = replaced(two_stages, wire_table("opt.l2", "l2") + "\nkind = \"params\"\n", "");
    check_error(text, actor_table("l2"), "'l2' (layer 2 of replica 0) has 0 params wires");
  }
  SUBCASE("replicas whose gradients are not averaged") {
    auto text =
        replaced(two_replicas, wire_table("r0.l0", "avg.l0"), wire_table("r0.l0", "opt.l0"));
    check_error(text, wire_table("r0.l0", "opt.l0"),
                "with 2 replicas the gradients of 'r0.l0' (layer 0 of replica 0) must be averaged");
  }
  SUBCASE("an averager whose method is not the run's") {
    auto text =
        replaced(two_replicas, "layer = 2\nmethod = \"central\"", "layer = 2\nmethod = \"ring\"");
    check_error(text, "method = \"ring\"",
                "averager 'avg.l2' has method 'ring', but [parallel] averaging is 'central'");
  }
  SUBCASE("more replica-stages than devices without share_devices") {
    auto text = replaced_all(two_replicas, "device = \"cpu:1\"", "device = \"cpu:0\"");
    check_error(text, actor_table("r1.l0"),
                "'r1.l0' (layer 0 of replica 1), stage 0, shares cpu:0 with 'r0.l0' (layer 0 of "
                "replica 0), stage 0: R * P = 2 x 1 = 2 replica-stages need 2 devices, and the "
                "layers use 1");
    auto shared =
        replaced(text, "averaging = \"central\"", "averaging = \"central\"\nshare_devices = true");
    CHECK_NOTHROW(load(shared));
  }
  SUBCASE("a batch that does not split into replicas x micro-batches") {
    auto text = replaced(two_replicas, "batch_size = 8", "batch_size = 6");
    check_error(text, "[parallel]",
                "[data] batch_size 6 must split evenly into replicas (2) x microbatches (2) parts; "
                "use a batch size that is a multiple of 4");
  }
  SUBCASE("interleaved stages that are not on their device") {
    // v = 2 over 2 stages: P = 1 device holds stages 0 and 1, but l2 (stage 1) is on cpu:1.
    auto text = replaced(two_stages, "schedule = \"1f1b\"", "schedule = \"1f1b\"\nvirtual_stages = 2");
    check_error(text, actor_table("l2"),
                "'l2' (layer 2 of replica 0) of stage 1 is on cpu:1, but [parallel] "
                "virtual_stages = 2: puts stages 0, 1, ... of a replica on one device, and 'l0' "
                "(layer 0 of replica 0) of stage 0 is on cpu:0");
    auto one_device = replaced_all(text, "device = \"cpu:1\"", "device = \"cpu:0\"");
    // Note [credits and turns]: the wire into stage 1 needs M = 4 credits, not 3.
    check_error(one_device, wire_table("l1", "l2"),
                "activations wire from 'l1' to 'l2': capacity 3 into stage 1, which takes its "
                "micro-batches in turn (interleaved stages), needs microbatches = 4 credits or 0");
    CHECK_NOTHROW(load(replaced(one_device, "capacity = 3", "capacity = 4")));
  }
  SUBCASE("ZB-H1's stages take turns when each has its device, and then need M credits") {
    // Note [zero-bubble turns]: the wire into stage 1 needs M = 4 credits, not 3.
    auto text = replaced(two_stages, "schedule = \"1f1b\"", "schedule = \"zb-h1\"");
    check_error(text, wire_table("l1", "l2"),
                "activations wire from 'l1' to 'l2': capacity 3 into stage 1, which takes its "
                "micro-batches in turn (ZB-H1), needs microbatches = 4 credits or 0");
    CHECK(load(replaced(text, "capacity = 3", "capacity = 4")).takes_turns());
    // Both stages on one device: no turns (1F1B's credits and priorities), any capacity.
    auto shared = replaced_all(text, "device = \"cpu:1\"", "device = \"cpu:0\"");
    shared = replaced(shared, "schedule = \"zb-h1\"", "schedule = \"zb-h1\"\nshare_devices = true");
    CHECK_FALSE(load(shared).takes_turns());
  }
  SUBCASE("interleaved stages with a schedule other than 1F1B") {
    auto text =
        replaced(two_stages, "schedule = \"1f1b\"", "schedule = \"gpipe\"\nvirtual_stages = 2");
    check_error(text, "2\n\n[[actor]]", "set schedule = \"1f1b\" (found \"gpipe\")");
  }
}
