// checkpoint_directory.hpp: the layout of a checkpoint root directory on disk, and finding,
// verifying and pruning the checkpoints in it (DESIGN.md "Checkpoints").
//
//   DIR/step-000001200/manifest.json            written last and atomically: its presence
//   DIR/step-000001200/optimizer-0.safetensors  makes the checkpoint complete
//   DIR/step-000001300/optimizer-0.safetensors  no manifest: being written, or a crash
//
// A checkpoint is complete when its manifest.json exists, parses, and names the step of
// its directory; anything else under a step-<n> name is incomplete and is skipped by the
// readers here (with the reason kept, for a log). A writer makes the directory with
// make_checkpoint_directory, writes its shards (write_safetensors), then commit_checkpoint.
//
// Not here: who writes which shard (the optimizer actors), when to checkpoint (the
// trainer), loading tensors into a model, locking between two runs sharing a DIR.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/checkpoint/manifest.hpp"

namespace troupe {

/// "step-000001200": the directory name of the checkpoint taken after `step` optimizer
/// steps (zero padded to 9 digits; more digits past 999999999).
std::string checkpoint_directory_name(std::int64_t step);

/// The step `name` stands for, or nothing if checkpoint_directory_name never gives `name`.
std::optional<std::int64_t> step_of_checkpoint_directory(const std::string& name);

/// A complete checkpoint.
struct checkpoint_info {
  std::int64_t step = 0;
  std::string path;  // the checkpoint's directory
  checkpoint_manifest manifest;
};

/// A step directory that is not a complete checkpoint, and why.
struct incomplete_checkpoint {
  std::int64_t step = 0;
  std::string path;
  std::string reason;  // "no manifest.json (...)", or the manifest's data_error
};

/// What a checkpoint root holds, each list ascending by step.
struct checkpoint_scan {
  std::vector<checkpoint_info> complete;
  std::vector<incomplete_checkpoint> incomplete;
};

/// The step directories under `root` (other names are ignored). A root that does not exist
/// holds nothing; one that is not a directory or cannot be listed is a data_error.
checkpoint_scan scan_checkpoints(const std::string& root);

/// The complete checkpoints under `root`, ascending by step.
std::vector<checkpoint_info> list_checkpoints(const std::string& root);

/// The newest complete checkpoint under `root`, or nothing. Newer incomplete ones (a crash
/// while writing, a damaged manifest) are skipped.
std::optional<checkpoint_info> latest_checkpoint(const std::string& root);

/// Checks the checkpoint in `directory` against its manifest: every shard exists, has the
/// size and CRC-32 the manifest states, is a valid safetensors file and holds exactly the
/// tensors listed. Reads every byte. Throws data_error naming the shard and what differs.
checkpoint_manifest verify_checkpoint(const std::string& directory);

/// Removes the complete checkpoints under `root` beyond the newest `keep_last` (at least 1),
/// except those whose steps are in `keep_also` (say, the best one), and the incomplete
/// leftovers older than the newest complete checkpoint (newer ones may be being written).
/// Only checkpoints up to step `up_to` (the one the run has just written) count: newer ones
/// are another run's, not this one's to prune. A step directory that is a symbolic link is
/// never removed, nor anything through it. A checkpoint loses its manifest first, so an
/// interrupted prune leaves an incomplete one. The paths removed; throws user_error
/// (exit_code::run_failed) when removing fails.
std::vector<std::string> prune_checkpoints(
    const std::string& root, std::size_t keep_last, const std::set<std::int64_t>& keep_also = {},
    std::int64_t up_to = std::numeric_limits<std::int64_t>::max());

/// Sets aside the checkpoints under `root` newer than `step` (complete or not): a run that
/// resumed from `step` will write those steps again, and until it has, a restart must not
/// take them for its own. Each is renamed to step-<n>.superseded (then .superseded-2, ...),
/// which no resume or prune looks at. The new names.
std::vector<std::string> set_aside_newer_checkpoints(const std::string& root, std::int64_t step);

/// What `--resume PATH` names: a checkpoint directory (one holding manifest.json, whatever
/// its name), or a checkpoint root, meaning its latest complete checkpoint. Throws
/// data_error when PATH does not exist, or holds no complete checkpoint (listing the
/// incomplete ones and why). Does not verify the shards: verify_checkpoint does.
checkpoint_info resolve_resume_path(const std::string& path);

/// Makes `root`/step-<step>/ (and `root`) and returns its path. If it exists already (a run
/// resumed from an earlier step is passing it again) its manifest is removed first, so it
/// counts as incomplete until commit_checkpoint. Throws user_error (exit_code::run_failed).
std::string make_checkpoint_directory(const std::string& root, std::int64_t step);

/// Completes the checkpoint in `directory`: writes `manifest` as its manifest.json
/// atomically, after every shard, then syncs the parent so the directory itself is durable.
void commit_checkpoint(const std::string& directory, const checkpoint_manifest& manifest);

}  // namespace troupe
