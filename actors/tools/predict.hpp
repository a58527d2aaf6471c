// predict.hpp: `troupe predict`: a trained model's outputs for inputs of a user's own, on
// the host, batch by batch.
//
// The checkpoint's parameters (verified, and checked to fit the config's model) run the
// model's forward on the host CPU (runtime/graph/host_model.hpp, evaluation mode) over the
// input's rows in batches: a .npy file of features (read as batches need it, never whole:
// a million-row input does not take a million rows of memory) or a CSV table (its feature
// columns: the config's `features` or every column but its targets, which it may lack),
// normalised as the config's [data] says, or, for an image folder's model, one image or a
// folder of them (decoded as the training images were, not augmented), or, for a language
// model of token files, a token file (read as tiled windows of its context). The outputs (logits, probabilities with softmax,
// or regression values) go to a .npy file (float32, (N, output...)) or a CSV table, written
// atomically, or as CSV to a stream; a CSV table of images' outputs starts with each image's
// file, and a classifier's argmax is followed by its class name where the checkpoint
// records them (an image folder's).
//
// Not here: evaluating against targets (`troupe eval` does, on the config's wiring), explicit
// configs (the model is read from [[model.layers]]).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/config/config.hpp"

namespace troupe {

struct prediction_request {
  std::string checkpoint;      // a checkpoint directory, or a directory of them (its newest)
  std::string input;           // a .npy file, or a CSV table (any other name); for an image
                               // source, an image or a folder of them
  std::string output;          // a .npy or .csv file; "" writes CSV to `stream`
  bool softmax = false;        // probabilities over the classes (a loss of class labels)
  std::int64_t batch = 1000;   // rows a forward
};

struct prediction_summary {
  std::string checkpoint;  // the checkpoint directory read
  std::int64_t step = 0;
  std::int64_t rows = 0;   // N
  std::int64_t width = 0;  // values an output row
};

/// Writes the model's outputs for every row of request.input (see the top). Throws
/// user_error (exit 2) for a bad request, config_error and data_error for inputs that do
/// not fit, user_error (exit 1) when the output cannot be written.
prediction_summary predict(const run_config& config, const prediction_request& request,
                           std::FILE* stream);

}  // namespace troupe
