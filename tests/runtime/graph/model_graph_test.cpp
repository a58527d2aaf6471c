// model_graph_test.cpp: models beyond a chain in the shorthand form: layer names and
// inputs resolved into a graph (resolve_inputs), its shapes (check_model), its wires
// (expand_shorthand: one per edge, credits across stages, skip wires in the plan), and
// every refusal at its line:column.
#include "runtime/graph/model_graph.hpp"

#include <doctest/doctest.h>

#include "actors/session/session.hpp"
#include "runtime/graph/topology.hpp"
#include "tests/config_text.hpp"
#include "tests/runtime/graph/test_configs.hpp"

using namespace troupe;
using topology_test::position_of;
using topology_test::replaced;

namespace {

// 8 features, 3 classes; layer #2 is read by #3 and (skipping) by #4.
const std::string residual = R"([data]
source = "synthetic"
batch_size = 8
synthetic_features = 8
synthetic_classes = 3

[[model.layers]]
type = "linear"
out = 6

[[model.layers]]
name = "h"
type = "relu"

[[model.layers]]
name = "f"
type = "linear"
out = 6

[[model.layers]]
name = "sum"
type = "add"
inputs = ["h", "f"]

[[model.layers]]
type = "linear"
out = 3
)";

/// The shapes check_model gives `text`, or its config_error.
std::vector<shape_t> shapes_of(const std::string& text) {
  return check_model(parse_config(text, "m.toml"), 8, 3);
}

/// Loading `text` (parse, then check_model) fails at the start of `needle` with
/// `expected` in the message.
void check_refused(const std::string& text, const std::string& needle,
                   const std::string& expected) {
  auto [line, column] = position_of(text, needle);
  try {
    shapes_of(text);
  } catch (const config_error& error) {
    INFO("message: " << std::string(error.what()));
    CHECK(error.where().line == line);
    CHECK(error.where().column == column);
    CHECK(std::string(error.what()).find(expected) != std::string::npos);
    return;
  }
  FAIL("expected a config_error containing: " << expected);
}

}  // namespace

TEST_CASE("a residual model's inputs, readers and shapes") {
  auto config = parse_config(residual, "m.toml");
  REQUIRE(config.model.layers.size() == 5);
  CHECK(config.model.layers[1].name == "h");
  CHECK(config.model.layers[3].inputs == std::vector<std::string>{"h", "f"});
  CHECK(config.model.layers[3].settings.empty());  // name and inputs are not settings

  const auto inputs = resolve_inputs(config.model);
  CHECK(inputs == layer_inputs{{data_input}, {0}, {1}, {1, 2}, {3}});
  CHECK(consumers_of(inputs) ==
        std::vector<std::vector<std::int32_t>>{{1}, {2, 3}, {3}, {4}, {}});
  CHECK(shapes_of(residual) == std::vector<shape_t>{{8}, {6}, {6}, {6}, {6}, {3}});
  CHECK(outputs_along(inputs, shapes_of(residual)) ==
        std::vector<shape_t>{{6}, {6}, {6}, {6}, {3}});

  // A model without names is the chain it always was.
  auto chain = parse_config(
      topology_test::header + test::linear(4) + test::layer("relu") + test::linear(3), "c.toml");
  CHECK(resolve_inputs(chain.model) == sequential_inputs(3));
}

TEST_CASE("a residual model expands to one wire per edge, with credits across stages") {
  auto config = parse_config(residual + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
stages = [[0, 2], [3, 4]]
microbatches = 4
schedule = "1f1b"
)",
                             "m.toml");
  auto t = expand_shorthand(config, check_model(config, 8, 3));
  validate_topology(t, config, 3);
  std::vector<std::tuple<std::string, std::string, std::int64_t, bool>> activations;
  const auto skips = t.skip_wires();
  for (std::size_t i = 0; i < t.wires.size(); ++i)
    if (t.wires[i].kind == wire_kind::activations)
      activations.emplace_back(t.wires[i].from, t.wires[i].to, t.wires[i].capacity, skips[i]);
  // The add's wires in the order it names its inputs; the skip wire from stage 0 into
  // stage 1 has the credits of the stage boundary.
  CHECK(activations == std::vector<std::tuple<std::string, std::string, std::int64_t, bool>>{
                           {"loader", "layer_0", 2, false},
                           {"layer_0", "layer_1", 0, false},
                           {"layer_1", "layer_2", 0, false},
                           {"layer_1", "layer_3", 1, true},
                           {"layer_2", "layer_3", 1, false},
                           {"layer_3", "layer_4", 0, false},
                           {"layer_4", "loss", 0, false},
                       });
  auto table = format_table(t);
  CHECK(table.find("layer_1      layer_3      activations (skip)  1") != std::string::npos);
  CHECK(table.find("add (sum)") != std::string::npos);
  CHECK(format_dot(t).find("activations skip (1)") != std::string::npos);

  // Ejected and read back: the same graph, from the wires.
  auto ejected = parse_config(format_explicit(t, config), "ejected.toml");
  auto back = topology_from_explicit(ejected, 8);
  validate_topology(back, ejected, 3);
  CHECK(back.inputs == t.inputs);
  CHECK(back.shapes == t.shapes);
  CHECK(back.outputs == t.outputs);
}

