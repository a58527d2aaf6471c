// topology.hpp: the actor graph of a run: which actors exist, on which devices, and the
// wires between them.
//
// Two ways in, one way out. The shorthand config ([model] + [parallel]) is expanded by
// expand_shorthand(); an explicit config ([[actor]] + [[wire]] tables, as written by
// `troupe plan --eject`) is read by topology_from_explicit(). Both give a `topology`,
// which validate_topology() checks before anything is spawned, and from which the session
// spawns the actors. format_table(), format_dot() and format_explicit() print it.
//
// Kinds of actors and what their settings hold:
//   data_loader  one per run; sends micro-batches to each replica's first layer and labels
//                to each replica's loss.
//   layer        one model layer of one replica: `layer` (model index), `replica`, `stage`,
//                and the layer's config (type + its own settings).
//   loss         one per replica, after its last layer.
//   averager     sums one layer's gradients over the replicas: `method` "central" (one
//                averager per layer), "ring" (one per replica, all-reduce among them over
//                ring wires) or "gloo" (one per replica, all-reduce through gloo: no wires
//                between them, `replica` is its gloo rank).
//   optimizer    owns one layer's parameters (one per layer with central averaging or no
//                replicas; one per replica with ring or gloo averaging, kept identical).
//   (custom)     a kind a plugin registered, known here by the wires it accepts and emits
//                (runtime/graph/actor_signature.hpp); explicit configs only. Its [[actor]] keys
//                beyond the common ones are its settings. A grads-in, grads-out kind can
//                sit between a layer and its optimizer (layer -> clipper -> optimizer).
//
// Kinds of wires (from -> to), with the messages they carry:
//   activations  loader/layer -> layer/loss: activation_msg forward, one wire per edge of
//                the model's graph (model_graph.hpp): a skip connection is one more wire,
//                an `add` layer has one in per input, a layer read by several has one
//                out per reader, in the order of the model. Gradients go back
//                along the same wire (gradient_msg), and that is also how the receiver
//                returns a credit; forward-only receivers return a release_msg instead.
//                `capacity` = credits: at most that many unreleased micro-batches on it.
//   labels       loader -> loss: labels_msg.
//   grads        layer -> averager/optimizer, averager -> optimizer: weight_grads_msg.
//   ring         averager -> next averager of the same layer: ring_msg.
//   params       optimizer -> layer: params_msg.
// A wire may also start or end at a custom actor whose signature emits / accepts its kind.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/graph/kinds.hpp"
#include "runtime/graph/model_graph.hpp"
#include "troupe/device.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

struct actor_plan {
  std::string name;              // unique, e.g. "r0.layer_2"
  actor_kind kind = actor_kind::layer;  // see above
  std::string custom_kind;              // kind == custom: the plugin's kind name, which has a
                                        //   signature (runtime/graph/actor_signature.hpp)
  device_id device;
  std::int32_t replica = -1;     // -1: serves every replica (loader, central averager)
  std::int32_t stage = -1;       // pipeline stage, -1 when not in a stage
  std::int32_t layer = -1;       // model layer index (layer, averager, optimizer)
  layer_config math;             // kind == layer: the layer's type and settings
  averaging_method method = averaging_method::central;  // kind == averager
  source_position method_where;  // kind == averager: where its method is written (or
                                 //   the [[actor]] / [parallel] table when defaulted)
  std::map<std::string, setting_value> settings;  // kind == custom: every other key
  source_position where;

  /// The kind as a config names it: the built-in kind's name, or custom_kind.
  std::string kind_name() const;
};

struct wire_plan {
  std::string from;
  std::string to;
  wire_kind kind = wire_kind::activations;
  std::int64_t capacity = 0;     // credits; 0 = unbounded
  source_position where;
};

