// topology_test_configs.hpp: explicit configs and helpers shared by the topology tests.
//
// The configs are raw strings whose first line is line 1. Error tests mutate them with
// replaced() and find the exact line:column they expect with position_of(), so that
// inserting a line into a config does not silently shift every expectation.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "runtime/config/config.hpp"
#include "runtime/graph/topology.hpp"

namespace topology_test {

// Data: 8 features, 3 classes (the functions below pass them to the topology code).
constexpr std::int64_t features = 8;
constexpr std::int64_t classes = 3;

const std::string header = R"([data]
source = "synthetic"
batch_size = 8
synthetic_features = 8
synthetic_classes = 3
)";

/// 2 replicas x 3 layers (linear 8->4, relu, linear 4->3), replica r on cpu:r, central
/// averaging of the two linear layers, one optimizer per linear layer.
const std::string two_replicas = header + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
microbatches = 2
averaging = "central"

[[actor]]
name = "loader"
kind = "data_loader"
device = "cpu:0"

[[actor]]
name = "r0.l0"
kind = "layer"
device = "cpu:0"
replica = 0
layer = 0
type = "linear"
out = 4

[[actor]]
name = "r0.l1"
kind = "layer"
device = "cpu:0"
replica = 0
layer = 1
type = "relu"

[[actor]]
name = "r0.l2"
kind = "layer"
device = "cpu:0"
replica = 0
layer = 2
type = "linear"
out = 3
init = "xavier"

[[actor]]
name = "r0.loss"
kind = "loss"
device = "cpu:0"
replica = 0

[[actor]]
name = "r1.l0"
kind = "layer"
device = "cpu:1"
replica = 1
layer = 0
type = "linear"
out = 4

[[actor]]
name = "r1.l1"
kind = "layer"
device = "cpu:1"
replica = 1
layer = 1
type = "relu"

[[actor]]
name = "r1.l2"
kind = "layer"
device = "cpu:1"
replica = 1
layer = 2
type = "linear"
out = 3
init = "xavier"

[[actor]]
name = "r1.loss"
kind = "loss"
device = "cpu:1"
replica = 1

[[actor]]
name = "avg.l0"
kind = "averager"
device = "cpu:0"
layer = 0
method = "central"

[[actor]]
name = "avg.l2"
kind = "averager"
device = "cpu:0"
layer = 2
method = "central"

[[actor]]
name = "opt.l0"
kind = "optimizer"
device = "cpu:0"
layer = 0

[[actor]]
name = "opt.l2"
kind = "optimizer"
device = "cpu:0"
layer = 2

[[wire]]
from = "loader"
to = "r0.l0"
kind = "activations"
capacity = 2

[[wire]]
from = "r0.l0"
to = "r0.l1"
kind = "activations"

[[wire]]
from = "r0.l1"
to = "r0.l2"
kind = "activations"

[[wire]]
from = "r0.l2"
to = "r0.loss"
kind = "activations"

[[wire]]
from = "loader"
to = "r0.loss"
kind = "labels"

[[wire]]
from = "loader"
to = "r1.l0"
kind = "activations"
capacity = 2

[[wire]]
from = "r1.l0"
to = "r1.l1"
kind = "activations"

[[wire]]
from = "r1.l1"
to = "r1.l2"
kind = "activations"

[[wire]]
from = "r1.l2"
to = "r1.loss"
kind = "activations"

[[wire]]
from = "loader"
to = "r1.loss"
kind = "labels"

[[wire]]
from = "r0.l0"
to = "avg.l0"
kind = "grads"

[[wire]]
from = "r1.l0"
to = "avg.l0"
kind = "grads"

[[wire]]
from = "r0.l2"
to = "avg.l2"
kind = "grads"

[[wire]]
from = "r1.l2"
to = "avg.l2"
kind = "grads"

[[wire]]
from = "avg.l0"
to = "opt.l0"
kind = "grads"

[[wire]]
from = "avg.l2"
to = "opt.l2"
kind = "grads"

[[wire]]
from = "opt.l0"
to = "r0.l0"
kind = "params"

