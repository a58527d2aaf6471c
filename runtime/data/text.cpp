// text.cpp: the text corpus reader and its windows (text.hpp).
#include "runtime/data/text.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/limits.hpp"
#include "runtime/data/tokens.hpp"
#include "troupe/error.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// The files a path names: itself, or a directory's regular files by name.
std::vector<std::string> files_of(const std::string& path) {
  std::error_code error;
  if (fs::is_regular_file(path, error))
    return {path};
  if (!fs::is_directory(path, error))
    throw data_error("[data] path " + quote_user_path(path) +
                     " is neither a text file nor a directory of them");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    const auto name = entry.path().filename().string();
    if (entry.is_symlink(error) || !entry.is_regular_file(error) || name.empty() ||
        name[0] == '.' || entry.path().extension() == ".dat")
      continue;
    files.push_back(entry.path().string());
  }
  if (error)
    throw data_error("cannot list " + quote_user_path(path) + ": " + error.message());
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw data_error("[data] path " + quote_user_path(path) + " holds no text files");
  return files;
}

// Records of a file: the text between lines that hold only "%".
void split_records(const std::string& text, std::vector<std::string>& records) {
  std::string record;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line == "%") {
      if (!record.empty())
        records.push_back(std::move(record));
      record.clear();
      continue;
    }
    record += line;
    record += '\n';
  }
  if (!record.empty())
    records.push_back(std::move(record));
}

}  // namespace

text_corpus read_text_corpus(const std::string& path, std::int64_t validation_every,
                             std::int64_t context) {
  TROUPE_CHECK(validation_every >= 2 && context >= 1,
               "read_text_corpus: validation_every " << validation_every << ", context "
                                                     << context);
  text_corpus corpus;
  corpus.files = files_of(path);
  std::vector<std::string> records;
  std::int64_t total = 0;
  for (const auto& file : corpus.files) {
    std::error_code error;  // the limit before the bytes: a huge file is not read to learn its size
    const auto size = fs::file_size(file, error);
    if (!error && static_cast<std::int64_t>(size) > limits::max_samples - total)
      throw data_error("the text under " + quote_user_path(path) + " is more than " +
                       std::to_string(limits::max_samples) + " bytes (the limit), at " +
                       quote_user_path(file));
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw data_error("cannot open " + quote_user_path(file));
    std::ostringstream text;
    text << in.rdbuf();
    total += static_cast<std::int64_t>(text.str().size());
    if (total > limits::max_samples)
      throw data_error("the text under " + quote_user_path(path) + " is more than " +
                       std::to_string(limits::max_samples) + " bytes (the limit)");
    split_records(text.str(), records);
  }
  for (std::size_t k = 0; k < records.size(); ++k) {
    const bool validation = (k + 1) % static_cast<std::size_t>(validation_every) == 0;
    (validation ? corpus.validation : corpus.train) += records[k];
  }
  if (records.size() < static_cast<std::size_t>(validation_every)) {
    // Too few records to deal out: the last 1 / validation_every of the text instead.
    const auto all = corpus.train + corpus.validation;
    const auto cut = all.size() - all.size() / static_cast<std::size_t>(validation_every);
    corpus.train = all.substr(0, cut);
    corpus.validation = all.substr(cut);
  }
  const auto window = static_cast<std::size_t>(context) + 1;
  if (corpus.train.size() < window || corpus.validation.size() < window)
    throw data_error(
        "the text under " + quote_user_path(path) + " has " + std::to_string(corpus.train.size()) +
        " bytes of training text and " + std::to_string(corpus.validation.size()) +
        " of validation text; each needs at least context + 1 = " + std::to_string(window) +
        " (more text, or a smaller [data] context)");
  std::array<bool, 256> seen{};
  for (const auto* part : {&corpus.train, &corpus.validation})
    for (unsigned char c : *part)
      seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[static_cast<std::size_t>(c)])
      corpus.vocabulary += static_cast<char>(c);
  return corpus;
}

dataset_split make_text_dataset(const text_corpus& corpus, std::int64_t context) {
  std::array<std::int32_t, 256> id{};
  for (std::size_t i = 0; i < corpus.vocabulary.size(); ++i)
    id[static_cast<unsigned char>(corpus.vocabulary[i])] = static_cast<std::int32_t>(i);
  const auto vocabulary = static_cast<std::int64_t>(corpus.vocabulary.size());
  // The bytes as ids, windowed as a token file's (tokens.hpp): tiled, shuffled by epoch.
  auto windows = [&](const std::string& text, const char* what) {
    std::vector<std::int32_t> ids(text.size());
    std::transform(text.begin(), text.end(), ids.begin(),
                   [&id](char c) { return id[static_cast<unsigned char>(c)]; });
    const auto n = static_cast<std::int64_t>(ids.size());
    return token_dataset(tokens_in_memory(std::move(ids)), 0, n, context, vocabulary,
                         token_windows::tiled, what);
  };
  dataset_split out;
  out.train = windows(corpus.train, "the training text");
  out.test = windows(corpus.validation, "the validation text");
  out.vocabulary = corpus.vocabulary;
  return out;
}

std::string vocabulary_json(const std::string& vocabulary) {
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : vocabulary)
    bytes.push_back(static_cast<int>(c));
  nlohmann::json out{{"size", vocabulary.size()}, {"vocabulary", bytes}, {"text", vocabulary}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace troupe