struct topology {
  std::vector<device_id> devices;     // every device the run creates, on every node
  std::int64_t nodes = 1;             // processes ([cluster] nodes); a device's node is below it
  std::int64_t replicas = 1;          // R
  std::int64_t stages = 1;            // S = P * v pipeline stages of a replica
  std::int64_t virtual_stages = 1;    // v: stages per device (interleaved 1F1B); P = S / v
  std::int64_t microbatches = 1;      // M
  pipeline_schedule schedule = pipeline_schedule::gpipe;   // gpipe: the loss flushes
  averaging_method averaging = averaging_method::central;  // matters with R > 1
  averaging_rule rule = averaging_rule::synchronous;       // [parallel] averaging = "local_sgd"
  std::int64_t sync_every = 1;                             // local_sgd: steps between averages
  std::int64_t max_staleness = 0;                          // async: the server's bound
  std::vector<shape_t> shapes;        // shapes[i]: per-sample input of model layer i; back(): output
  layer_inputs inputs;                // inputs[i]: the model layers layer i reads (model_graph.hpp)
  std::vector<shape_t> outputs;       // outputs[i]: per-sample output of model layer i
  std::vector<actor_plan> actors;
  std::vector<wire_plan> wires;

  const actor_plan* find(const std::string& name) const;
  /// Whether a wire joins actors on two nodes (its messages cross the network).
  bool crosses_nodes(const wire_plan& wire) const;
  /// For each wire, whether it is an activations wire between two layers that are not
  /// neighbours in the model (a skip connection, model_graph.hpp).
  std::vector<bool> skip_wires() const;
  /// Whether its stages take turns on their devices (a stage_sequencer each: Note
  /// [interleaved stages], Note [zero-bubble turns]): interleaved stages, and ZB-H1 when
  /// no device holds two stages of one replica.
  bool takes_turns() const;
};

/// [parallel] devices as ids, each one this build can run: a config_error at the first it
/// cannot (only CPU streams exist). The one place for that check; both forms use it.
std::vector<device_id> runnable_devices(const run_config& config);

/// Which model layers each pipeline stage holds: stage s holds [first[s], last[s]].
struct stage_split {
  std::vector<std::int64_t> first;
  std::vector<std::int64_t> last;
};

/// Splits layers with the given per-sample costs into `stages` contiguous groups,
/// minimising the most expensive group (ties: earlier cuts).
stage_split balance_stages(const std::vector<double>& costs, std::int64_t stages);

/// Expands [model] and [parallel] into actors and wires. `shapes` from check_model.
/// A wire that crosses stages gets the credits of the stage after its sender's (a skip
/// wire from stage 0 to stage 2 those of the wire into stage 1: its micro-batches are
/// in flight as long as theirs), a wire within a stage none.
/// Throws config_error for impossible requests (more stages than layers, R * P devices
/// needed but fewer given without share_devices, a bad explicit stage split).
topology expand_shorthand(const run_config& config, const std::vector<shape_t>& shapes);

/// Reads the explicit form ([[actor]] / [[wire]] in config.actors / config.wires) into a
/// topology. Throws config_error at the offending table.
topology topology_from_explicit(const run_config& config, std::int64_t input_features);

/// Checks a topology before anything is spawned: names unique, every actor's kind has a
/// signature, every wire's ends exist and are of kinds the wire kind allows (between
/// built-in kinds by a fixed table; with a custom actor at one end by the signatures),
/// every layer has exactly one incoming and one outgoing activations wire, no cycle along
/// activations wires, every replica has each model layer once and ends in a loss, shapes
/// agree along every activations wire between built-in actors, every parameterised layer
/// reaches an optimizer and gets params from one (following grads and params wires
/// through custom actors), every device is listed in [parallel] devices. Errors name the
/// actor's or wire's position.
void validate_topology(const topology& t, const run_config& config, std::int64_t classes,
                       std::int64_t positions = 1);

/// What a loss takes per sample: (classes) logits, or (positions, classes) when the data
/// gives a label per position of a sequence (a language model).
shape_t loss_input_shape(std::int64_t classes, std::int64_t positions);

/// A table of actors (name, kind, device, replica, stage, layer) and one of wires.
std::string format_table(const topology& t);
/// Graphviz DOT: one cluster per device, one node per actor, one edge per wire.
std::string format_dot(const topology& t);
/// The explicit TOML config that runs identically: [run], [data], [optimizer] and
/// [parallel] (without data/pipeline) copied from `config`, then [[actor]] and [[wire]].
std::string format_explicit(const topology& t, const run_config& config);

}  // namespace troupe