TEST_CASE("names and inputs that do not make a graph are refused at their line:column") {
  SUBCASE("a name used twice") {
    check_refused(replaced(residual, "name = \"f\"", "name = \"h\""), "\"h\"\ntype = \"linear\"",
                  "the name 'h' is already layer #2's");
  }
  SUBCASE("an input no layer has, with the nearest name") {
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"h\", \"ff\"]"),
                  "\"ff\"", "no layer is named 'ff'; did you mean 'f'?");
  }
  SUBCASE("an input that comes later") {
    auto text = replaced(residual, "name = \"h\"\ntype = \"relu\"",
                         "name = \"h\"\ntype = \"relu\"\ninputs = [\"sum\"]");
    check_refused(text, "\"sum\"]", "'sum' is layer #4, after this one");
  }
  SUBCASE("itself") {
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"h\", \"sum\"]"),
                  "\"sum\"]", "'sum' is this layer itself");
  }
  SUBCASE("a name twice in one list") {
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"h\", \"h\"]"),
                  "\"h\"]", "'h' is named twice");
  }
  SUBCASE("several inputs for a layer that is not an add") {
    check_refused(replaced(residual, "type = \"add\"", "type = \"relu\""), "\"f\"]",
                  "only a layer that sums its inputs (like 'add') reads several; a 'relu' layer reads one");
  }
  SUBCASE("an add of one input") {
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"f\"]"), "\"f\"]",
                  "'add' sums two or more inputs, and it names one");
  }
  SUBCASE("an add that names no inputs") {
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]\n", ""), "[[model.layers]]\nname = \"sum\"",
                  "'add' sums two or more inputs; name them");
  }
  SUBCASE("inputs on the first layer") {
    auto text = replaced(residual, "type = \"linear\"\nout = 6\n\n[[model.layers]]\nname = \"h\"",
                         "type = \"linear\"\ninputs = [\"h\"]\nout = 6\n\n[[model.layers]]\nname = \"h\"");
    check_refused(text, "\"h\"]", "the first layer reads the data and names no inputs");
  }
  SUBCASE("an output that goes nowhere") {
    // f is read only by the add, which now reads h twice over another path.
    auto text = replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"h\", \"g\"]");
    text = replaced(text, "name = \"f\"\ntype = \"linear\"\nout = 6\n",
                    "name = \"f\"\ntype = \"linear\"\nout = 6\n\n[[model.layers]]\nname = \"g\"\n"
                    "type = \"relu\"\ninputs = [\"h\"]\n");
    check_refused(text, "[[model.layers]]\nname = \"f\"", "its output goes nowhere");
  }
  SUBCASE("an add of two shapes") {
    check_refused(replaced(residual, "name = \"f\"\ntype = \"linear\"\nout = 6",
                           "name = \"f\"\ntype = \"linear\"\nout = 5"),
                  "[[model.layers]]\nname = \"sum\"",
                  "sums inputs of different shapes: layer 1 puts out (6) per sample, layer 2 (5)");
  }
  SUBCASE("a name that is not a string, inputs that are not a list of names") {
    check_refused(replaced(residual, "name = \"f\"", "name = 3"), "3\ntype",
                  "name: expected the layer's name");
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = \"hh\""), "\"hh\"",
                  "inputs: expected the names of earlier layers it reads");
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = []"), "[]",
                  "found an empty array");
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [\"h\", 2]"), "2]",
                  "found an integer");
    check_refused(replaced(residual, "inputs = [\"h\", \"f\"]", "inputs = [[[\"h\"]]]"),
                  "[[\"h\"]]]", "found an array");
  }
}
