// safetensors_arrays.hpp: a safetensors file's named tensors as a data set's arrays
// ([data] source = "safetensors": features = "x", targets = "y").
//
// The header is read and checked as a checkpoint's is (safetensors.hpp: hostile input, every
// malformation a data_error naming the file); a tensor becomes an npy_array at its offset in
// the file, whose rows are then mapped or read as a .npy file's are (runtime/data/npy.hpp),
// never read whole. Dtypes: F32, F64, I32, I64 (what the safetensors reader reads).
#pragma once

#include <string>

#include "runtime/data/npy.hpp"

namespace troupe {

/// The tensor `name` of the safetensors file at `path`. Throws data_error: a malformed file,
/// no such tensor (with the names it has).
npy_array safetensors_array(const std::string& path, const std::string& name);

}  // namespace troupe