[[wire]]
from = "opt.l0"
to = "r1.l0"
kind = "params"

[[wire]]
from = "opt.l2"
to = "r0.l2"
kind = "params"

[[wire]]
from = "opt.l2"
to = "r1.l2"
kind = "params"
)";

/// 1 replica, 2 pipeline stages: layers 0-1 on cpu:0, layer 2 on cpu:1, 1F1B, no averagers.
const std::string two_stages = header + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
microbatches = 4
schedule = "1f1b"

[[actor]]
name = "loader"
kind = "data_loader"
device = "cpu:0"

[[actor]]
name = "l0"
kind = "layer"
device = "cpu:0"
layer = 0
type = "linear"
out = 4
bias = false

[[actor]]
name = "l1"
kind = "layer"
device = "cpu:0"
layer = 1
type = "tanh"

[[actor]]
name = "l2"
kind = "layer"
device = "cpu:1"
stage = 1
layer = 2
type = "linear"
out = 3

[[actor]]
name = "loss"
kind = "loss"
device = "cpu:1"

[[actor]]
name = "opt.l0"
kind = "optimizer"
device = "cpu:0"
layer = 0

[[actor]]
name = "opt.l2"
kind = "optimizer"
device = "cpu:1"
layer = 2

[[wire]]
from = "loader"
to = "l0"
kind = "activations"

[[wire]]
from = "l0"
to = "l1"
kind = "activations"

[[wire]]
from = "l1"
to = "l2"
kind = "activations"
capacity = 3

[[wire]]
from = "l2"
to = "loss"
kind = "activations"

[[wire]]
from = "loader"
to = "loss"
kind = "labels"

[[wire]]
from = "l0"
to = "opt.l0"
kind = "grads"

[[wire]]
from = "l2"
to = "opt.l2"
kind = "grads"

[[wire]]
from = "opt.l0"
to = "l0"
kind = "params"

[[wire]]
from = "opt.l2"
to = "l2"
kind = "params"
)";

/// `text` with its one occurrence of `from` replaced by `to`.
inline std::string replaced(const std::string& text, const std::string& from,
                            const std::string& to) {
  auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "not in the config: " << from);
  REQUIRE_MESSAGE(text.find(from, at + 1) == std::string::npos, "twice in the config: " << from);
  return text.substr(0, at) + to + text.substr(at + from.size());
}

/// 1-based line and column of the one occurrence of `needle` in `text`.
inline std::pair<int, int> position_of(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  REQUIRE_MESSAGE(at != std::string::npos, "not in the config: " << needle);
  REQUIRE_MESSAGE(text.find(needle, at + 1) == std::string::npos,
                  "twice in the config: " << needle);
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < at; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return {line, static_cast<int>(at - line_start) + 1};
}

/// The table of the actor named `name` starts at this text.
inline std::string actor_table(const std::string& name) {
  return "[[actor]]\nname = \"" + name + "\"";
}

/// The table of the wire from `from` to `to` starts at this text.
inline std::string wire_table(const std::string& from, const std::string& to) {
  return "[[wire]]\nfrom = \"" + from + "\"\nto = \"" + to + "\"";
}

/// Parses, reads and validates an explicit config.
inline troupe::topology load(const std::string& text) {
  auto config = troupe::parse_config(text, "t.toml");
  auto t = troupe::topology_from_explicit(config, features);
  troupe::validate_topology(t, config, classes);
  return t;
}

/// Checks that loading `text` fails at the start of `needle`, with `expected` in the message.
inline void check_error(const std::string& text, const std::string& needle,
                        const std::string& expected) {
  auto [line, column] = position_of(text, needle);
  try {
    load(text);
  } catch (const troupe::config_error& error) {
    INFO("message: " << std::string(error.what()));
    CHECK(error.where().file == "t.toml");
    CHECK(error.where().line == line);
    CHECK(error.where().column == column);
    CHECK(std::string(error.what()).find(expected) != std::string::npos);
    return;
  }
  FAIL("expected a config_error containing: " << expected);
}

}  // namespace topology_test
