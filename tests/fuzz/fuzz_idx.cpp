// fuzz_idx.cpp: libFuzzer harness for the IDX reader (issue 12): the bytes as an IDX3 image
// file and as an IDX1 label file, raw or gzip (the reader detects which by the magic bytes).
//
// The reader takes a path (it streams through Boost.Iostreams), so each input is written to
// a file of this process's own first. A data_error (exit 2) is the right answer to bad
// input; anything else that escapes, a crash or a sanitizer report is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/data/dataset.hpp"
#include "troupe/error.hpp"

namespace {

const std::string& scratch_path() {
  static const std::string path = "/tmp/troupe-fuzz-idx-" + std::to_string(::getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& path = scratch_path();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file || std::fwrite(data, 1, size, file) != size || std::fclose(file) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness's own failure, not the reader's
  }
  try {
    (void)troupe::read_idx_images(path);
  } catch (const troupe::user_error&) {
  }
  try {
    (void)troupe::read_idx_labels(path);
  } catch (const troupe::user_error&) {
  }
  std::remove(path.c_str());
  return 0;
}
