// text_test.cpp: the text data source (runtime/data/text.hpp): records dealt into train and
// validation, files in name order with index files and links skipped, the vocabulary, the
// windows and their shifted labels, and what it refuses.
#include "runtime/data/text.hpp"

#include <doctest/doctest.h>

#include <filesystem>

#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

/// `count` fortunes "<tag>0\n", "<tag>1\n", ... separated by "%" lines.
std::string fortunes(const std::string& tag, int count) {
  std::string text;
  for (int i = 0; i < count; ++i)
    text += (i ? "%\n" : "") + tag + std::to_string(i) + "\n";
  return text;
}

}  // namespace

TEST_CASE("every n-th record is validation text, files in name order, index files skipped") {
  const test::temp_directory dir{"troupe-text"};
  dir.write("b", fortunes("b", 6));
  dir.write("a", fortunes("a", 6));
  dir.write("a.dat", "binary index, not text");
  std::filesystem::create_symlink(dir / "a", dir / "a.u8");
  const auto corpus = read_text_corpus(dir.string(), 4, 2);
  CHECK(corpus.files == std::vector<std::string>{dir / "a", dir / "b"});
  // Records a0..a5 b0..b5 in order; the 4th, 8th and 12th are validation.
  CHECK(corpus.train == "a0\na1\na2\na4\na5\nb0\nb2\nb3\nb4\n");
  CHECK(corpus.validation == "a3\nb1\nb5\n");
  CHECK(corpus.vocabulary == "\n012345ab");
}

TEST_CASE("a text's windows are token ids with the next token as label") {
  text_corpus corpus;
  corpus.vocabulary = "abc";
  corpus.train = "abcabca";  // 7 bytes: two windows of 3, the 7th byte a label only
  corpus.validation = "cbab";
  const auto split = make_text_dataset(corpus, 3);
  CHECK(split.vocabulary == "abc");
  CHECK(split.train.count == 2);
  CHECK(split.train.features == 3);
  CHECK(split.train.positions == 3);
  CHECK(split.train.classes == 3);
  const std::vector<std::int64_t> rows{0, 1};
  std::vector<float> x(6);
  std::vector<std::int32_t> y(6);
  split.train.gather(rows.data(), 0, 2, x.data());
  split.train.gather_labels(rows.data(), 2, y.data());
  CHECK(x == std::vector<float>{0, 1, 2, 0, 1, 2});
  CHECK(y == std::vector<std::int32_t>{1, 2, 0, 1, 2, 0});
  CHECK(split.test.count == 1);  // 4 bytes: one window of 3 and its labels
  split.test.gather(rows.data(), 0, 1, x.data());
  split.test.gather_labels(rows.data(), 1, y.data());
  CHECK(x[0] == 2);
  CHECK(y[2] == 1);
  corpus.validation = "cba";  // 3 bytes hold no window of 3 and its labels
  CHECK_THROWS_WITH_AS(make_text_dataset(corpus, 3),
                       doctest::Contains("the validation text holds 3 token(s); a window needs "
                                         "context + 1 = 4"),
                       data_error);
}

TEST_CASE("a text without records is split by its last share, and too little text is refused") {
  const test::temp_directory dir{"troupe-text"};
  const auto file = dir.write("plain.txt", "0123456789abcdefghij");
  const auto corpus = read_text_corpus(file, 4, 3);
  CHECK(corpus.train == "0123456789abcdef");
  CHECK(corpus.validation == "ghij\n");
  CHECK_THROWS_WITH_AS(read_text_corpus(file, 4, 8),
                       doctest::Contains("each needs at least context + 1 = 9"), data_error);
  const test::temp_directory empty{"troupe-text"};
  CHECK_THROWS_WITH_AS(read_text_corpus(empty.string(), 10, 4),
                       doctest::Contains("holds no text files"), data_error);
  CHECK_THROWS_WITH_AS(read_text_corpus(dir / "missing", 10, 4),
                       doctest::Contains("is neither a text file nor a directory"), data_error);
  // A device is not a text: /dev/zero is refused, not read forever.
  CHECK_THROWS_WITH_AS(read_text_corpus("/dev/zero", 10, 4),
                       doctest::Contains("is neither a text file nor a directory"), data_error);
  // Past the limit (a sparse file of 2^28 + 1 bytes): refused before its bytes are read.
  const auto huge = dir.write("huge.txt", "");
  std::filesystem::resize_file(huge, (std::uintmax_t{1} << 28) + 1);
  CHECK_THROWS_WITH_AS(read_text_corpus(huge, 10, 4), doctest::Contains("(the limit)"),
                       data_error);
}
