// host_model.hpp: a model's forward pass on the host CPU from given parameters, outside
// the actors: what a finished run of a language model uses to print a sample of its text.
//
// The layers run in model order on one thread, each reading its inputs (model_graph.hpp;
// an `add` sums them in order, as its actor does), in evaluation mode (dropout off).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/graph/model_graph.hpp"
#include "troupe/layer.hpp"

namespace troupe {

class host_model {
 public:
  /// `shapes`: per-sample input of each layer (check_model's, without the last entry is
  /// fine); `parameters[i]`: layer i's tensors' values in parameters() order (a run's
  /// session_result::parameters).
  host_model(const std::vector<layer_config>& layers, layer_inputs inputs,
             const std::vector<shape_t>& shapes,
             const std::vector<std::vector<std::vector<float>>>& parameters);

  /// (b, input...) -> (b, output...): the last layer's output.
  tensor forward(const tensor& x) const;

 private:
  std::vector<std::unique_ptr<layer>> layers_;
  layer_inputs inputs_;
  std::vector<std::vector<tensor>> params_;
};

/// `length` bytes a language model writes after `prompt`: each next token drawn from
/// softmax(logits / temperature) at the last position of the window of the latest
/// `context` tokens (a shorter window is padded after its end, which causal attention
/// never reads). `vocabulary[i]` is token i's byte; prompt bytes outside it are skipped.
/// The draws are keyed by `seed`.
std::string sample_text(const host_model& model, const std::string& vocabulary,
                        std::int64_t context, const std::string& prompt, std::int64_t length,
                        std::uint64_t seed, double temperature);

}  // namespace troupe
