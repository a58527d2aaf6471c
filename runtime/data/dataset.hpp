// dataset.hpp: in-memory image classification data, and the readers that fill it.
//
// The IDX reader (Fashion-MNIST's format, gzip or raw) validates magic numbers, counts
// and sizes and throws data_error naming the file and the byte offset (in the
// decompressed stream) of the first thing that is wrong. A synthetic, linearly
// separable source exists for tests and machines without the data set.
// Nothing here knows about actors or batching order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/huge_pages.hpp"

namespace troupe {

/// Rows of features kept outside `dataset::images`: a file read as batches gather them (a
/// .npy of any numeric type, converted to float32: runtime/data/npy.hpp; windows of token
/// ids, which hold their labels too: runtime/data/tokens.hpp).
class feature_rows {
 public:
  virtual ~feature_rows() = default;
  /// Writes rows picked[first .. last) as float32, D values each, to `out` (row i of the
  /// range at out + (i - first) * D). Safe to call from several threads at once.
  virtual void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
                      float* out) const = 0;
  /// The same for a training batch of epoch `epoch`: rows that augment (an image folder's
  /// random crops and flips: runtime/data/images.hpp) draw it keyed by (seed, epoch, row);
  /// the others read what gather() does.
  virtual void gather_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last,
                               float* out, std::int64_t /*epoch*/) const {
    gather(picked, first, last, out);
  }
  /// Whether the rows hold the class labels too (then `dataset::labels` is empty).
  virtual bool holds_labels() const { return false; }
  /// Writes the labels of rows picked[first .. last), T each, to `out`; only where
  /// holds_labels().
  virtual void gather_labels(const std::int64_t* /*picked*/, std::size_t /*first*/,
                             std::size_t /*last*/, std::int32_t* /*out*/) const {}
  /// The same for a training batch of epoch `epoch` (rows whose labels differ by epoch: a
  /// Python iterable's batches, python/data_binding.cpp); the others read gather_labels().
  virtual void gather_labels_in_epoch(const std::int64_t* picked, std::size_t first,
                                      std::size_t last, std::int32_t* out,
                                      std::int64_t /*epoch*/) const {
    gather_labels(picked, first, last, out);
  }
};

/// N samples of D features each, with targets: integer class labels (one per sample, or
/// one per position of a sequence: a language model's next tokens, runtime/data/text.hpp),
/// or K float values per sample (regression, binary labels: `values`).
struct dataset {
  std::int64_t count = 0;            // N
  std::int64_t features = 0;         // D
  std::int64_t classes = 0;          // number of classes, labels in [0, classes)
  std::int64_t positions = 1;        // T labels per sample
  std::int64_t outputs = 0;          // K float targets per sample; 0: class labels
  // (N, D), normalised (a text's token ids, exactly); on huge pages (Note [huge pages for
  // data sets] in runtime/base/huge_pages.hpp)
  std::vector<float, huge_page_allocator<float>> images;
  std::vector<std::int32_t> labels;  // (N, T), when outputs == 0
  std::vector<float> values;         // (N, K), when outputs > 0
  /// When set, the features are here instead, and `images` is empty (and the labels too,
  /// where rows->holds_labels()).
  std::shared_ptr<const feature_rows> rows;
  /// > 0: each training step draws its B samples uniformly with replacement, keyed by
  /// (seed, step), instead of taking them from an epoch's permutation, and an epoch is this
  /// many samples (a token file's random windows: runtime/data/tokens.hpp).
  std::int64_t draws_per_epoch = 0;
  /// > 0: host threads of their own gather this split's batches (an image folder's decoding,
  /// `[data] workers`), ahead of the device that reads them; 0: that device's thread.
  std::int64_t workers = 0;

  /// What the model's output must be wide (per position): K values, or one logit a class.
  std::int64_t target_width() const { return outputs > 0 ? outputs : classes; }

  /// Writes rows picked[first .. last) of the features, D floats each, to `out` (row i of
  /// the range at out + (i - first) * D), from `images` or from `rows`; as a training batch
  /// of epoch `epoch` (augmented where the rows augment) when it is not negative.
  void gather(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
              std::int64_t epoch = -1) const;
  /// Writes the class labels of rows picked[0 .. count), T each, to `out`, from `labels` or
  /// from `rows` (as a training batch of epoch `epoch` when it is not negative).
  void gather_labels(const std::int64_t* picked, std::size_t count, std::int32_t* out,
                     std::int64_t epoch = -1) const;
  /// Samples an epoch: draws_per_epoch, or every sample once.
  std::int64_t epoch_samples() const { return draws_per_epoch > 0 ? draws_per_epoch : count; }
};

struct dataset_split {
  dataset train;
  dataset test;        // empty (count 0) when the source names no test files
  dataset validation;  // [data] validation: held out of the training split; else empty
  std::string evaluated = "test";  // which split `test` is, once a session picked it
  std::string vocabulary;  // a text source's tokens: the byte of each id (text.hpp)
  std::vector<std::string> class_names;  // an image folder's classes, by index (images.hpp)
  /// [data] normalize = "standard": each feature's mean and standard deviation over the
  /// training split, which both splits were normalised with; empty otherwise.
  std::vector<double> feature_mean, feature_std;
};

/// [data] validation = `fraction`: moves round(fraction x N) samples of `train`, chosen by a
/// permutation keyed by `seed` alone (the same on every wiring, resume and `troupe eval`),
/// into the returned split; both keep their samples in their original order. Rows from a
/// file stay in the file (each split reads its own through an index); rows in memory are
/// copied into the two splits. At least one sample stays on each side.
dataset hold_out(dataset& train, double fraction, std::uint64_t seed);

/// A split whose source names no test files ([data] validation instead): an empty test
/// split shaped like the training one, the classes counted from the training labels.
void leave_test_empty(dataset_split& split, bool class_labels, const std::string& train_targets);

/// Sets both splits' classes to the largest label of either plus one; throws data_error
/// naming `train_targets` (where the labels came from) when that is fewer than two.
void count_classes(dataset_split& split, const std::string& train_targets);

/// Fashion-MNIST's training-set pixel statistics (of x / 255), the usual published values.
constexpr double fashion_mnist_mean = 0.2860;
constexpr double fashion_mnist_std = 0.3530;

/// The raw contents of an IDX3 image file (magic 0x00000803).
struct idx_images {
  std::int64_t count = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::uint8_t> pixels;  // (count, rows, cols)
};

/// Reads an IDX3 image file; `path` may be gzip-compressed (detected by its magic bytes).
/// Throws data_error: missing file, bad gzip, wrong magic, truncated data (with offset).
idx_images read_idx_images(const std::string& path);

/// Reads an IDX1 label file (magic 0x00000801); throws data_error as above.
std::vector<std::uint8_t> read_idx_labels(const std::string& path);

/// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `directory`, checks that
/// images and labels agree in count, and normalises pixels to (x / 255 - mean) / std with
/// Fashion-MNIST's training mean 0.2860 and std 0.3530.
dataset_split load_fashion_mnist(const std::string& directory);

/// A linearly separable problem: `classes` random unit-norm centres in `features`
/// dimensions, samples = centre + Gaussian noise, all drawn from `seed`. The same
/// arguments always give the same data.
dataset_split make_synthetic(std::int64_t train_count, std::int64_t test_count,
                             std::int64_t features, std::int64_t classes,
                             std::uint64_t seed);

}  // namespace troupe
