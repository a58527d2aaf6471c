// model_graph.cpp: resolving a model's layer names and inputs, and its shapes.
#include "runtime/graph/model_graph.hpp"

#include <algorithm>
#include <map>

#include "runtime/base/limits.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {

layer_inputs sequential_inputs(std::size_t layers) {
  layer_inputs inputs(layers);
  for (std::size_t i = 0; i < layers; ++i)
    inputs[i] = {static_cast<std::int32_t>(i) - 1};
  return inputs;
}

namespace {

std::string layer_title(const layer_config& layer, std::size_t index) {
  return "[[model.layers]] #" + std::to_string(index + 1) + " (" +
         (layer.name.empty() ? quote_user_text(layer.type)
                             : quote_user_text(layer.name) + ", " + quote_user_text(layer.type)) +
         ")";
}

}  // namespace

layer_inputs resolve_inputs(const model_section& model) {
  const auto& layers = model.layers;
  std::map<std::string, std::int32_t> named;  // name -> index
  std::vector<std::string> names;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers[i];
    if (layer.name.empty())
      continue;
    auto [found, fresh] = named.emplace(layer.name, static_cast<std::int32_t>(i));
    if (!fresh)
      throw config_error(layer.name_where,
                         layer_title(layer, i) + ": the name " + quote_user_text(layer.name) +
                             " is already layer #" + std::to_string(found->second + 1) + "'s (at " +
                             layers[static_cast<std::size_t>(found->second)].name_where.to_string() +
                             "); layer names must be unique");
    names.push_back(layer.name);
  }

  layer_inputs inputs(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers[i];
    const auto title = layer_title(layer, i);
    const bool merges = create_layer(layer)->sums_inputs();
    if (layer.inputs.empty()) {
      if (merges)
        throw config_error(layer.where, title + ": " + quote_user_text(layer.type) +
                                            " sums two or more inputs; name them, like "
                                            "inputs = [\"block1\", \"mlp_out\"]");
      inputs[i] = {static_cast<std::int32_t>(i) - 1};
      continue;
    }
    if (i == 0)
      throw config_error(layer.inputs_where.front(),
                         title + ": the first layer reads the data and names no inputs; "
                                 "remove its inputs");
    std::vector<bool> named_here(i, false);  // by earlier layer
    for (std::size_t k = 0; k < layer.inputs.size(); ++k) {
      const auto& input = layer.inputs[k];
      const auto& at = layer.inputs_where[k];
      auto found = named.find(input);
      if (found == named.end())
        throw config_error(at, title + " inputs: no layer is named " + quote_user_text(input) +
                                   did_you_mean(input, names) +
                                   "; inputs name earlier layers by their name = \"...\"");
      const auto j = found->second;
      if (j >= static_cast<std::int32_t>(i))
        throw config_error(
            at, title + " inputs: " + quote_user_text(input) + " is " +
                    (j == static_cast<std::int32_t>(i) ? "this layer itself"
                                                       : "layer #" + std::to_string(j + 1) +
                                                             ", after this one") +
                    "; a layer reads earlier layers only (a model is acyclic)");
      if (named_here[static_cast<std::size_t>(j)])
        throw config_error(at, title + " inputs: " + quote_user_text(input) +
                                   " is named twice; name each input once");
      named_here[static_cast<std::size_t>(j)] = true;
      inputs[i].push_back(j);
    }
    if (merges && inputs[i].size() < 2)
      throw config_error(layer.inputs_where.front(),
                         title + ": " + quote_user_text(layer.type) +
                             " sums two or more inputs, and it names one");
    if (!merges && inputs[i].size() > 1)
      throw config_error(layer.inputs_where[1],
                         title + ": only a layer that sums its inputs (like 'add') reads "
                                 "several; a " +
                             quote_user_text(layer.type) +
                             " layer reads one (sum them first with an 'add' layer)");
  }

  // Every output but the model's goes somewhere.
  const auto consumers = consumers_of(inputs);
  for (std::size_t j = 0; j + 1 < layers.size(); ++j)
    if (consumers[j].empty())
      throw config_error(layers[j].where,
                         layer_title(layers[j], j) +
                             ": its output goes nowhere (the next layer names other inputs, and "
                             "no later layer names " +
                             (layers[j].name.empty() ? "it; give it a name and name it"
                                                     : quote_user_text(layers[j].name)) +
                             " in its inputs)");
  return inputs;
}

std::vector<std::vector<std::int32_t>> consumers_of(const layer_inputs& inputs) {
  std::vector<std::vector<std::int32_t>> consumers(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (auto j : inputs[i])
      if (j != data_input)
        consumers[static_cast<std::size_t>(j)].push_back(static_cast<std::int32_t>(i));
  return consumers;
}

std::vector<shape_t> outputs_along(const layer_inputs& inputs, const std::vector<shape_t>& shapes) {
  TROUPE_CHECK(shapes.size() == inputs.size() + 1,
               "outputs_along: " << shapes.size() << " shapes for " << inputs.size() << " layers");
  std::vector<shape_t> outputs;
  for (const auto& readers : consumers_of(inputs))
    outputs.push_back(readers.empty() ? shapes.back()
                                      : shapes[static_cast<std::size_t>(readers.front())]);
  return outputs;
}

model_shapes infer_shapes(
    const std::vector<const layer_config*>& layers, const layer_inputs& inputs,
    const shape_t& data, const std::vector<source_position>& where,
    const std::function<void(std::size_t, const shape_t&)>& check_output) {
  TROUPE_CHECK(layers.size() == inputs.size() && layers.size() == where.size(),
               "infer_shapes: " << layers.size() << " layers, " << inputs.size() << " inputs");
  model_shapes shapes;
  auto output_of = [&](std::int32_t j) -> const shape_t& {
    return j == data_input ? data : shapes.output[static_cast<std::size_t>(j)];
  };
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& reads = inputs[i];
    const auto& in = output_of(reads.front());
    for (std::size_t k = 1; k < reads.size(); ++k)
      if (output_of(reads[k]) != in)
        throw config_error(
            where[i], "layer " + std::to_string(i) + " ('" + layers[i]->type +
                          "') sums inputs of different shapes: layer " +
                          std::to_string(reads.front()) + " puts out " + shape_to_string(in) +
                          " per sample, layer " + std::to_string(reads[k]) + " " +
                          shape_to_string(output_of(reads[k])) + "; an 'add' needs one shape");
    shapes.input.push_back(in);
    shapes.output.push_back(create_layer(*layers[i])->output_shape(in));
    if (check_output)
      check_output(i, shapes.output.back());
  }
  return shapes;
}

}  // namespace troupe
