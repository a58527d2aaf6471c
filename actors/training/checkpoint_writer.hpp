// checkpoint_writer.hpp: writes checkpoint shards and completes checkpoints, off the devices.
//
// Each optimizer that writes (Note [who writes a checkpoint] in optimizer_actor.cpp) takes
// a copy of its parameters and optimizer state in its stream's order when it reaches a
// checkpoint's version, and sends it here at once: the copy job is all a checkpoint costs
// its device. This actor runs on a thread of its own (a stream no device has, Note [the
// writer's own thread] in checkpoint_writer.cpp): it waits for each copy, writes it as a
// safetensors shard (runtime/checkpoint/), and once every shard of a step is written it
// writes the manifest last, atomically, which makes the checkpoint complete
// (runtime/checkpoint/checkpoint_directory.hpp); then it prunes old ones and tells the
// trainer. Any failure (a full disk) goes to the trainer as a failure_msg: the run ends,
// and the checkpoint being written stays incomplete, never taken for a complete one.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/base/checkpoint_plan.hpp"
#include "runtime/checkpoint/manifest.hpp"
#include "troupe/device.hpp"
#include "troupe/messages.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// One optimizer's part of the checkpoint after `step` steps: named host copies, each
/// ready once its copy job has run (Note [checkpoint names] in runtime/checkpoint/restore.hpp).
struct checkpoint_shard_msg {
  std::int64_t step = 0;
  std::string file;  // a plain file name: "layer-2.safetensors"
  std::vector<std::string> names;
  std::vector<tensor> tensors;  // tensors[i] is names[i]; f32
  /// Set by the copy job when it has run: a failed stream skips its jobs (their events are
  /// still reached), and a shard of a copy that never ran must not be written.
  std::shared_ptr<std::atomic<bool>> copied;
};

// Across nodes `copied` travels as its value, read after the tensors were (serialising a
// tensor waits for its ready event, so the copy job has run or was skipped by then).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_shard_msg& x) {
  bool copied = false;
  return f(caf::meta::type_name("checkpoint_shard_msg"), x.step, x.file, x.names, x.tensors,
           caf::meta::save_callback([&]() -> caf::error {
             copied = x.copied && x.copied->load();
             return caf::none;
           }),
           copied, caf::meta::load_callback([&]() -> caf::error {
             x.copied = std::make_shared<std::atomic<bool>>(copied);
             return caf::none;
           }));
}

/// (checkpoint_atom, step, directory): a checkpoint is complete (writer -> trainer).
/// (checkpoint_atom, step, test accuracy): the evaluation after `step` steps (trainer ->
/// writer), for keeping the best.
using checkpoint_atom = caf::atom_constant<caf::atom("ckpt")>;

struct checkpoint_writer_settings {
  std::string root;                        // [run] checkpoint
  std::int64_t shards_per_checkpoint = 1;  // shard messages that make one checkpoint
  std::size_t keep = 3;                    // [run] checkpoint_keep
  bool keep_best = false;                  // [run] checkpoint_keep_best
  std::int64_t steps_per_epoch = 1;
  checkpoint_manifest base;  // config hash, seed, optimizer, layers
  caf::actor trainer;
};

/// Spawns the writer with its handlers on `home`'s thread, a stream of its own that outlives
/// `system` (Note [the writer's own thread]). Without a home (or in an actor system that
/// does not place actors, a test's), its handlers run on the system's threads.
caf::actor spawn_checkpoint_writer(caf::actor_system& system, checkpoint_writer_settings settings,
                                   stream* home = nullptr);

}  // namespace troupe
