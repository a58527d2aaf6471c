// prepare.hpp: a run checked before anything is spawned: data, the actor graph (expanded
// from the shorthand or read from an explicit config, then validated), how the run is cut
// into steps, the learning-rate schedule and where it starts. `troupe plan`, `verify`,
// `simulate` and the session's restore phase all stop or start here.
//
// Errors in the input throw config_error / data_error; nothing here makes a device or an
// actor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/base/run_plan.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/images.hpp"
#include "runtime/graph/fusion.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/lr_schedule.hpp"

namespace troupe {

/// The shorthand model's per-sample shapes for inputs of `input_features` values: shapes[i]
/// is the input of layer i, shapes.back() the output. Throws config_error at the layer that
/// does not fit.
std::vector<shape_t> layer_shapes(const run_config& config, std::int64_t input_features);

/// layer_shapes(), checked against the data: layers that read token ids know every id, and
/// the output is what the loss compares with `classes` (or K float targets) at `positions`.
std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes, std::int64_t positions = 1);

/// Everything a run needs that can be checked before spawning: data, the actor graph
/// (expanded from the shorthand or read from an explicit config, then validated), how the
/// run is cut into steps, and the learning-rate schedule. `troupe plan` stops here.
struct session_prepared {
  std::shared_ptr<const dataset_split> data;
  topology graph;
  run_plan plan;
  lr_schedule schedule;
  std::vector<model_layer> model;  // the parameterised layers, for checkpoints
  run_start start;                 // step 0 from the seed, or a checkpoint's
  std::vector<fusion_group> fusion;  // layers run as one actor (runtime/graph/fusion.hpp)
};

/// What a session does: train (from the seed, init_from or `resume`), or evaluate the
/// parameters of the checkpoint `resume` names once (`troupe eval`), training nothing.
enum class session_purpose { train, evaluate };

/// `resume`: a checkpoint (or a directory of them, meaning its newest complete one) to
/// continue from; it is verified and must fit the model (data_error, exit 2, otherwise).
session_prepared prepare_session(const run_config& config, const std::string& resume = "",
                                 session_purpose purpose = session_purpose::train);

/// The same with the data given rather than loaded: of it only the counts, features and
/// classes are read (the config fuzzer, tests/fuzz/fuzz_config.cpp, passes no samples).
session_prepared prepare_session(const run_config& config,
                                 std::shared_ptr<const dataset_split> data,
                                 const std::string& resume = "",
                                 session_purpose purpose = session_purpose::train);

/// Which split a run evaluates (its `test` after load_session_data): `automatic` is the
/// held-out validation split where [data] validation makes one, else the test split.
enum class evaluated_split { automatic, test, validation, train };
const char* to_string(evaluated_split split);

/// The config's data set, loaded as its source and its loss say (the config's plugins
/// loaded first: a plugin's loss decides its targets), with the split to evaluate in `test`
/// (a data_error when the config has no such split).
std::shared_ptr<const dataset_split> load_session_data(
    const run_config& config, evaluated_split evaluated = evaluated_split::automatic);

/// A fingerprint of what decides a run's numbers apart from its wiring (the model, the
/// optimizer, the batch, the seed): FNV-1a over their text. A checkpoint records it, so
/// that a resume with other settings can say so; the wiring is left out on purpose.
std::string config_fingerprint(const run_config& config);

/// [data] source = "images": how the config's images become samples.
image_settings image_settings_of(const run_config& config);

/// An image folder's class names with their indices, "0 = 'cat', 1 = 'dog'" (the first 8).
std::string describe_classes(const std::vector<std::string>& names);

}  // namespace troupe
