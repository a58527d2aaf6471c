// model_graph.hpp: a model as a directed acyclic graph of layers (skip connections).
//
// [[model.layers]] are listed in order, and each reads the output of the layer before it
// (the first reads the data) unless it names its inputs:
//
//   [[model.layers]]              [[model.layers]]
//   name = "block1"               type = "add"
//   type = "linear"               inputs = ["block1", "mlp_out"]   # sums them
//
// Only a layer that sums its inputs (layer::sums_inputs, the built-in `add`) reads several,
// all of one shape; any layer's output may feed several later layers, and the gradients
// they send back are summed. Inputs name earlier layers only, so a model has no cycle by
// construction; every layer but the last must feed some later layer, and only the first
// reads the data. A sequential model (no names, no inputs) is the chain it always was.
//
// In the actor graph (topology.hpp) each edge of this graph is one activations wire per
// replica: a skip connection is one more wire with its own credits, and a pipeline cut
// through it carries the skipped activation on that wire and its gradient back on it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/config/config.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// The input a layer reads when it reads the data (the first layer).
inline constexpr std::int32_t data_input = -1;

/// inputs[i]: the model layers layer i reads, in order (data_input for the data).
using layer_inputs = std::vector<std::vector<std::int32_t>>;

/// Each layer reads the one before it.
layer_inputs sequential_inputs(std::size_t layers);

/// The inputs of [model] layers, resolved from their `name`s and `inputs`. Throws
/// config_error at the offending name: a name used twice, an input that names no
/// earlier layer (a later one, itself, a typo), a name twice in one list, several inputs
/// for a layer that does not sum them, one input for one that does, a layer whose output
/// no later layer reads.
layer_inputs resolve_inputs(const model_section& model);

/// consumers[j]: the layers that read layer j's output, in order.
std::vector<std::vector<std::int32_t>> consumers_of(const layer_inputs& inputs);

/// outputs[j]: layer j's per-sample output, read off `shapes` (shapes[i] the input of
/// layer i, shapes.back() the model's output, as check_model gives them): the input of a
/// layer that reads it, or the model's output for a layer nobody reads.
std::vector<shape_t> outputs_along(const layer_inputs& inputs, const std::vector<shape_t>& shapes);

/// Per-sample shapes of a model: input[i] what layer i reads (for `add`, the shape all its
/// inputs share), output[i] what it puts out.
struct model_shapes {
  std::vector<shape_t> input;
  std::vector<shape_t> output;
};

/// Shapes along the graph from a per-sample data shape. `layers[i]` and `where[i]` are
/// layer i's config and the position its errors point at. Throws config_error when an
/// `add` reads inputs of different shapes, or a layer refuses its input (create_layer and
/// output_shape throw). `check_output(i, output)`, when given, sees each layer's output
/// before any later layer reads it (and may throw).
model_shapes infer_shapes(
    const std::vector<const layer_config*>& layers, const layer_inputs& inputs,
    const shape_t& data, const std::vector<source_position>& where,
    const std::function<void(std::size_t, const shape_t&)>& check_output = nullptr);

}  // namespace troupe
