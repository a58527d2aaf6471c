// restore.hpp: what a checkpoint holds, by name, and where a run starts from it.
//
// Note [checkpoint names]
// Every tensor of a checkpoint is named as the equivalent torch.nn.Sequential names it:
// model layer i's parameter p is "i.p" ("0.weight", "2.bias": troupe's model layers,
// activations included, are the Sequential's modules in order), and its optimizer state is
// "i.p.<state>" with torch.optim's state names: "momentum_buffer" (SGD with momentum),
// "exp_avg" and "exp_avg_sq" (Adam, AdamW). The optimizer's step count is the manifest's
// step. A sharded optimizer (ZeRO-1) owns spans of a layer's flattened parameters, not
// whole tensors; it writes each owned span, cut at parameter boundaries, as a piece named
// "<name>@<begin>": a 1-D slice of the flattened tensor from element `begin`. A name is
// either whole in one shard or pieces that cover it exactly. Nothing names a device or a
// stage, so a checkpoint resumes on any wiring. One exception: under local SGD (Note
// [local SGD] in actors/averaging/allreduce_averager_actor.cpp) each replica's optimizer
// keeps parameters and state of its own, so replica r > 0 writes its copy as
// "replica<r>/<name>" beside replica 0's plain names; a run resumed on the same wiring
// takes each replica's own copy (bit-exact), any other wiring the plain names. Shapes are torch's
// too: a linear layer's weight is (out, in) like torch.nn.Linear's, so neither an export for
// PyTorch nor [model] init_from transposes anything (interchange.hpp).
//
// Not here: writing shards (the optimizer actors and the checkpoint writer), checking a
// checkpoint's files against its manifest (verify_checkpoint), the config.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint/manifest.hpp"
#include "runtime/config/choices.hpp"
#include "troupe/layer.hpp"

namespace troupe {

/// "2.weight": layer `layer`'s parameter `param` (Note [checkpoint names]).
std::string parameter_name(std::int64_t layer, const std::string& param);

/// The optimizer state names of `type` ({"momentum_buffer"} for SGD with momentum, {} for
/// plain SGD, {"exp_avg", "exp_avg_sq"} for Adam and AdamW), in troupe's buffer order.
std::vector<std::string> optimizer_state_names(optimizer_type type, double momentum);

/// DiLoCo's outer optimizer's state (Note [DiLoCo] in actors/training/optimizer_actor.cpp),
/// named like the inner optimizer's: "i.p.outer_params" (the parameters of the last outer
/// step), and "i.p.outer_momentum" where its momentum is not 0.
inline constexpr const char* outer_params_state = "outer_params";
std::vector<std::string> outer_state_names(double outer_momentum);

/// "2.weight.exp_avg@1024": a piece of a sharded tensor.
std::string piece_name(const std::string& name, std::int64_t begin);

/// "replica1/2.weight" (or "replica1/weight" within a layer): replica r's own copy under
/// local SGD; replica 0 (and any r <= 0) keeps the plain name.
std::string replica_tensor_name(std::int64_t replica, const std::string& name);

/// Every tensor of a verified checkpoint, whole (pieces assembled), flattened, by name.
/// Throws data_error naming the shard or the tensor when a tensor is not f32, pieces
/// overlap or leave a gap, or a name is both whole and in pieces.
std::map<std::string, std::vector<float>> read_checkpoint_tensors(
    const std::string& directory, const checkpoint_manifest& manifest);

/// A parameterised layer of the model a run trains: what a checkpoint must hold for it.
struct model_layer {
  std::int64_t index = 0;
  std::string type;  // "linear"
  std::vector<param_spec> params;
};

/// Where a run starts. A fresh run starts at step 0 with nothing here; a resumed one at
/// the checkpoint's step with every parameter and optimizer state; a run from weights
/// (init_from) at step 0 with parameters only.
struct run_start {
  std::int64_t step = 0;
  /// Per model layer index: its tensors by their name within the layer ("weight",
  /// "weight.exp_avg"), flattened.
  std::map<std::int64_t, std::map<std::string, std::vector<float>>> layers;
};

/// The start of a run resumed from the checkpoint in `directory` (its manifest already
/// read): checks that it fits `model` (the same parameterised layers, types, parameter
/// names and shapes) and holds the state `state_names` of every parameter, then reads it,
/// and the state `optional_states` where it holds it (DiLoCo's outer state: a run resumed
/// from a checkpoint without it starts its outer optimizer there). Throws data_error
/// (exit 2) saying what differs.
run_start resume_from(const std::string& directory, const checkpoint_manifest& manifest,
                      const std::vector<model_layer>& model,
                      const std::vector<std::string>& state_names,
                      const std::vector<std::string>& optional_states = {});

/// The manifest's description of `model` (its layers' types and parameter shapes).
std::vector<checkpoint_layer> describe_model(const std::vector<model_layer>& model);

}  // namespace troupe
