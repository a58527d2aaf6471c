// manifest.hpp: a checkpoint's manifest.json, the file that says what a checkpoint holds
// and, by existing, that it is complete (DESIGN.md "Checkpoints").
//
// It records where training stood (optimizer steps completed, epoch, the data loader's and
// the learning-rate schedule's positions, the seed and a hash of the config), the shard
// files with their sizes and CRC-32s, and the model's layers and parameters, so a resume
// can check that the model fits before loading a byte. Example:
//   {"format_version": 1, "step": 1200, "epoch": 2, "config_hash": "9f2c...", "seed": 42,
//    "data_epoch": 2, "data_step_in_epoch": 75, "lr_schedule_step": 1200, "optimizer": "adam",
//    "shards": [{"file": "optimizer-0.safetensors", "bytes": 813056, "crc32": 2210987234,
//                "tensors": ["0.weight", "0.bias", "0.weight.adam_m", ...]}],
//    "layers": [{"index": 0, "type": "linear",
//                "params": [{"name": "weight", "dtype": "F32", "shape": [256, 784]}, ...]}]}
//
// Reading checks the type and range of every field and refuses a newer format_version.
// Not here: the checkpoint directory layout (checkpoint_directory.hpp), what the shards
// hold (safetensors.hpp), comparing layers with a model (the resume code does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// The manifest format this troupe writes; it reads this one and older ones.
constexpr int checkpoint_format_version = 1;

/// A shard file of a checkpoint: a safetensors file beside the manifest.
struct checkpoint_shard {
  std::string file;  // a plain file name in the checkpoint's directory: no '/', not "..".
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;           // of the whole file (atomic_file.hpp)
  std::vector<std::string> tensors;  // the names of the tensors it holds
};

/// A parameter of a layer as the checkpoint holds it.
struct checkpoint_param {
  std::string name;  // "weight"
  safetensors_dtype dtype = safetensors_dtype::f32;
  shape_t shape;  // (256, 784)
};

/// A layer of the model the checkpoint was taken from.
struct checkpoint_layer {
  std::int64_t index = 0;  // its position in the model
  std::string type;        // the registered layer name, "linear"
  std::vector<checkpoint_param> params;
};

/// Everything manifest.json holds.
struct checkpoint_manifest {
  int format_version = checkpoint_format_version;
  std::int64_t step = 0;   // optimizer steps completed
  std::int64_t epoch = 0;  // the training epoch at that step
  std::string config_hash;
  std::uint64_t seed = 0;
  std::int64_t data_epoch = 0;          // the data loader's epoch
  std::int64_t data_step_in_epoch = 0;  // batches the data loader handed out in data_epoch
  std::int64_t lr_schedule_step = 0;
  std::string optimizer;  // "sgd", "adam", "adamw": which optimizer state the shards hold    // the step the learning-rate schedule is at
  std::vector<checkpoint_shard> shards;
  std::vector<checkpoint_layer> layers;
  /// [data] normalize = "standard": the training split's mean and standard deviation of
  /// each feature, which the model's inputs were normalised with (troupe predict reads them
  /// back); empty otherwise, and then not written.
  std::vector<double> feature_mean, feature_std;
  /// [data] validation: the share of the training split held out, and the seed its
  /// permutation was keyed by, so that a resume and `troupe eval` hold out the same samples;
  /// 0 (and not written) when none was.
  double validation = 0;
  std::uint64_t validation_seed = 0;
  /// [data] source = "images": the class folders' names, by class index (troupe eval and
  /// troupe predict print them); empty (and not written) for other sources.
  std::vector<std::string> class_names;
};

/// The name of the manifest in a checkpoint's directory.
constexpr const char* manifest_file_name = "manifest.json";

/// The largest manifest read_manifest reads: 64 MiB (a model of a million parameter
/// tensors needs less).
constexpr std::uint64_t manifest_max_bytes = std::uint64_t{64} << 20;

/// Whether `name` is a plain file name a shard may have: not empty, at most 255 bytes, no
/// '/' or NUL, not "." or "..", not the manifest's name.
bool is_plain_file_name(const std::string& name);

/// The manifest as JSON text (indented, keys in the order above).
std::string manifest_to_json(const checkpoint_manifest& manifest);

/// Parses manifest JSON text; `source` names it in errors. Throws data_error naming the
/// source and the field: not JSON, a missing or unknown field, a wrong type, a negative
/// step, an unsafe or repeated shard file name, a tensor in two shards, a newer
/// format_version (naming both versions), ...
checkpoint_manifest manifest_from_json(const std::string& text, const std::string& source);

/// Writes `manifest` as the file `path`, atomically (atomic_file.hpp). Throws user_error
/// (exit_code::run_failed) when it cannot be written.
void write_manifest(const std::string& path, const checkpoint_manifest& manifest);

/// Reads and checks the manifest file at `path`. Throws data_error naming it.
checkpoint_manifest read_manifest(const std::string& path);

}  // namespace troupe
