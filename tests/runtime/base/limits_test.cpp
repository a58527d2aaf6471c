// The input limits' helpers (runtime/base/limits.hpp): quoting user text with a cap,
// overflow-checked arithmetic, and reading a file with a cap (regular files, /dev/zero,
// FIFOs).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "runtime/base/limits.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;

TEST_CASE("quote_user_text keeps short text whole and cuts long text to a prefix and its length") {
  CHECK(quote_user_text("lr_rate") == "'lr_rate'");
  CHECK(quote_user_text("a\nb\x01") == "'a\\x0Ab\\x01'");
  const std::string huge(20'000'000, 'x');
  const auto quoted = quote_user_text(huge);
  CHECK(quoted.size() < 120);
  CHECK(quoted == "'" + std::string(limits::max_quoted_length, 'x') + "'... (20000000 bytes)");
  // A cut never splits a UTF-8 character: "é" is two bytes, and 3 bytes would split the second.
  CHECK(quote_user_text("\xC3\xA9\xC3\xA9", 3) == "'\xC3\xA9'... (4 bytes)");
}

TEST_CASE("checked arithmetic says when a product or sum of user numbers overflows") {
  constexpr auto big = std::numeric_limits<std::int64_t>::max();
  CHECK(checked_multiply(1 << 20, 1 << 20) == std::int64_t{1} << 40);
  CHECK_FALSE(checked_multiply(std::int64_t{1} << 40, std::int64_t{1} << 30));
  CHECK_FALSE(checked_multiply(-2, big));
  CHECK(checked_add(big - 1, 1) == big);
  CHECK_FALSE(checked_add(big, 1));
}

TEST_CASE("read_file_capped reads a file up to its cap and refuses one past it") {
  test::temp_directory dir;
  const auto path = dir.write("ten.txt", "0123456789");
  CHECK(read_file_capped(path, 10, "test file") == "0123456789");
  CHECK_THROWS_WITH_AS(read_file_capped(path, 9, "test file"),
                       doctest::Contains("is 10 bytes, more than the limit of 9 bytes"),
                       user_error);
  CHECK_THROWS_WITH_AS(read_file_capped(dir.file("missing"), 9, "test file", "; a hint"),
                       doctest::Contains("No such file or directory; a hint"), user_error);
  CHECK_THROWS_WITH_AS(read_file_capped(dir.string(), 9, "test file"),
                       doctest::Contains("it is a directory"), user_error);
}

TEST_CASE("read_file_capped refuses /dev/zero and a FIFO after reading just past the cap") {
  CHECK_THROWS_WITH_AS(read_file_capped("/dev/zero", 1 << 20, "config file"),
                       doctest::Contains("holds more than the limit of 1 MiB"), user_error);
  test::temp_directory dir;
  const auto fifo = dir.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // A writer of 16 KiB, more than the cap: it fits in the pipe's buffer (64 KiB), so the
  // writer is done whether or not the reader reads it all.
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << std::string(16384, 'a'); });
  CHECK_THROWS_WITH_AS(read_file_capped(fifo, 8192, "trace file"),
                       doctest::Contains("holds more than the limit of 8192 bytes"), user_error);
  writer.join();
}

TEST_CASE("describe_bytes writes round sizes in MiB and GiB") {
  CHECK(describe_bytes(std::int64_t{16} << 20) == "16 MiB");
  CHECK(describe_bytes(std::int64_t{1} << 30) == "1 GiB");
  CHECK(describe_bytes(300) == "300 bytes");
}
