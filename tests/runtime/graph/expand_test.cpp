// expand_test.cpp: stage balancing (balance_stages, the DP that splits a model's layers
// into P contiguous pipeline stages by cost) and the explicit split of [parallel] stages.
//
// Costs are hand-picked so that the optimal split is known; a brute force over every
// split checks the DP on many small cases. Costs are small integers, exactly representable,
// so every comparison of stage costs here is exact.
#include "runtime/graph/topology.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "tests/config_text.hpp"
#include "tests/runtime/graph/test_configs.hpp"

using troupe::balance_stages;
using troupe::stage_split;

namespace {

using ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

ranges as_ranges(const stage_split& split) {
  REQUIRE(split.first.size() == split.last.size());
  ranges out;
  for (std::size_t s = 0; s < split.first.size(); ++s)
    out.emplace_back(split.first[s], split.last[s]);
  return out;
}

double most_expensive(const std::vector<double>& costs, const ranges& split) {
  double worst = 0;
  for (const auto& [first, last] : split) {
    double sum = 0;
    for (auto i = first; i <= last; ++i)
      sum += costs[static_cast<std::size_t>(i)];
    worst = std::max(worst, sum);
  }
  return worst;
}

/// The smallest possible maximum stage cost, by trying every way to cut.
double brute_force_optimum(const std::vector<double>& costs, std::int64_t stages) {
  const auto n = static_cast<std::int64_t>(costs.size());
  double best = std::numeric_limits<double>::infinity();
  ranges current;
  std::function<void(std::int64_t)> cut = [&](std::int64_t start) {
    auto left = stages - static_cast<std::int64_t>(current.size());
    if (left == 1) {
      current.emplace_back(start, n - 1);
      best = std::min(best, most_expensive(costs, current));
      current.pop_back();
      return;
    }
    for (auto last = start; last <= n - left; ++last) {
      current.emplace_back(start, last);
      cut(last + 1);
      current.pop_back();
    }
  };
  cut(0);
  return best;
}

/// Contiguous, in order, covering every layer, none empty.
void check_well_formed(const ranges& split, std::int64_t layers, std::int64_t stages) {
  REQUIRE(static_cast<std::int64_t>(split.size()) == stages);
  std::int64_t expected = 0;
  for (const auto& [first, last] : split) {
    CHECK(first == expected);
    CHECK(last >= first);
    expected = last + 1;
  }
  CHECK(expected == layers);
}

}  // namespace

TEST_CASE("balance_stages finds the optimal split of hand-computed costs") {
  // 1+2+3 = 6 | 4+5 = 9 is the only split into 2 whose worst stage is 9.
  CHECK(as_ranges(balance_stages({1, 2, 3, 4, 5}, 2)) == ranges{{0, 2}, {3, 4}});
  // Into 3: 1+2+3 = 6 | 4 | 5; every other split has a stage of 7 or more.
  CHECK(as_ranges(balance_stages({1, 2, 3, 4, 5}, 3)) == ranges{{0, 2}, {3, 3}, {4, 4}});
  // One heavy layer in the middle gets a stage of its own: 2+2 | 10 | 2+2+2.
  CHECK(as_ranges(balance_stages({2, 2, 10, 2, 2, 2}, 3)) == ranges{{0, 1}, {2, 2}, {3, 5}});
  // A model like an MLP: two big linear layers and cheap activations between them.
  CHECK(as_ranges(balance_stages({100, 1, 100, 1, 10}, 2)) == ranges{{0, 1}, {2, 4}});
}

TEST_CASE("balance_stages with one stage puts every layer in it") {
  CHECK(as_ranges(balance_stages({3, 1, 4, 1, 5}, 1)) == ranges{{0, 4}});
  CHECK(as_ranges(balance_stages({7}, 1)) == ranges{{0, 0}});
}

TEST_CASE("balance_stages with as many stages as layers gives each layer its own") {
  CHECK(as_ranges(balance_stages({3, 1, 4, 1, 5}, 5)) ==
        ranges{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}});
  CHECK(as_ranges(balance_stages({0, 0, 0}, 3)) == ranges{{0, 0}, {1, 1}, {2, 2}});
}

TEST_CASE("balance_stages breaks ties by cutting as early as possible from the last stage") {
  // {1, 1, 1, 1} into 3: [1,1][1][1], [1][1,1][1] and [1][1][1,1] all have worst stage 2.
  // The DP keeps the first (earliest) cut that reaches the optimum, and the split is read
  // back from the last stage, so the last stage starts as early as it can, then the one
  // before it: [1][1][1,1].
  CHECK(as_ranges(balance_stages({1, 1, 1, 1}, 3)) == ranges{{0, 0}, {1, 1}, {2, 3}});
  // Zero-cost layers (activations) could sit on either side of a cut; they go to the
  // later stage: 5 | 0 + 0 + 5.
  CHECK(as_ranges(balance_stages({5, 0, 0, 5}, 2)) == ranges{{0, 0}, {1, 3}});
  // Equal costs split evenly.
  CHECK(as_ranges(balance_stages({2, 2, 2, 2, 2, 2}, 3)) == ranges{{0, 1}, {2, 3}, {4, 5}});
}

