// interleaved_schedule.hpp: interleaved 1F1B (Megatron-LM) as an order and a bound per device.
//
// Note [interleaved stages]
// With `[parallel] virtual_stages = v`, a pipeline of P devices runs S = P v stages, stage
// s on the pipeline's device d = s mod P, as chunk j = s / P of that device. A micro-batch
// visits every device v times, so the pipeline fills and drains v times faster: the bubble
// is (P - 1) / (v M + P - 1) of the step instead of (P - 1) / (M + P - 1) (Narayanan et
// al., "Efficient Large-Scale Language Model Training on GPU Clusters", 2021).
//
// What a device runs next is not a new scheduler but one sequence of turns per device
// (and replica), kept by a stage_sequencer that the device's layer actors share. It is
// Megatron-LM's (forward_backward_pipelining_with_interleaving):
// - forwards in groups of P micro-batches, each group through chunk 0, then chunk 1, ...,
//   then the next group (the k-th forward of a step is forward_turn(k));
// - backwards in the same order with the chunks reversed (backward_turn(k));
// - on device d, a warm-up of W = 2 (P - d - 1) + (v - 1) P forwards, then forward W + k
//   and backward k in turn, then the remaining backwards (turn(i) is the i-th of the 2 M v).
// So the device holds at most stash_bound(d) = W + 1 micro-batches. (Megatron runs all
// forwards first when M = P; the same warm-up works there too and holds less.)
// A stage's first layer asks for its forward's turn and its last layer for its
// backward's; the layers in between follow their messages. A backward's turn ends when
// it reaches the stage's first layer (release()), so a stage's stash is freed before the
// next forward starts. Jobs go to the device's in-order stream as they are admitted.
// A simulation of this sequence (equal stages, P <= 6, v <= 4, M up to 5 P) finishes
// every step with exactly the formula's bubble; tests/actors/session/tracing_test.cpp records it
// on a real run and schedule_memory_test.cpp counts what a device holds.
//
// A turn is a stage's whole pass: a forward's turn ends when it reaches the stage's last
// layer (forward_passed()), a backward's when it reaches the first (release()), so a
// stage of several layers runs a pass through before the next turn's starts (the next
// backward's last layer would otherwise go between the layers of a forward on its way to
// the next stage, which then waits a backward longer).
//
// Note [zero-bubble turns]
// ZB-H1 (Note [split backward] in actors/training/layer_actor.cpp) takes turns too, v = 1 with
// Megatron's 1F1B order: P - d - 1 forwards, then one forward and one backward in turn
// (one_f_one_b; M need not be a multiple of P). Priorities alone (backward first, weight
// gradients when the device would idle, 1F1B's credits) let a backward that arrived early
// go before the forward 1F1B runs first; that forward then reached the next stages late,
// and at P = 4, M = 8 on fixed-cost layers every stage idled 0.14 of the step for the
// formula's 0.111: the hand-made ZB-H1 order (the paper's figure) takes 27 units of a
// forward's time, this took 28. A simulation of the hand-made order with a hand-over of
// 1.5% of a job and 5% jitter per job stays within 0.01 of the formula. With turns,
// `troupe simulate` of that pipeline gives 0.113-0.123 for hand-overs of 0-100 us (0.131-0.183
// without), and the benchmark measures 0.121-0.123 (bench/pipeline_schedules.py). The
// weight gradients keep to the idle lane; the bound of P micro-batches a stage, those
// with a weight gradient still to run included, stays the layers' stash limit. A replica
// whose stages share a device takes no turns (topology::takes_turns): the turns of one
// device are one stage's here.
//
// Per-wire credits cannot keep this bound: the chunks of one device peak at different
// times of the step (at P = 2, v = 2, M >= 4 chunk 0 holds 4 micro-batches and chunk 1
// holds 2, but never both at once: the device's bound is 5). The sequencer keeps it.
//
// Note [credits and turns]
// A wire into a stage whose first layer waits for its turns needs M credits (or none).
// Its sender may send a step's micro-batches out of order: a layer handles a forward
// whose input is not written yet after the next one, whose input was. With fewer credits,
// the later micro-batches, parked at the receiver until the earlier one's turn, hold all
// of them, and the earlier one can never be sent: a deadlock (found under
// AddressSanitizer's timing, in a trial that gave a stage its turns behind 2 credits).
// With M, a step's micro-batches are never held back by each other. validate_topology refuses fewer
// in explicit configs.
//
// It does not run anything, know about actors, or handle evaluation passes (forward-only
// batches skip it: they hold nothing).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "troupe/device.hpp"

