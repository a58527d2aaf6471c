// tokens.hpp: token files as a data source ([data] source = "tokens"), and the windows a
// language model trains on, which the text source's bytes go through too (text.hpp).
//
// A token file is nanoGPT's `train.bin` / `val.bin` layout: token ids one after another, no
// header, each a little-endian uint16 or uint32 (`dtype`); or a .npy of integers (any shape,
// read flat). It is never read whole: windows read their ids as batches pick them, from the
// file mapped or read with pread (Note [rows from a file] in file_bytes.hpp). Every id is
// checked against the vocabulary once, as the file is opened.
//
// A sample is a window of T (`context`) ids, its labels the T ids one position later. The
// windows of a split are `tiled` (non-overlapping, at 0, T, 2T, ...: one epoch reads every
// token once, shuffled by the loader's permutation) or `random` (every start offset is a
// sample, and each step draws its batch uniformly with replacement, keyed by (seed, step),
// as nanoGPT's get_batch does; an epoch is then the tiled count of samples). Evaluation
// always reads tiled windows, in order. Nothing here batches or knows about actors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"
#include "runtime/data/file_bytes.hpp"

namespace troupe {

/// The ids of a token file, or of a text held in memory; read in ranges.
class token_ids {
 public:
  virtual ~token_ids() = default;
  /// How many ids.
  virtual std::int64_t size() const = 0;
  /// Writes ids [first, first + count) to `out`. Safe to call from several threads at once.
  virtual void read(std::int64_t first, std::int64_t count, std::int32_t* out) const = 0;
};

/// Ids held in memory (a text's bytes as ids).
std::shared_ptr<const token_ids> tokens_in_memory(std::vector<std::int32_t> ids);

/// The ids of the token file at `path`: a .npy of integers (by its magic bytes), or raw ids
/// of `dtype` ("uint16" or "uint32"). Throws data_error naming the file and the byte offset:
/// an empty file, a raw file whose size is not a whole number of ids, a .npy of floats,
/// negative ids, an id at or past `vocabulary` (the first such, with its index).
std::shared_ptr<const token_ids> open_token_file(const std::string& path, const std::string& dtype,
                                                 std::int64_t vocabulary,
                                                 file_access access = file_access::automatic);

/// The vocabulary's size from the JSON file at `path`: an object with "vocab_size" (nanoGPT's
/// meta) or "size" (what a text run writes: text.hpp's vocabulary_json). Throws data_error.
std::int64_t read_vocabulary_size(const std::string& path);

/// How a split's samples are laid over its ids (see the top).
enum class token_windows { tiled, random };

/// The samples of ids [begin, end) of `ids` as windows of `context` ids: features (N, T) the
/// ids as floats (exact below 2^24), labels the next ids, classes = `vocabulary`. Throws
/// data_error naming `what` when the range holds no window and its labels (context + 1 ids).
dataset token_dataset(std::shared_ptr<const token_ids> ids, std::int64_t begin, std::int64_t end,
                      std::int64_t context, std::int64_t vocabulary, token_windows windows,
                      const std::string& what);

/// What [data] source = "tokens" says.
struct token_source {
  std::string train_path, test_path;  // test_path empty: `validation` of the training ids
  std::string dtype = "uint16";       // of a raw file
  std::int64_t vocabulary = 0;        // 0: from vocab.json next to train_path
  std::int64_t context = 64;          // T
  token_windows windows = token_windows::random;  // of the training split
  double validation = 0;              // the last share of the training ids, when no test file
};

/// The vocabulary's size: as given, or from vocab.json next to train_path. Throws data_error.
std::int64_t vocabulary_of(const token_source& source);

/// The training split (windows as the source says) and the evaluated one (tiled): from the
/// test file, or from the last `validation` share of the training ids (in `validation`).
dataset_split load_tokens(const token_source& source);

}  // namespace troupe
