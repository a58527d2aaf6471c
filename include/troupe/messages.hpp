// messages.hpp: the messages actors exchange, each tagged with step and micro-batch.
//
// Forward:  data_loader --activation_msg--> layer_0 --> ... --> loss <--labels_msg-- data_loader
// Backward: loss --gradient_msg--> layer_n-1 --> ... --> layer_0
// Weights:  layer --weight_grads_msg--> [averager(s) --ring_msg--> ...] --> optimizer
//           optimizer --params_msg--> layer
// Credits:  a gradient_msg or release_msg returns the credit of its activations wire
// Reports:  loss --loss_report_msg--> trainer;  any actor --failure_msg--> trainer
//
// Tensors inside are shared, not copied (tensor.hpp). Every type is inspectable so the
// same messages can cross nodes; add_message_types() registers them with CAF.
#pragma once

#include <caf/all.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/tensor.hpp"
#include "troupe/detail/tensor_inspect.hpp"  // tensors in messages cross nodes

namespace troupe {

enum class phase : std::uint8_t { train, eval };

/// Which micro-batch of which step a message belongs to.
struct micro_tag {
  std::int64_t step = 0;        // optimizer step (train), or evaluation batch index (eval)
  std::int32_t microbatch = 0;  // 0 .. M-1 within the step
  std::int32_t replica = 0;     // 0 .. R-1
  phase stage = phase::train;
  std::int64_t version = 0;  // the parameter version a forward must use
  std::int64_t epoch = 0;
  /// Training: the index in the step's global batch of the micro-batch's first sample, as
  /// the loader split it ([parallel] balance may split unevenly); -1: not given, so
  /// (replica M + microbatch) x its rows, the even split's.
  std::int64_t first_sample = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, micro_tag& x) {
  return f(caf::meta::type_name("micro_tag"), x.step, x.microbatch, x.replica, x.stage, x.version,
           x.epoch, x.first_sample);
}

/// Who sent a message and which flow arrow of the trace it is (zeros when not tracing).
struct trace_stamp {
  std::uint64_t flow = 0;
  std::uint32_t from = 0;  // the sender's trace track
};

/// From another node, the sender's track means nothing here (it is an id in the sender's
/// recorder): it arrives as 0, "unknown". The flow id stays: it is unique per node
/// (recorder_settings::flow_base), and a merged trace joins the two ends by it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trace_stamp& x) {
  return f(caf::meta::type_name("trace_stamp"), x.flow, x.from,
           caf::meta::load_callback([&]() -> caf::error {
             x.from = 0;
             return caf::none;
           }));
}

/// Activations going forward. x: (b, D) for a micro-batch of b samples.
struct activation_msg {
  micro_tag tag;
  tensor x;
  trace_stamp trace;
};

/// Gradients going backward. dx: same shape as the activation it belongs to.
struct gradient_msg {
  micro_tag tag;
  tensor dx;
  trace_stamp trace;
};

/// The targets of a micro-batch, for the loss. The loss scales each micro-batch's gradient
/// by 1 / global_terms, so that sums over micro-batches and replicas are exactly the
/// full-batch mean gradient (DESIGN.md).
struct labels_msg {
  micro_tag tag;
  tensor labels;  // (b) or (b, T) int32 class ids, or (b, K) float targets (troupe/loss.hpp)
  std::int64_t global_batch = 0;
  /// The terms of the loss over the whole global batch (rows, positions or elements, less
  /// ignored labels): the loss scales each gradient by 1 / global_terms.
  std::int64_t global_terms = 0;
  trace_stamp trace;
};

/// A layer's weight gradients for one step (summed over its micro-batches). The sender
/// hands them over: it keeps no reference and never reads or writes them again, so the
/// receiver may sum into them in place. A layer sends them as views of one buffer, in
/// parameter order, so an averager can all-reduce them without flattening.
struct weight_grads_msg {
  std::int64_t step = 0;
  std::int32_t layer = 0;
  std::int32_t replica = 0;
  std::vector<tensor> grads;
  trace_stamp trace;
};

/// A new version of a layer's parameters: version k is what step k's forward uses.
struct params_msg {
  std::int64_t version = 0;
  std::int32_t layer = 0;
  std::vector<tensor> params;
  trace_stamp trace;
};

/// Returns one credit on an activations wire without a gradient: the receiver has
/// released the micro-batch `tag` (a forward-only micro-batch, or a first layer that
/// sends no dx).
struct release_msg {
  micro_tag tag;
  trace_stamp trace;
};

/// One end of a wire, as an actor sees it: the kind of wire, the actor at the other end,
/// and the wire's capacity in credits (0 = unbounded).
struct wire_end {
  std::string kind;  // "activations" | "labels" | "grads" | "ring" | "params"
  std::string peer_name;
  std::string peer_kind;  // "data_loader" | "layer" | "loss" | "averager" | "optimizer" | ...
  caf::actor peer;
  std::int32_t peer_replica = -1;
  std::uint32_t peer_track = 0;  // its trace track (0 when not tracing)
  std::string peer_device;       // "cpu:1"
  std::int64_t capacity = 0;
  /// A data loader's activations wire to a first layer on another node: the actor on that
  /// node that assembles each batch from its rows (actors/training/batch_assembler_actor.hpp), so
  /// that only row numbers cross the network. Empty otherwise.
  caf::actor relay;
};

