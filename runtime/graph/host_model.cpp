// host_model.cpp: a model's forward on the host, and sampling text from it (host_model.hpp).
#include "runtime/graph/host_model.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/base/random.hpp"
#include "runtime/model/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {

host_model::host_model(const std::vector<layer_config>& layers, layer_inputs inputs,
                       const std::vector<shape_t>& shapes,
                       const std::vector<std::vector<std::vector<float>>>& parameters)
    : inputs_(std::move(inputs)) {
  TROUPE_CHECK(inputs_.size() == layers.size() && shapes.size() >= layers.size() &&
                   parameters.size() == layers.size(),
               "host_model: " << layers.size() << " layers, " << inputs_.size() << " inputs, "
                              << shapes.size() << " shapes, " << parameters.size()
                              << " parameter sets");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers_.push_back(create_layer(layers[i]));
    layers_.back()->bind(device_type::cpu);
    const auto specs = layers_.back()->parameters(shapes[i]);
    TROUPE_CHECK(specs.size() == parameters[i].size(),
                 "host_model: layer " << i << " has " << specs.size() << " parameters, given "
                                      << parameters[i].size());
    params_.emplace_back();
    for (std::size_t k = 0; k < specs.size(); ++k)
      params_.back().push_back(tensor::from(parameters[i][k], specs[k].shape));
  }
}

tensor host_model::forward(const tensor& x) const {
  const auto batch = x.dim(0);
  std::vector<tensor> outputs;
  layer_context context;
  context.training = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto read = [&](std::int32_t j) { return j == data_input ? x : outputs.at(static_cast<std::size_t>(j)); };
    tensor in = read(inputs_[i].front());
    if (inputs_[i].size() > 1) {  // an add: the sum in input order, as its actor computes it
      in = tensor::from(in.to_vector(), in.shape());
      for (std::size_t k = 1; k < inputs_[i].size(); ++k) {
        const auto part = read(inputs_[i][k]);
        for (std::int64_t e = 0; e < in.numel(); ++e)
          in.f32()[e] += part.f32()[e];
      }
    }
    shape_t sample(in.shape().begin() + 1, in.shape().end());
    shape_t out_shape{batch};
    const auto out = layers_[i]->output_shape(sample);
    out_shape.insert(out_shape.end(), out.begin(), out.end());
    auto y = tensor::zeros(out_shape);
    std::vector<tensor> saved;
    context.layer = static_cast<std::int32_t>(i);
    layers_[i]->forward(context, params_[i], in, y, saved);
    outputs.push_back(std::move(y));
  }
  return outputs.back();
}

std::string sample_text(const host_model& model, const std::string& vocabulary,
                        std::int64_t context, const std::string& prompt, std::int64_t length,
                        std::uint64_t seed, double temperature) {
  TROUPE_CHECK(!vocabulary.empty() && context > 0 && temperature > 0,
               "sample_text: vocabulary " << vocabulary.size() << ", context " << context
                                          << ", temperature " << temperature);
  std::vector<std::int64_t> tokens;
  for (char c : prompt) {
    auto at = vocabulary.find(c);
    if (at != std::string::npos)
      tokens.push_back(static_cast<std::int64_t>(at));
  }
  if (tokens.empty())
    tokens.push_back(0);
  keyed_random random{seed, 0x5a3b1e};
  const auto classes = static_cast<std::int64_t>(vocabulary.size());
  std::string text;
  auto x = tensor::zeros({1, context});
  for (std::int64_t n = 0; n < length; ++n) {
    const auto window = std::min<std::int64_t>(context, static_cast<std::int64_t>(tokens.size()));
    const auto first = static_cast<std::int64_t>(tokens.size()) - window;
    for (std::int64_t t = 0; t < context; ++t)
      x.f32()[t] = t < window ? static_cast<float>(tokens[static_cast<std::size_t>(first + t)]) : 0.0f;
    const auto logits = model.forward(x);  // (1, context, classes)
    TROUPE_CHECK(logits.numel() == context * classes,
                 "sample_text: the model puts out " << shape_to_string(logits.shape())
                                                    << ", not (1, " << context << ", " << classes
                                                    << ")");
    const float* row = logits.f32() + (window - 1) * classes;
    const double top = *std::max_element(row, row + classes);
    std::vector<double> weights(static_cast<std::size_t>(classes));
    double total = 0;
    for (std::int64_t c = 0; c < classes; ++c)
      total += weights[static_cast<std::size_t>(c)] = std::exp((row[c] - top) / temperature);
    double draw = random.uniform() * total;
    std::int64_t next = classes - 1;
    for (std::int64_t c = 0; c < classes; ++c) {
      draw -= weights[static_cast<std::size_t>(c)];
      if (draw < 0) {
        next = c;
        break;
      }
    }
    tokens.push_back(next);
    text += vocabulary[static_cast<std::size_t>(next)];
  }
  return text;
}

}  // namespace troupe
