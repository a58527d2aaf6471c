// interchange.hpp: weights in and out of troupe as PyTorch names them (DESIGN.md
// "Checkpoints", issue 10 "PyTorch interchange").
//
// The file format is a plain safetensors file of F32 tensors named as the equivalent
// torch.nn.Sequential's state_dict (Note [checkpoint names] in restore.hpp), with the
// metadata {"format": "pt"} that safetensors.torch.save_file writes. troupe's linear layer
// stores its weight (out, in) like torch.nn.Linear, so nothing is transposed either way.
// PyTorch loads an export of the shipped MLP with
//   model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
//                         nn.Linear(256, 10))
//   model.load_state_dict(safetensors.torch.load_file("model.safetensors"), strict=True)
// and writes a start for `[model] init_from` with
//   safetensors.torch.save_file(model.state_dict(), "weights.safetensors")
// (or by hand: tests/reference/make_interchange_reference.py writes the format with the
// standard library).
//
// Not here: optimizer state (an export holds parameters only, and a run from weights starts
// its optimizer from zero, as a fresh torch.optim one would), checkpoints written by runs
// (the checkpoint writer), dtypes other than F32, models that are not a Sequential chain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/atomic_file.hpp"
#include "runtime/checkpoint/restore.hpp"

namespace troupe {

/// What export_weights wrote.
struct exported_weights {
  std::string checkpoint;            // the checkpoint directory it read
  std::int64_t step = 0;             // the checkpoint's step
  std::vector<std::string> tensors;  // the names written, in file order ("0.weight", ...)
  std::int64_t values = 0;           // parameters in all
  written_file file;                 // the output's size and CRC-32
};

/// The parameters of a checkpoint, whole, named and shaped as its manifest says, in layer
/// order (what export_weights writes; the Python module's troupe.load()).
struct checkpoint_parameters {
  std::string checkpoint;  // the checkpoint directory read
  std::int64_t step = 0;
  struct parameter {
    std::string name;             // "0.weight"
    std::vector<std::int64_t> shape;
    std::vector<float> values;    // flattened, C order
  };
  std::vector<parameter> parameters;
};

/// Reads them from `checkpoint` (a checkpoint directory, or a root: its newest complete
/// one), verified first. Throws data_error as export_weights does.
checkpoint_parameters read_checkpoint_parameters(const std::string& checkpoint);

/// Writes the parameters of the checkpoint `checkpoint` (a checkpoint directory, or a root
/// meaning its newest complete checkpoint, as `--resume` takes) to `output` as one
/// safetensors file, atomically: every parameter the manifest's layers list, whole (pieces
/// of a sharded optimizer assembled), shaped as the manifest says, in layer order; no
/// optimizer state. The checkpoint is verified first (sizes, CRC-32s, tensors listed).
/// Throws data_error (exit 2): a missing path, no complete checkpoint, a damaged one, a
/// parameter missing from the shards, an output that is a directory, lies in the
/// checkpoint, or cannot be written. `type` f32 writes the masters as they are; bf16 each
/// rounded to bfloat16 (half the bytes; what a bf16 run computed with).
exported_weights export_weights(const std::string& checkpoint, const std::string& output,
                                dtype type = dtype::f32);

/// The start of a run from the weights in the safetensors file `path` ([model] init_from):
/// step 0, every parameter of `model` and nothing else. The file must hold exactly the
/// model's parameters ("<layer index>.<param>"), each F32 or BF16 (widened exactly) and of
/// the model's shape.
/// Throws data_error (exit 2) naming the file and, for a mismatch, the tensors that are
/// missing (with the shape expected), extra, of another dtype or of another shape.
run_start weights_from(const std::string& path, const std::vector<model_layer>& model);

}  // namespace troupe