/// Sent once to every actor before the run starts: its wires in both directions and the
/// trainer (which receives failures). Actors take their neighbours from here, so any
/// wiring of the same actors works without code changes.
struct wiring_msg {
  std::vector<wire_end> outgoing;
  std::vector<wire_end> incoming;
  caf::actor trainer;       // held by actors as a trainer_handle (Note [typed handles])
  std::uint32_t track = 0;  // this actor's trace track (0 when not tracing)

  /// The outgoing / incoming ends of one kind.
  std::vector<wire_end> out(const std::string& kind) const;
  std::vector<wire_end> in(const std::string& kind) const;
};

/// Loss and metrics of a replica's training step (the sums over its M micro-batches, sent
/// once the last loss job of the step has run: Note [one report a step] in loss_actor.cpp)
/// or of one evaluation batch. Means are sums over terms (Note [loss sums] in
/// troupe/ops.hpp); what each metric is, the loss's spec says (troupe/loss.hpp).
struct loss_report_msg {
  micro_tag tag;                          // of the micro-batch whose loss job sent it
  double loss_sum = 0;                    // sum over the terms of the per-term loss
  double terms = 0;                       // rows, positions or elements counted
  std::array<double, 2> metric_sums{};    // one a metric of the loss, in its spec's order
  std::int64_t samples = 0;               // rows: samples, or every position of them
  std::int32_t microbatches = 1;          // micro-batches these sums cover
  trace_stamp trace;
};

/// An actor failed: who, doing what, and why. The trainer ends the run with it.
struct failure_msg {
  std::string actor;
  std::string what;
  bool bad_input = false;  // the input's fault (a data file that does not read): exit 2
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, activation_msg& x) {
  return f(caf::meta::type_name("activation_msg"), x.tag, x.x, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_msg& x) {
  return f(caf::meta::type_name("gradient_msg"), x.tag, x.dx, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, labels_msg& x) {
  return f(caf::meta::type_name("labels_msg"), x.tag, x.labels, x.global_batch, x.global_terms,
           x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, weight_grads_msg& x) {
  detail::staged_message_scope one_message;  // its tensors' staged bytes count together
  return f(caf::meta::type_name("weight_grads_msg"), x.step, x.layer, x.replica, x.grads, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, params_msg& x) {
  detail::staged_message_scope one_message;
  return f(caf::meta::type_name("params_msg"), x.version, x.layer, x.params, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_msg& x) {
  return f(caf::meta::type_name("release_msg"), x.tag, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_end& x) {
  return f(caf::meta::type_name("wire_end"), x.kind, x.peer_name, x.peer_kind, x.peer,
           x.peer_replica, x.peer_track, x.peer_device, x.capacity, x.relay);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wiring_msg& x) {
  return f(caf::meta::type_name("wiring_msg"), x.outgoing, x.incoming, x.trainer, x.track);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loss_report_msg& x) {
  return f(caf::meta::type_name("loss_report_msg"), x.tag, x.loss_sum, x.terms, x.metric_sums,
           x.samples, x.microbatches, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure_msg& x) {
  return f(caf::meta::type_name("failure_msg"), x.actor, x.what, x.bad_input);
}

// Note [typed handles]
// Where a peer is always of one kind, its handle says what it accepts, so that a wrong
// send does not compile (CAF's typed_actor). The trainer is such a peer: every actor
// sends it failures, the loss sends it loss reports, and nothing else goes to it from an
// actor. So actors hold it as a trainer_handle (device_actor converts the wiring's handle
// once; the trainer itself also handles control messages, which a typed handle of just
// these two does not need to name). Wires are different: a wire connects any two kinds
// that its kind allows, built-in or from a plugin (a grad_clipper between a layer and its
// optimizer, a scaler before an averager), and the receiving kind is chosen by the
// config, not by the code. A typed handle per wire end would force every plugin kind to
// declare the built-in kinds' full interfaces and the session to know each pairing; so
// wire_end::peer stays a dynamically typed caf::actor, checked by validate_topology()
// against the actor signatures (runtime/graph/actor_signature.hpp) before the run. The
// hot path is the same either way: a typed send is a plain send after the compile-time
// check. wiring_msg::trainer stays a caf::actor too, so that whoever builds a wiring
// (the session, tests) needs no cast.

/// The trainer, as actors see it: it takes failures and loss reports.
using trainer_handle =
    caf::typed_actor<caf::reacts_to<failure_msg>, caf::reacts_to<loss_report_msg>>;

// Control atoms (at most 10 characters each).
using start_atom = caf::atom_constant<caf::atom("start")>;
using credit_atom = caf::atom_constant<caf::atom("credit")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using written_atom = caf::atom_constant<caf::atom("written")>;  // an actor's own job ran
using status_atom = caf::atom_constant<caf::atom("status")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// Registers every message type above with CAF (needed to cross nodes).
void add_message_types(caf::actor_system_config& config);

}  // namespace troupe
