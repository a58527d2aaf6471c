// text.hpp: a character-level language-modelling data set from text files ([data] source
// = "text"), by default the fortunes package's (/usr/share/games/fortunes).
//
// The text is read as bytes (a UTF-8 character of several bytes is several tokens, as in
// a byte-level model), split into records at lines holding only "%" (the fortune files'
// separator; a file without one is one record), and every `validation_every`-th record
// (the last of each group) goes to validation: deterministic, and both parts draw from
// every file. The vocabulary is the sorted set of bytes the text holds; a token id is a
// byte's index in it. Samples are non-overlapping windows of `context` tokens, each
// token's label the token after it (so a window reads context + 1 bytes): the windows of a
// token file (tokens.hpp), over ids held in memory.
// Nothing here knows about actors or batching order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"

namespace troupe {

struct text_corpus {
  std::string train;
  std::string validation;
  std::string vocabulary;  // the distinct bytes of both, ascending
  std::vector<std::string> files;  // what was read, in order
};

/// Reads `path`, a text file or a directory of them (regular files in name order; index
/// files `*.dat` and links skipped). Throws data_error: nothing readable, no text, more
/// than limits::max_samples bytes, a validation part too short for one window.
text_corpus read_text_corpus(const std::string& path, std::int64_t validation_every,
                             std::int64_t context);

/// The windows of both parts as a dataset_split, through the token source's windows
/// (tokens.hpp, tiled): features (N, T) the token ids as floats, labels (N, T) the next
/// tokens, classes = the vocabulary's size, positions = T. Throws data_error for a part too
/// short for one window.
dataset_split make_text_dataset(const text_corpus& corpus, std::int64_t context);

/// A vocabulary as JSON text: {"size": n, "vocabulary": [byte of id 0, ...], "text": the
/// bytes as a string (invalid UTF-8 replaced)}. Written next to a run's metrics.
std::string vocabulary_json(const std::string& vocabulary);

}  // namespace troupe