TEST_CASE("balance_stages matches a brute force over every split of small models") {
  // Deterministic pseudo-random costs in [0, 9]; integers keep the sums exact.
  std::uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>((state >> 16) % 10);
  };
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> costs(static_cast<std::size_t>(1 + trial % 8));
    for (auto& cost : costs)
      cost = next();
    const auto n = static_cast<std::int64_t>(costs.size());
    for (std::int64_t stages = 1; stages <= n; ++stages) {
      INFO("trial " << trial << ", " << n << " layers, " << stages << " stages");
      auto split = as_ranges(balance_stages(costs, stages));
      check_well_formed(split, n, stages);
      CHECK(most_expensive(costs, split) == brute_force_optimum(costs, stages));
    }
  }
}

TEST_CASE("balance_stages refuses more stages than layers, or none, as a programmer error") {
  CHECK_THROWS_AS(balance_stages({1, 2}, 3), troupe::check_failure);
  CHECK_THROWS_AS(balance_stages({1, 2}, 0), troupe::check_failure);
}

TEST_CASE("an explicit [parallel] stages split is used as written, not balanced") {
  using namespace topology_test;
  // Three layers of very different costs; the explicit split puts the two cheap ones last.
  const std::string text = header + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
pipeline = 2
stages = [[0, 0], [1, 2]]

)" + troupe::test::linear(4) + troupe::test::layer("relu") +
                           troupe::test::linear(3);
  auto config = troupe::parse_config(text, "t.toml");
  std::vector<troupe::shape_t> shapes = {{features}, {4}, {4}, {classes}};
  auto t = troupe::expand_shorthand(config, shapes);
  CHECK(t.stages == 2);
  for (const auto& [name, stage] : std::vector<std::pair<std::string, std::int32_t>>{
           {"layer_0", 0}, {"layer_1", 1}, {"layer_2", 1}, {"loss", 1}}) {
    const auto* a = t.find(name);
    REQUIRE(a != nullptr);
    CHECK(a->stage == stage);
    CHECK(a->device.index == stage);
  }
  // The activations wire into each stage carries the stage's credits; inside a stage none.
  for (const auto& w : t.wires)
    if (w.kind == troupe::wire_kind::activations && w.to == "layer_2")
      CHECK(w.capacity == 0);

  SUBCASE("a split with a gap is a config error at [parallel] stages") {
    auto bad = replaced(text, "stages = [[0, 0], [1, 2]]", "stages = [[0, 0], [2, 2]]");
    auto [line, column] = position_of(bad, "[[0, 0], [2, 2]]");
    try {
      troupe::expand_shorthand(troupe::parse_config(bad, "t.toml"), shapes);
      FAIL("expected a config_error");
    } catch (const troupe::config_error& error) {
      INFO(error.what());
      CHECK(error.where().line == line);
      CHECK(error.where().column == column);
      CHECK(std::string(error.what()).find("stage 1 should start at layer 1") != std::string::npos);
    }
  }
}

