// Starting a process from one that has threads (runtime/base/spawn.hpp): what the child
// gets (arguments, environment, output file, process group), how a failure to start is
// reported, and that nothing of fork's runs in the parent (Note [spawn, not fork]).
#include <doctest/doctest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "runtime/base/spawn.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;

namespace {

using troupe::test::read_all;

std::atomic<int> fork_handlers_run{0};
extern "C" void count_fork_handler() { fork_handlers_run.fetch_add(1); }

}  // namespace

TEST_CASE("a spawned process gets its arguments, the environment given, and its output file") {
  test::temp_directory dir{"troupe-spawn"};
  ::setenv("TROUPE_SPAWN_TEST_KEPT", "kept", 1);
  ::setenv("TROUPE_SPAWN_TEST_GONE", "gone", 1);
  ::setenv("TROUPE_SPAWN_TEST_REPLACED", "old", 1);
  spawn_options options;
  options.set_environment = {{"TROUPE_SPAWN_TEST_REPLACED", "new"},
                             {"TROUPE_SPAWN_TEST_ADDED", "a b=c"}};
  options.unset_environment = {"TROUPE_SPAWN_TEST_GONE"};
  options.output = dir.file("out.txt");
  auto pid = spawn_process(
      "/bin/sh",
      {"-c",
       "echo \"$0|$1|$TROUPE_SPAWN_TEST_KEPT|${TROUPE_SPAWN_TEST_GONE-unset}|"
       "$TROUPE_SPAWN_TEST_REPLACED|$TROUPE_SPAWN_TEST_ADDED\"; echo to-stderr >&2; exit 3",
       "first", "second argument"},
      options);
  CHECK(wait_for_exit(pid) == 3);
  CHECK(read_all(options.output) == "first|second argument|kept|unset|new|a b=c\nto-stderr\n");
  // This process's own environment is as it was.
  CHECK(std::string{std::getenv("TROUPE_SPAWN_TEST_REPLACED")} == "old");
  CHECK(std::getenv("TROUPE_SPAWN_TEST_ADDED") == nullptr);
  for (const char* name :
       {"TROUPE_SPAWN_TEST_KEPT", "TROUPE_SPAWN_TEST_GONE", "TROUPE_SPAWN_TEST_REPLACED"})
    ::unsetenv(name);
}

TEST_CASE("a spawned process may lead its own process group, and a signal's end is 128 + N") {
  spawn_options options;
  options.own_process_group = true;
  auto pid = spawn_process("/bin/sleep", {"30"}, options);
  CHECK(::getpgid(pid) == pid);
  ::kill(pid, SIGTERM);
  CHECK(wait_for_exit(pid) == 128 + SIGTERM);
  auto same_group = spawn_process("/bin/sh", {"-c", "exit 0"});
  CHECK(::getpgid(same_group) == ::getpgrp());
  CHECK(wait_for_exit(same_group) == 0);
}

TEST_CASE("a program that cannot be started is an error naming it, and leaves no child") {
  try {
    spawn_process("/nonexistent/troupe-no-such-program", {"run"});
    FAIL("spawn_process started a program that does not exist");
  } catch (const std::system_error& e) {
    CHECK(std::string{e.what()}.find("/nonexistent/troupe-no-such-program") != std::string::npos);
    CHECK(e.code().value() == ENOENT);
  }
  spawn_options unwritable;
  unwritable.output = "/nonexistent-directory/out.txt";
  CHECK_THROWS_AS(spawn_process("/bin/true", {}, unwritable), std::system_error);
  CHECK_THROWS_AS(wait_for_exit(::getpid()), std::system_error);  // not our child
}

TEST_CASE("spawning runs no fork handlers in the parent, the locks of other threads stay theirs") {
  // fork() runs every pthread_atfork handler (OpenBLAS shuts its thread pool down in one)
  // and copies the locks other threads hold; a child that allocates before exec can then
  // wait forever. posix_spawn does neither.
  static bool registered = false;
  if (!registered) {
    REQUIRE(::pthread_atfork(count_fork_handler, nullptr, nullptr) == 0);
    registered = true;
  }
  fork_handlers_run = 0;
  CHECK(wait_for_exit(spawn_process("/bin/true", {})) == 0);
  CHECK(fork_handlers_run.load() == 0);
  // The handler is real: a fork runs it.
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  REQUIRE(child > 0);
  CHECK(wait_for_exit(child) == 0);
  CHECK(fork_handlers_run.load() == 1);
}

TEST_CASE("own_executable is this test binary") {
  auto self = own_executable();
  CHECK(self.find("troupe_tests") != std::string::npos);
  CHECK(::access(self.c_str(), X_OK) == 0);
}
