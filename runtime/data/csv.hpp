// csv.hpp: CSV tables as a data source ([data] source = "csv").
//
// A table's first row names its columns; every other row is a sample. The target columns
// (`target`, one or several) become the sample's class label (one column of integers in
// [0, 2^24), for a loss of class labels) or its K float targets (a loss of float targets:
// troupe/loss.hpp); the feature columns (`features`, or every other column) its D values,
// normalised as [data] scale, mean and std say. Fields are separated by the delimiter
// (',' by default), may be quoted ("a, b" with "" for a quote inside, as RFC 4180 and
// Python's csv module write them), and a UTF-8 byte-order mark and CRLF line ends are
// accepted; blank lines are skipped.
//
// The table is parsed once, not on every epoch, from its text mapped (at most
// limits::max_csv_bytes): into memory as float32, or, past a share of memory, into a scratch
// file of float32 rows read as a .npy's (Note [a CSV table larger than memory] in csv.cpp).
// Every failure is a data_error naming file:line:column and what was expected there: a
// ragged row, a cell that is not a number (a categorical column: leave it out with
// `features`, or encode it first), an empty cell, a header naming a column twice, a target
// or feature column that does not exist (with the nearest name), an empty file.
#pragma once

#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"
#include "runtime/data/normalisation.hpp"
#include "troupe/loss.hpp"

namespace troupe {

/// Which columns of a table are what, and how its fields are separated.
struct csv_columns {
  std::vector<std::string> targets;   // at least one, unless targets_optional
  std::vector<std::string> features;  // empty: every column that is not a target
  char delimiter = ',';
  /// Inputs to predict from: the targets are left out where the header has them, and not
  /// read; the dataset has no labels or values.
  bool targets_optional = false;
};

/// Feature values of a table parsed into memory; past them, into a scratch file.
constexpr std::int64_t csv_memory_values = std::int64_t{1} << 27;

/// One table: a split of a data set, its features in `images`, or in `rows` (a scratch file)
/// past `memory_values` values.
dataset read_csv(const std::string& path, const csv_columns& columns, target_kind targets,
                 const feature_normalisation& normalisation,
                 std::int64_t memory_values = csv_memory_values);

/// [data] source = "csv": the training table and the test table, which must have the same
/// columns; the classes are the largest label of either plus one.
dataset_split load_csv(const std::string& train_path, const std::string& test_path,
                       const csv_columns& columns, target_kind targets,
                       const feature_normalisation& normalisation,
                       std::int64_t memory_values = csv_memory_values);

}  // namespace troupe