TEST_CASE("interleaved stages: stage s on the pipeline's device s mod P, wires with its bound") {
  using namespace topology_test;
  // Four layers, P = 2 devices, v = 2 stages each: layers 0 and 2 on cpu:0, 1 and 3 on
  // cpu:1; the loss with the last stage.
  const std::string text = header + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
pipeline = 2
virtual_stages = 2
microbatches = 4
schedule = "1f1b"

)" + troupe::test::linear(4) + troupe::test::layer("relu") +
                           troupe::test::linear(4) + troupe::test::linear(3);
  std::vector<troupe::shape_t> shapes = {{features}, {4}, {4}, {4}, {classes}};
  auto config = troupe::parse_config(text, "t.toml");
  auto t = troupe::expand_shorthand(config, shapes);
  troupe::validate_topology(t, config, classes);
  CHECK(t.stages == 4);
  CHECK(t.virtual_stages == 2);
  for (const auto& [name, stage] : std::vector<std::pair<std::string, std::int32_t>>{
           {"layer_0", 0}, {"layer_1", 1}, {"layer_2", 2}, {"layer_3", 3}, {"loss", 3}}) {
    const auto* a = t.find(name);
    REQUIRE(a != nullptr);
    CHECK(a->stage == stage);
    CHECK(a->device.index == stage % 2);
  }
  // The wires into the stages carry M credits (Note [credits and turns]): the devices'
  // sequencers keep the bound. Into the loss: none.
  std::map<std::string, std::int64_t> capacity;
  for (const auto& w : t.wires)
    if (w.kind == troupe::wire_kind::activations)
      capacity[w.to] = w.capacity;
  CHECK(capacity == std::map<std::string, std::int64_t>{
                        {"layer_0", 4}, {"layer_1", 4}, {"layer_2", 4}, {"layer_3", 4}, {"loss", 0}});
  // The explicit form keeps virtual_stages, and reads back to the same stages and devices.
  auto ejected = troupe::parse_config(troupe::format_explicit(t, config), "e.toml");
  CHECK(ejected.parallel.virtual_stages == 2);

  SUBCASE("a schedule other than 1F1B is refused at virtual_stages") {
    auto bad = replaced(text, "schedule = \"1f1b\"", "schedule = \"gpipe\"");
    auto [line, column] = position_of(bad, "2\nmicrobatches");
    auto c = troupe::parse_config(bad, "t.toml");
    try {
      troupe::validate_topology(troupe::expand_shorthand(c, shapes), c, classes);
      FAIL("expected a config_error");
    } catch (const troupe::config_error& error) {
      INFO(error.what());
      CHECK(error.where().line == line);
      CHECK(error.where().column == column);
      CHECK(std::string(error.what()).find("set schedule = \"1f1b\" (found \"gpipe\")") !=
            std::string::npos);
    }
  }
  SUBCASE("micro-batches that are not a multiple of P are refused") {
    auto bad = replaced(text, "microbatches = 4", "microbatches = 3");
    auto c = troupe::parse_config(bad, "t.toml");
    try {
      troupe::validate_topology(troupe::expand_shorthand(c, shapes), c, classes);
      FAIL("expected a config_error");
    } catch (const troupe::config_error& error) {
      INFO(error.what());
      CHECK(std::string(error.what()).find("microbatches = 3 must be a multiple of the 2 devices") !=
            std::string::npos);
    }
  }
  SUBCASE("more stages than layers names both numbers") {
    auto bad = replaced(text, "virtual_stages = 2", "virtual_stages = 3");
    auto c = troupe::parse_config(bad, "t.toml");
    try {
      troupe::expand_shorthand(c, shapes);
      FAIL("expected a config_error");
    } catch (const troupe::config_error& error) {
      INFO(error.what());
      CHECK(std::string(error.what()).find("pipeline x virtual_stages = 2 x 3 = 6 stages, but "
                                           "the model has only 4 layers") != std::string::npos);
    }
  }
}

TEST_CASE("a single-stage replica on another node than the loader gets four steps of batches") {
  // Note [a remote replica's batches]: the wire from the loader to a replica of one stage
  // on another node holds max(4, prefetch) steps' micro-batches; a replica on the loader's
  // node, and a pipeline's first stage anywhere, keep their schedule's credits.
  using namespace topology_test;
  auto loader_capacities = [](const std::string& parallel, const std::string& data = "") {
    const auto text = header + data + parallel + "\n[cluster]\nnodes = 2\n" +
                      troupe::test::linear(4) + troupe::test::linear(3);
    auto t = troupe::expand_shorthand(troupe::parse_config(text, "t.toml"),
                                      {{features}, {4}, {classes}});
    std::map<std::string, std::int64_t> out;
    for (const auto& w : t.wires)
      if (w.from == "loader" && w.kind == troupe::wire_kind::activations)
        out[w.to] = w.capacity;
    return out;
  };
  using capacities = std::map<std::string, std::int64_t>;
  const std::string two_nodes = "[parallel]\ndevices = [\"cpu:0\", \"node1/cpu:0\"]\ndata = 2\n";
  CHECK(loader_capacities(two_nodes) == capacities{{"r0.layer_0", 1}, {"r1.layer_0", 4}});
  CHECK(loader_capacities(two_nodes + "microbatches = 2\n") ==
        capacities{{"r0.layer_0", 2}, {"r1.layer_0", 8}});
  CHECK(loader_capacities(two_nodes, "prefetch = 6\n") ==
        capacities{{"r0.layer_0", 1}, {"r1.layer_0", 6}});
  // One node: nothing changes.
  CHECK(loader_capacities("[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n") ==
        capacities{{"r0.layer_0", 1}, {"r1.layer_0", 1}});
  // A pipeline's first stage on the other node keeps 1F1B's P - s credits.
  CHECK(loader_capacities("[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"node1/cpu:0\", "
                          "\"node1/cpu:1\"]\ndata = 2\npipeline = 2\nmicrobatches = 4\n"
                          "schedule = \"1f1b\"\n") ==
        capacities{{"r0.layer_0", 2}, {"r1.layer_0", 2}});
}
