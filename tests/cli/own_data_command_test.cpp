// own_data_command_test.cpp: `troupe run` on a user's own files: a data set larger than the
// process may map trains (Note [rows from a file] in runtime/data/file_bytes.hpp: troupe run under
// an address-space limit (ulimit -v) below the size of its features file), and a malformed
// .npy file or CSV table ends the run with exit 2, naming the file and the place.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/run_troupe.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

/// A version 1.0 .npy header for `descr` and `shape`, padded to 64 bytes as NumPy pads it.
std::string npy_header_text(const std::string& descr, const std::string& shape) {
  const auto file = troupe::test::npy_file(descr, shape, {});
  return std::string(file.begin(), file.end());
}

void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const std::vector<unsigned char>& data) {
  troupe::test::write_test_file(path, troupe::test::npy_file(descr, shape, data));
}

}  // namespace

TEST_CASE("a features file larger than the process's address space trains, read row by row") {
  if (sanitized) {
    MESSAGE("skipped: a sanitizer's shadow memory needs more address space than ulimit -v leaves");
    return;
  }
  troupe::test::temp_directory dir{"troupe-npy-large"};
  // 2,000,000 samples of 784 bytes: 1.57 GB of features, sparse (zeros), over a 1 GB limit.
  const long long samples = 2'000'000, features = 784;
  const auto x = dir / "x.npy";
  const auto header = npy_header_text("|u1", "(" + std::to_string(samples) + ", 784)");
  {
    std::ofstream out(x, std::ios::binary);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    REQUIRE(out.good());
  }
  REQUIRE(::truncate(x.c_str(), static_cast<off_t>(header.size() + samples * features)) == 0);
  std::vector<unsigned char> labels(static_cast<std::size_t>(samples));
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<unsigned char>(i % 10);
  write_npy(dir / "y.npy", "|u1", "(" + std::to_string(samples) + ",)", labels);
  std::vector<unsigned char> test_x(100 * 784, 7), test_y(100);
  for (std::size_t i = 0; i < test_y.size(); ++i)
    test_y[i] = static_cast<unsigned char>(i % 10);
  write_npy(dir / "tx.npy", "|u1", "(100, 784)", test_x);
  write_npy(dir / "ty.npy", "|u1", "(100,)", test_y);
  const auto config = dir / "large.toml";
  std::ofstream{config} << "[data]\nsource = \"npy\"\nfeatures = \"x.npy\"\ntargets = \"y.npy\"\n"
                           "test_features = \"tx.npy\"\ntest_targets = \"ty.npy\"\n"
                           "scale = 0.0039215686274509803\nbatch_size = 128\n"
                           "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 32\n"
                           "[[model.layers]]\ntype = \"relu\"\n[[model.layers]]\n"
                           "type = \"linear\"\nout = 10\n";
  const auto result = troupe::testing::run_shell(
      "ulimit -v 1000000 && " + std::string{TROUPE_BINARY} + " run " + config +
      " --steps 20 --metrics '' --trace '' -q 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("done: 20 steps") != std::string::npos);
}

TEST_CASE("a run on a malformed .npy file ends with exit 2 and the file and byte named") {
  troupe::test::temp_directory dir{"troupe-npy-bad"};
  write_npy(dir / "x.npy", "<f4", "(4, 2)", std::vector<unsigned char>(8 * 4 - 1, 0));
  write_npy(dir / "y.npy", "|u1", "(4,)", {0, 1, 0, 1});
  const auto config = dir / "bad.toml";
  std::ofstream{config} << "[data]\nsource = \"npy\"\nfeatures = \"x.npy\"\ntargets = \"y.npy\"\n"
                           "test_features = \"x.npy\"\ntest_targets = \"y.npy\"\nbatch_size = 2\n"
                           "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 2\n";
  const auto result = troupe::testing::run_troupe("run " + config + " --steps 1 --metrics '' -q");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("x.npy': byte 128: shape (4, 2) of 4-byte values needs 32 bytes of "
                           "data, but the file has 31") != std::string::npos);
}

TEST_CASE("a run on a CSV table with a ragged row ends with exit 2 and its file:line named") {
  troupe::test::temp_directory dir{"troupe-csv-bad"};
  std::ofstream{dir / "t.csv"} << "a,b,y\n1,2,0\n3,4\n5,6,1\n";
  const auto config = dir / "bad.toml";
  std::ofstream{config} << "[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = \"t.csv\"\n"
                           "target = \"y\"\nbatch_size = 2\n"
                           "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 2\n";
  const auto result = troupe::testing::run_troupe("run " + config + " --steps 1 --metrics '' -q");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("t.csv':3:1: a row of 2 fields; the header has 3 columns") !=
        std::string::npos);
}
