// npy.hpp: NumPy's .npy files as a data source ([data] source = "npy").
//
// A features file holds N samples, each one row of D values (any shape after the first axis,
// flattened in C order), of any of uint8/16/32, int8/16/32/64, float16/32/64, little-endian. It is
// never read whole: rows are converted to float32 (and normalised) as a batch gathers them,
// from the file mapped into memory, or, where the process may not map that much (a file
// larger than its address-space limit), read with pread row by row (Note [rows from a file]
// in file_bytes.hpp). A targets file holds N integer class labels, or N x K float targets (for a
// loss that compares values: troupe/loss.hpp), read whole.
//
// The header is checked before anything is read or mapped: every failure is a data_error
// naming the file, the byte offset and what was expected there (a truncated or lying header,
// a shape whose product overflows or passes the input limits, data shorter than the shape
// says, Fortran order, an object, big-endian or unknown dtype). Not here: .npz, writing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"
#include "runtime/data/file_bytes.hpp"
#include "runtime/data/normalisation.hpp"
#include "troupe/loss.hpp"

namespace troupe {

/// The element types troupe reads from a .npy file.
enum class npy_type { u8, i8, i16, i32, i64, u16, u32, f16, f32, f64 };

/// A checked .npy header: what follows it, and where.
struct npy_header {
  npy_type type = npy_type::f32;
  std::int64_t item_bytes = 4;
  std::vector<std::int64_t> shape;  // () for a scalar
  std::int64_t elements = 1;        // the product of shape
  std::int64_t data_offset = 0;     // bytes before the first element
  int major_version = 1;
};

/// Reads and checks the header of the .npy file at `path`, including that the file holds
/// every element its shape says. Throws data_error (file, byte offset, what was expected).
/// With `base`, the .npy starts at that byte of the file (an entry stored in a .npz) and
/// holds `length` bytes (-1: to the file's end); data_offset counts from the file's start.
npy_header read_npy_header(const std::string& path, std::int64_t base = 0,
                           std::int64_t length = -1);

/// An array in a file: its header (data_offset from the file's start), and how messages
/// name it ("'x.npy'", "'train.npz' entry 'x.npy'", "'d.safetensors' tensor 'x'").
struct npy_array {
  std::string path;
  npy_header header;
  std::string name;
  std::int64_t base = 0;  // where the array's .npy bytes start in the file (its magic)
  /// When set, the values are here, in memory (header.data_offset 0), not in a file: an
  /// array a program handed over (the Python module's troupe.data.arrays), read in place.
  std::shared_ptr<const unsigned char> memory;
};

/// An array in memory (`memory` holds its C-order values), of NumPy dtype `descr` ("<f4",
/// "|u1") and `shape`, checked as a file's header is (the dtype one troupe reads, the size
/// within the limits); `name` names it in messages.
npy_array memory_array(const std::string& name, const std::string& descr,
                       const std::vector<std::int64_t>& shape,
                       std::shared_ptr<const unsigned char> memory);

/// The array of the .npy file at `path`.
npy_array npy_file_array(const std::string& path);

/// The rows of a features file as float32 (see the top). Throws data_error for a file whose
/// header does not describe at least one row of at least one value, and for normalisation
/// vectors of the wrong length (neither 1 nor D values) or a zero std.
std::shared_ptr<const feature_rows> open_npy_rows(const std::string& path,
                                                  const feature_normalisation& normalisation,
                                                  file_access access = file_access::automatic);
std::shared_ptr<const feature_rows> open_npy_rows(const npy_array& array,
                                                  const feature_normalisation& normalisation,
                                                  file_access access = file_access::automatic);

/// The class labels of a targets file: N integers (shape (N) or (N, 1)) of an integer type,
/// each in [0, 2^24). Throws data_error naming the file and the first bad label's index.
std::vector<std::int32_t> read_npy_labels(const std::string& path);
std::vector<std::int32_t> read_npy_labels(const npy_array& array);

/// The float targets of a targets file: shape (N) (K = 1) or (N, K), any numeric type,
/// converted to float32; each finite. Throws data_error naming the file and the first bad
/// value's index.
struct npy_values {
  std::int64_t count = 0;    // N
  std::int64_t outputs = 1;  // K
  std::vector<float> values;  // (N, K)
};
npy_values read_npy_values(const std::string& path);
npy_values read_npy_values(const npy_array& array);

/// The header of a version 1.0 .npy file of little-endian float32 values of `shape` (C
/// order), padded as NumPy pads it: what a writer puts before the values.
std::string npy_float_header(const std::vector<std::int64_t>& shape);

/// The features and targets of one split.
struct npy_split_arrays {
  npy_array features, targets;
};

/// Two splits of arrays (the test split may be null: [data] validation instead), checked to
/// agree in count (and the two splits in features and outputs). Targets are class labels
/// (classes is the largest label plus one) or float values, as the loss says.
dataset_split load_arrays(const npy_split_arrays& train, const npy_split_arrays* test,
                          const feature_normalisation& normalisation, target_kind targets);

/// [data] source = "npy": features and targets of the training split and of the test split,
/// checked to agree in count (and the two splits in features and outputs). Targets are
/// class labels (classes is the largest label plus one) or float values, as the loss says.
dataset_split load_npy(const std::string& train_features, const std::string& train_targets,
                       const std::string& test_features, const std::string& test_targets,
                       const feature_normalisation& normalisation,
                       target_kind targets = target_kind::class_ids);

}  // namespace troupe
