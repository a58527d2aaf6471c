// atomic_file_test.cpp: write_file_atomically leaves the target with the old or the new
// content and never a temporary file, whatever fails (a missing directory, /proc, a write
// cut short as by a full disk, an exception from the caller); and CRC-32 is the standard one.
#include "runtime/checkpoint/atomic_file.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/file_size_limit.hpp"
#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::read_bytes;
using troupe::test::temp_directory;

namespace {

namespace fs = std::filesystem;

using troupe::test::read_all;

// The names in `dir`, to see that no temporary file is left.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  return names;
}

// The message and exit code of the user_error `action` throws.
template <typename Action>
std::pair<std::string, exit_code> user_error_and_code(Action&& action) {
  try {
    action();
  } catch (const user_error& e) {
    return {e.what(), e.exit_code()};
  }
  FAIL("expected a user_error, but nothing was thrown");
  return {"", exit_code::ok};
}

using troupe::test::file_size_limit;

}  // namespace

TEST_CASE("write_file_atomically replaces the content and leaves no temporary file") {
  const temp_directory dir{"troupe-atomic"};
  const auto path = dir / "state.bin";
  const auto first = write_file_atomically(path, std::string("old content"));
  CHECK(read_all(path) == "old content");
  CHECK(first.bytes == 11);
  CHECK(first.crc32 == crc32("old content", 11));
  const std::vector<std::uint8_t> bytes{1, 2, 3};
  write_file_atomically(path, bytes);
  CHECK(read_bytes(path) == bytes);
  const auto streamed = write_file_atomically(path, [](atomic_file_writer& out) {
    out.write("new ", 4);
    out.write("content", 7);
    CHECK(out.bytes_written() == 11);
  });
  CHECK(read_all(path) == "new content");
  CHECK(streamed.crc32 == crc32("new content", 11));
  CHECK(names_in(dir.path()) == std::vector<std::string>{"state.bin"});
}

TEST_CASE("write_file_atomically into a missing directory or /proc throws run_failed naming it") {
  const temp_directory dir{"troupe-atomic"};
  const auto missing = dir / "no/such/dir/file.bin";
  const auto [message, code] = user_error_and_code([&] { write_file_atomically(missing, "x"); });
  CHECK(code == exit_code::run_failed);
  CHECK(contains(message, "cannot write '" + missing + "'"));
  CHECK(contains(message, "cannot create the temporary file"));
  CHECK(contains(message, "No such file or directory"));
  CHECK(names_in(dir.path()).empty());

  const auto [proc_message, proc_code] =
      user_error_and_code([] { write_file_atomically("/proc/troupe-atomic-test", "x"); });
  CHECK(proc_code == exit_code::run_failed);
  CHECK(contains(proc_message, "cannot write '/proc/troupe-atomic-test'"));
  CHECK_FALSE(fs::exists("/proc/troupe-atomic-test"));
}

TEST_CASE("an atomic write cut short, as by a full disk, throws and keeps the old content") {
  const temp_directory dir{"troupe-atomic"};
  const auto path = dir / "shard.bin";
  write_file_atomically(path, std::string("old"));
  const std::vector<std::uint8_t> big(std::size_t{1} << 20, 0xAB);
  std::pair<std::string, exit_code> failure;
  {
    const file_size_limit limit{64 * 1024};
    failure = user_error_and_code([&] { write_file_atomically(path, big); });
  }
  CHECK(failure.second == exit_code::run_failed);
  CHECK(contains(failure.first, "cannot write '" + path + "'"));
  CHECK(contains(failure.first, "failed after 65536 bytes"));
  CHECK(contains(failure.first, "File too large"));
  CHECK(read_all(path) == "old");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"shard.bin"});
}

TEST_CASE("an exception from an atomic write's callback propagates and removes the temporary") {
  const temp_directory dir{"troupe-atomic"};
  const auto path = dir / "file.bin";
  write_file_atomically(path, std::string("old"));
  CHECK_THROWS_WITH_AS(write_file_atomically(path,
                                             [](atomic_file_writer& out) {
                                               out.write("half", 4);
                                               throw std::runtime_error("the caller gave up");
                                             }),
                       "the caller gave up", std::runtime_error);
  CHECK(read_all(path) == "old");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"file.bin"});
}

TEST_CASE("a reader of an atomically rewritten file sees the old or the new content, never a mix") {
  const temp_directory dir{"troupe-atomic"};
  const auto path = dir / "flip.bin";
  const std::string a(1000, 'a');
  const std::string b(3000, 'b');
  write_file_atomically(path, a);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader{[&] {  // no doctest assertions off the main thread: count instead
    while (!done) {
      std::ifstream in(path, std::ios::binary);
      const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (!in.is_open() || (text != a && text != b))
        ++torn;
    }
  }};
  for (int i = 0; i < 50; ++i)
    write_file_atomically(path, i % 2 ? a : b);
  done = true;
  reader.join();
  CHECK(torn == 0);
}

TEST_CASE("sync_directory of a missing directory throws run_failed for the atomic writes") {
  const temp_directory dir{"troupe-atomic"};
  sync_directory(dir.string());
  const auto [message, code] = user_error_and_code([&] { sync_directory(dir / "missing"); });
  CHECK(code == exit_code::run_failed);
  CHECK(contains(message, "cannot sync directory '" + dir / "missing" + "'"));
}

TEST_CASE("the checkpoint CRC-32 is the standard one (zlib's), of buffers and of files") {
  // The check value of CRC-32/ISO-HDLC, as zlib.crc32(b"123456789").
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  CHECK(crc32(nullptr, 0) == 0u);
  const temp_directory dir{"troupe-atomic"};
  write_file_atomically(dir / "digits", std::string("123456789"));
  CHECK(crc32_of_file(dir / "digits") == 0xCBF43926u);
  CHECK(contains(data_error_of([&] { crc32_of_file(dir / "missing"); }),
                 "cannot read '" + dir / "missing" + "' to check its checksum"));
}