namespace troupe {

/// One stage's turn: which stage (0 <= stage < P v) and which micro-batch of the step.
struct stage_turn {
  std::int64_t stage = 0;
  std::int64_t microbatch = 0;
  bool operator==(const stage_turn& other) const {
    return stage == other.stage && microbatch == other.microbatch;
  }
};

/// The shape of one interleaved pipeline: P devices, v stages each, M micro-batches a step
/// (M a multiple of P, as in Megatron).
struct interleaved_pipeline {
  std::int64_t devices = 1;         // P
  std::int64_t virtual_stages = 1;  // v
  std::int64_t microbatches = 1;    // M
  /// v = 1 and 1F1B's warm-up, P - d - 1 forwards (ZB-H1's turns: Note [zero-bubble
  /// turns]); false: Megatron's interleaved warm-up.
  bool one_f_one_b = false;

  /// Forwards (backwards) a device runs in one step: M v.
  std::int64_t passes() const { return microbatches * virtual_stages; }
  /// The k-th forward of a step on device d (0 <= k < M v).
  stage_turn forward_turn(std::int64_t device, std::int64_t k) const;
  /// The k-th backward of a step on device d: forward_turn's order with the chunks reversed.
  stage_turn backward_turn(std::int64_t device, std::int64_t k) const;
  /// Forwards device d runs before its first backward: min(M v, 2 (P - d - 1) + (v - 1) P),
  /// or 1F1B's P - d - 1.
  std::int64_t warmup(std::int64_t device) const;
  /// The i-th of the 2 M v passes of a step on device d, and whether it is a forward.
  stage_turn turn(std::int64_t device, std::int64_t i, bool& forward) const;
  /// The most micro-batches device d holds: min(M v, warmup(d) + 1).
  std::int64_t stash_bound(std::int64_t device) const;
  /// (P - 1) / (v M + P - 1): the idle share of each device's step, for equal stages.
  double bubble() const;
};

/// The turns of one device of one replica's pipeline (Note [interleaved stages]). Thread
/// safe: the layer actors that share it may run on different threads. Wake-ups are called
/// outside its lock and may be spurious: a woken actor asks again.
class stage_sequencer {
 public:
  stage_sequencer(interleaved_pipeline pipeline, std::int64_t device);

  /// `wake` is called when it may be `stage`'s turn (to forward or to go backward).
  void on_turn(std::int64_t stage, std::function<void()> wake);

  /// Whether the forward of (step, stage, micro-batch) may start now (its turn); if so the
  /// turn is taken, and held() grows by one until release().
  bool try_forward(std::int64_t step, std::int64_t stage, std::int64_t microbatch);
  /// Whether the backward of (step, stage, micro-batch) may start now; if so the turn is
  /// taken, and the next turn waits for release().
  bool try_backward(std::int64_t step, std::int64_t stage, std::int64_t microbatch);
  /// A micro-batch left the device: its stage's first layer started its backward.
  void release();
  /// The forward whose turn was taken reached its stage's last layer: the next turn may
  /// come (a stage's layers keep a pass together, as a one-layer stage's job does).
  void forward_passed();

  /// Model layer `layer` belongs to `stage` (called for each before the run): a stage's
  /// first layer takes its forwards' turns, its last its backwards'.
  void add_layer(std::int64_t stage, std::int32_t layer);
  /// Whether `layer` is the first (or last) model layer of `stage`.
  bool first_of(std::int64_t stage, std::int32_t layer) const;
  bool last_of(std::int64_t stage, std::int32_t layer) const;

  std::int64_t held() const;
  std::int64_t bound() const { return bound_; }
  /// "interleaved turns on this device: next the forward of stage 2, micro-batch 1 of
  /// step 3; holds 4 of 5 micro-batches": for the watchdog.
  std::string describe() const;

 private:
  bool admit(std::int64_t step, const stage_turn& wanted, bool forward);
  void wake_turn();

  interleaved_pipeline pipeline_;
  std::int64_t device_;
  std::int64_t bound_;
  mutable std::mutex mutex_;
  std::int64_t step_ = -1;      // the step whose turns it counts; -1: none started yet
  std::int64_t index_ = 0;      // turns of that step taken
  bool backward_open_ = false;  // a backward took its turn, not yet released
  bool forward_open_ = false;   // a forward took its turn, not yet at its stage's last layer
  std::int64_t held_ = 0;
  std::map<std::int64_t, std::vector<std::function<void()>>> wake_;       // by stage
  std::map<std::int64_t, std::pair<std::int32_t, std::int32_t>> layers_;  // stage: first, last
};

/// The sequencers of a run, by (device, replica) (actors/training/layer_actor.hpp makes them).
using stage_sequencers =
    std::map<std::pair<device_id, std::int32_t>, std::shared_ptr<stage_sequencer>>;

}  // namespace troupe
