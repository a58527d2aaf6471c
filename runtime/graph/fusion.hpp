// fusion.hpp: which layers of a topology run fused, one job a pass (Note [fused layers]).
//
// The topology keeps every layer actor and wire: fusion is how the session runs them, so
// `troupe plan` prints the groups beside the unchanged graph, --eject writes the same
// explicit config, and [run] fuse_layers = false runs each layer as its own actor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph/topology.hpp"

namespace troupe {

// Note [fused layers]
// Every pass of a layer actor is a hand-over: a message handled on the device's thread, a
// job submitted, its output allocated and sent on (4-7 us measured in the pipeline work).
// A narrow layer's job is as short as that: a 128-wide linear at 64 rows is about 6 MFLOP
// forward and backward, a ReLU a few microseconds, so a stack of them spent a third of its
// step handing over. Consecutive layers of one replica on one device are run by one actor
// as one job a pass when that changes nothing but the hand-overs:
// - they are joined by a single activations wire (no fan-out, no `add`, no custom actor
//   between them) within one pipeline stage;
// - the schedule does not split backwards (ZB-H1) or take turns (interleaved 1F1B);
// - with replicas, a group holds at most one long layer (its estimated job above
//   long_job_flops, about a quarter of a millisecond on one core): a long layer's weight
//   gradients still leave when its own backward ends, so data parallelism overlaps their
//   averaging with the backward of the layers below, as it does unfused; short layers join
//   it on either side. One replica has nothing to overlap (its optimizers update on the
//   same device, in the same stream), so its chain on a device runs as one job whatever
//   the layers' lengths.
// The math is the members' own kernels in the same order (runtime/model/fused_layer.hpp),
// so a fused run is bit for bit the unfused one (a test says so). Parameters still come
// from each layer's optimizer and gradients go to each layer's own sink.

/// A job above this many floating-point operations (forward and backward, estimated by the
/// layer's cost() for one micro-batch) is long: about 0.25 ms of one core's f32 GEMM, some
/// fifty hand-overs.
constexpr double long_job_flops = 3.2e7;

/// Layer actors run as one: their names in model order (two or more).
struct fusion_group {
  std::vector<std::string> members;
  /// The name of the actor that runs them: "<first>..<last>" ("r0.layer_0..layer_12").
  std::string name() const;
};

/// The groups of `t` (layers in no group run alone), from the layers' cost estimates for
/// micro-batches of `rows` samples (which matter with replicas). None when `enabled` is
/// false.
std::vector<fusion_group> plan_fusion(const topology& t, std::int64_t rows, bool enabled);

/// The groups as `troupe plan` prints them ("" when there are none).
std::string format_fusion(const std::vector<fusion_group>& groups);

}  // namespace troupe
