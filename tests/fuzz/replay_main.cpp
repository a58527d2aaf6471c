// replay_main.cpp: runs a fuzz harness over files without libFuzzer (issue 12). Linked with
// each harness into troupe_fuzz_replay_<name>; ctest runs it over the harness's seed corpus
// and its regressions (tests/fuzz/regressions/<name>/: every input a fuzzer ever crashed
// on), with every compiler, so a finding that was fixed stays fixed.
//
//   troupe_fuzz_replay_<name> FILE_OR_DIR...   each file once; prints how many
//   troupe_fuzz_replay_<name> --write-seeds DIR   the harness's generated seeds, if it has any
//
// A harness's crash or sanitizer report ends the process, as it would end libFuzzer, and
// so does an allocation past a memory cap like libFuzzer's -rss_limit_mb: 4 GiB of address
// space, or under AddressSanitizer (whose shadow memory needs terabytes of it) its
// malloc_limit_mb, which CMakeLists.txt sets for these tests. Under ThreadSanitizer there
// is none: the plain and ASan builds keep the cap.
#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/sanitizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int troupe_fuzz_write_seeds(const char* directory);

namespace fs = std::filesystem;

namespace {

void cap_memory() {
  if (troupe::testing::under_sanitizer)
    return;
  const rlim_t cap = rlim_t{4} << 30;
  const rlimit limit{cap, cap};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) {
    std::perror("setrlimit");
    std::exit(2);
  }
}

void replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.eof() && in.fail()) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    std::exit(2);
  }
  // A copy of exactly `size` bytes, as libFuzzer gives, so that ASan sees reads past the end.
  std::vector<std::uint8_t> input(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(input.empty() ? nullptr : input.data(), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    if (!troupe_fuzz_write_seeds) {
      std::fprintf(stderr, "this harness has no generated seeds\n");
      return 2;
    }
    fs::create_directories(argv[2]);
    std::printf("%d seeds written to %s\n", troupe_fuzz_write_seeds(argv[2]), argv[2]);
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR... | --write-seeds DIR\n", argv[0]);
    return 2;
  }
  cap_memory();
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path path = argv[i];
    if (fs::is_directory(path)) {
      for (const auto& entry : fs::recursive_directory_iterator(path))
        if (entry.is_regular_file()) {
          replay(entry.path());
          ++count;
        }
    } else if (fs::is_regular_file(path)) {
      replay(path);
      ++count;
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", path.c_str());
      return 2;
    }
  }
  std::printf("%zu inputs replayed, none crashed\n", count);
  return count > 0 ? 0 : 1;
}
