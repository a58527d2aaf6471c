// checkpoint_writer.cpp: shards to files, manifests last, pruning (see the header).
#include "actors/training/checkpoint_writer.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "actors/base/device_scheduler.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

namespace {

class checkpoint_writer : public caf::event_based_actor {
 public:
  checkpoint_writer(caf::actor_config& config, checkpoint_writer_settings settings)
      : caf::event_based_actor(config), settings_(std::move(settings)) {}

  const char* name() const override { return "checkpoint writer"; }

  caf::behavior make_behavior() override {
    return {
        [this](checkpoint_shard_msg& shard) { guarded([&] { write(shard); }); },
        [this](checkpoint_atom, std::int64_t step, double accuracy) {
          if (best_ && accuracy <= best_->second)
            return;
          best_ = std::make_pair(step, accuracy);
          if (settings_.keep_best && newest_written_ >= 0)  // the previous best may go now
            guarded([&] { prune(newest_written_); });
        },
        [this](finish_atom) {
          // Let go of the trainer, which (through its settings) holds us: neither
          // object would ever be freed.
          settings_.trainer = nullptr;
          quit();
        },
    };
  }

 private:
  template <class Work>
  void guarded(Work&& work) {
    try {
      work();
    } catch (const std::exception& e) {
      send(settings_.trainer, failure_msg{"checkpoint writer", e.what()});
    }
  }

  void write(const checkpoint_shard_msg& shard) {
    auto& pending = pending_[shard.step];
    if (pending.directory.empty())
      pending.directory = make_checkpoint_directory(settings_.root, shard.step);
    std::vector<safetensors_tensor_ref> refs;
    std::vector<tensor> host;  // a GPU's copies come to the host first
    host.reserve(shard.tensors.size());
    for (std::size_t i = 0; i < shard.tensors.size(); ++i) {
      // This thread is nobody's stream: waiting here stops no device.
      host.push_back(shard.tensors[i].on_host());
      refs.push_back(
          {shard.names.at(i), safetensors_dtype::f32, host.back().shape(), host.back().raw()});
    }
    if (!shard.copied || !shard.copied->load())
      throw std::runtime_error("the copy for shard '" + shard.file + "' of step " +
                               std::to_string(shard.step) +
                               " never ran (its device failed); that checkpoint stays incomplete");
    const auto path = (std::filesystem::path(pending.directory) / shard.file).string();
    const auto written = write_safetensors(path, refs);
    pending.shards.push_back(
        checkpoint_shard{shard.file, written.bytes, written.crc32, shard.names});
    if (static_cast<std::int64_t>(pending.shards.size()) == settings_.shards_per_checkpoint)
      complete(shard.step);
  }

  void complete(std::int64_t step) {
    auto pending = std::move(pending_.at(step));
    pending_.erase(step);
    auto manifest = settings_.base;
    manifest.step = step;
    manifest.epoch = step / settings_.steps_per_epoch;
    manifest.data_epoch = manifest.epoch;
    manifest.data_step_in_epoch = step % settings_.steps_per_epoch;
    manifest.lr_schedule_step = step;
    std::sort(pending.shards.begin(), pending.shards.end(),
              [](const checkpoint_shard& a, const checkpoint_shard& b) { return a.file < b.file; });
    manifest.shards = std::move(pending.shards);
    commit_checkpoint(pending.directory, manifest);
    newest_written_ = std::max(newest_written_, step);
    prune(newest_written_);
    send(settings_.trainer, checkpoint_atom::value, step, pending.directory);
  }

  // What is newer than `step` is not this run's: the session set aside what was there at
  // the start (set_aside_newer_checkpoints), and anything newer since is another writer's.
  void prune(std::int64_t step) {
    std::set<std::int64_t> keep_also;
    if (settings_.keep_best && best_)
      keep_also.insert(best_->first);
    prune_checkpoints(settings_.root, settings_.keep, keep_also, step);
  }

  struct pending_checkpoint {
    std::string directory;
    std::vector<checkpoint_shard> shards;
  };

  checkpoint_writer_settings settings_;
  std::map<std::int64_t, pending_checkpoint> pending_;
  std::optional<std::pair<std::int64_t, double>> best_;  // step, test accuracy
  std::int64_t newest_written_ = -1;                     // the newest step this run wrote
};

}  // namespace

// Note [the writer's own thread]
// The writer blocks: on each copy it waits for, and on the files it writes and syncs. So
// it must not run on a device's thread or the host thread (the trainer, the heartbeats of
// a run over several nodes). It was a CAF detached actor, which has a thread of its own,
// but such a thread ends only once the actor object is destroyed, and the actor system's
// destructor waits for that: one strong reference to the writer left anywhere (a closure,
// a message, a CAF table) and the process never exits. A `troupe verify` over two nodes
// hung that way in CI's AddressSanitizer pass (about 1 in 500 runs here, node0 waiting in
// actor_system::await_detached_threads with every actor ended). Now the writer is an
// ordinary actor placed on a stream of its own (device_scheduler::place), which the
// session makes before the actor system and destroys after it: the system waits for its
// actors to end, not for its objects to be destroyed, and the scheduler's stop runs what
// was posted to that stream (a write under way finishes) before the system goes.
caf::actor spawn_checkpoint_writer(caf::actor_system& system, checkpoint_writer_settings settings,
                                   stream* home) {
  // Lazily: it is first scheduled by its first message, after it has been placed.
  auto writer = system.spawn<checkpoint_writer, caf::lazy_init>(std::move(settings));
  if (home != nullptr)
    device_scheduler::place(system, writer, *home);
  return writer;
}

}  // namespace troupe
