// front_door_test.cpp: node0's front door (runtime/net/front_door.hpp, Note [the front
// door]) on loopback sockets, without CAF: the handshake's verdicts, a knock with and
// without the secret, no byte read past the proof, the deadline for a silent or trickling
// peer, the bound on connections proving at once, and the log's rate limit.
#include "runtime/net/front_door.hpp"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/secret.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::test::contains;

namespace {

using door_test_clock = std::chrono::steady_clock;

// The door's log lines and admitted sockets, as a test reads them.
struct door_watch {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> lines;
  std::vector<unique_fd> admitted;

  door_settings settings(const std::string& secret) {
    door_settings s;
    s.secret = secret;
    s.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
      changed.notify_all();
    };
    return s;
  }
  front_door::admit_fn admit() {
    return [this](unique_fd socket, const std::string&) {
      std::lock_guard<std::mutex> lock(mutex);
      admitted.push_back(std::move(socket));
      changed.notify_all();
    };
  }
  // Waits up to 10 s for `ready` (under the lock).
  template <class F>
  bool wait(F ready) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(10), ready);
  }
  std::string log() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const auto& line : lines)
      out += line + "\n";
    return out;
  }
};

// A plain TCP connection to the door on loopback.
unique_fd connect_raw(int port) {
  unique_fd socket{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  REQUIRE(socket.get() >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  REQUIRE(::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return socket;
}

// Reads exactly `size` bytes (10 s at most).
std::string read_bytes(int socket, std::size_t size) {
  std::string out;
  char buffer[256];
  while (out.size() < size) {
    pollfd fd{socket, POLLIN, 0};
    REQUIRE(::poll(&fd, 1, 10000) == 1);
    const auto got = ::recv(socket, buffer, std::min(sizeof buffer, size - out.size()), 0);
    REQUIRE(got > 0);
    out.append(buffer, static_cast<std::size_t>(got));
  }
  return out;
}

// Whether the peer closed `socket` within `seconds` (what it sent before is read and
// dropped).
bool closed_within(int socket, double seconds) {
  const auto until = door_test_clock::now() + std::chrono::duration_cast<door_test_clock::duration>(
                                                  std::chrono::duration<double>(seconds));
  char buffer[256];
  while (door_test_clock::now() < until) {
    pollfd fd{socket, POLLIN, 0};
    if (::poll(&fd, 1, 50) == 1) {
      const auto got = ::recv(socket, buffer, sizeof buffer, 0);
      if (got <= 0)
        return true;
    }
  }
  return false;
}

// The answer that proves `secret` to a door that greeted with `greeting`.
std::string answer_to(const std::string& greeting, const std::string& secret) {
  const auto theirs = greeting.substr(door_magic.size());
  const std::string ours(32, 'w');
  return std::string(door_magic) + ours + proof(secret, worker_role, theirs, ours, door_context);
}

door_test_clock::time_point in_seconds_from_now(double seconds) {
  return door_test_clock::now() + std::chrono::duration_cast<door_test_clock::duration>(
                                      std::chrono::duration<double>(seconds));
}

}  // namespace

TEST_CASE("the door's handshake admits the right answer and refuses the rest at once") {
  const std::string nonce(32, 'n');
  door_handshake reference{"secret", nonce};
  const auto greeting = reference.greeting();
  REQUIRE(greeting.size() == door_greeting_bytes);
  CHECK(greeting.substr(0, 16) == door_magic);
  const auto right = answer_to(greeting, "secret");
  REQUIRE(right.size() == door_answer_bytes);
  SUBCASE("the right answer, a byte at a time: admitted, with node0's proof") {
    door_handshake shake{"secret", nonce};
    for (std::size_t k = 0; k + 1 < right.size(); ++k) {
      CHECK(shake.wanted() == right.size() - k);
      CHECK(shake.take(right.substr(k, 1)) == door_handshake::state::reading);
    }
    CHECK(shake.take(right.substr(right.size() - 1)) == door_handshake::state::admitted);
    CHECK(shake.wanted() == 0);
    CHECK(verify_proof("secret", coordinator_role, std::string(32, 'w'), nonce, door_context,
                       shake.reply()));
  }
  SUBCASE("more bytes than asked for: only the answer's are taken") {
    door_handshake shake{"secret", nonce};
    CHECK(shake.take(right + "BASP bytes") == door_handshake::state::admitted);
    CHECK(shake.received() == door_answer_bytes);
  }
  SUBCASE("another secret: refused, and told so") {
    door_handshake shake{"secret", nonce};
    CHECK(shake.take(answer_to(greeting, "other")) == door_handshake::state::refused);
    CHECK(contains(shake.why(), "its proof of the secret is wrong"));
    CHECK(shake.reply() == door_refusal);
  }
  SUBCASE("a proof for another nonce (a replay): refused") {
    door_handshake shake{"secret", std::string(32, 'm')};
    CHECK(shake.take(right) == door_handshake::state::refused);
  }
  SUBCASE("the first wrong byte ends it, named; a TLS handshake is recognised") {
    door_handshake basp{"secret", nonce};
    CHECK(basp.take(std::string("\x01\x00\x00\x00", 4)) == door_handshake::state::refused);
    CHECK(contains(basp.why(), "its first bytes (01 00 00 00) are not a troupe node's"));
    CHECK(basp.reply().empty());
    door_handshake tls{"secret", nonce};
    CHECK(tls.take(std::string("\x16\x03\x01", 3)) == door_handshake::state::refused);
    CHECK(contains(tls.why(), "a TLS handshake: is [cluster] tls on at that node"));
  }
}

TEST_CASE("a knock with the secret passes the door both ways, and the next bytes are CAF's") {
  door_watch watch;
  front_door door{watch.settings("s3cret"), watch.admit()};
  REQUIRE(door.port() > 0);
  auto knocked = knock("127.0.0.1", door.port(), "s3cret", in_seconds_from_now(10));
  INFO(knocked.failure);
  REQUIRE(knocked.socket.get() >= 0);
  REQUIRE(watch.wait([&] { return watch.admitted.size() == 1; }));
  CHECK(door.admitted() == 1);
  CHECK(door.refused() == 0);
  // Both ends are the caller's now, with nothing of the door's left in between.
  const int server = watch.admitted[0].get();
  CHECK(::send(server, "from node0", 10, 0) == 10);
  CHECK(read_bytes(knocked.socket.get(), 10) == "from node0");
  CHECK(::send(knocked.socket.get(), "from node1", 10, 0) == 10);
  CHECK(read_bytes(server, 10) == "from node1");
}

TEST_CASE("the door reads no byte past the answer, even when the peer sends them at once") {
  door_watch watch;
  front_door door{watch.settings("s3cret"), watch.admit()};
  auto raw = connect_raw(door.port());
  const auto greeting = read_bytes(raw.get(), door_greeting_bytes);
  const auto both = answer_to(greeting, "s3cret") + "first BASP bytes";
  REQUIRE(::send(raw.get(), both.data(), both.size(), 0) == static_cast<ssize_t>(both.size()));
  const auto reply = read_bytes(raw.get(), door_reply_bytes);
  CHECK(verify_proof("s3cret", coordinator_role, std::string(32, 'w'),
                     greeting.substr(door_magic.size()), door_context, reply));
  REQUIRE(watch.wait([&] { return watch.admitted.size() == 1; }));
  CHECK(read_bytes(watch.admitted[0].get(), 16) == "first BASP bytes");
}

TEST_CASE("a wrong secret is refused at once on both sides, and node0's log names the peer") {
  door_watch watch;
  front_door door{watch.settings("s3cret"), watch.admit()};
  const auto start = door_test_clock::now();
  auto knocked = knock("127.0.0.1", door.port(), "wrong", in_seconds_from_now(10));
  CHECK(door_test_clock::now() - start < std::chrono::seconds(3));
  CHECK(knocked.socket.get() < 0);
  CHECK(knocked.answered);
  CHECK(knocked.refused);
  CHECK(contains(knocked.failure, "node0 refused this node's proof of the secret"));
  REQUIRE(watch.wait([&] { return !watch.lines.empty(); }));
  CHECK(contains(watch.log(), "troupe: node0 closed a connection from 127.0.0.1:"));
  CHECK(contains(watch.log(), "its proof of the secret is wrong"));
  CHECK(door.refused() == 1);
  CHECK(watch.admitted.empty());
  // A door that is not one: a listener that sends something else, or nothing.
  auto other = knock("127.0.0.1", door.port() == 1 ? 2 : 1, "s3cret", in_seconds_from_now(2));
  CHECK(other.socket.get() < 0);
  CHECK_FALSE(other.answered);
}

TEST_CASE("a peer that says nothing, or trickles its bytes, is closed at the deadline") {
  door_watch watch;
  auto settings = watch.settings("s3cret");
  settings.handshake_seconds = 0.5;
  front_door door{settings, watch.admit()};
  auto silent = connect_raw(door.port());
  auto trickle = connect_raw(door.port());
  read_bytes(trickle.get(), door_greeting_bytes);
  std::thread slow([&] {  // the magic, a byte every 100 ms: never whole before 1.6 s
    for (std::size_t k = 0; k < door_magic.size(); ++k) {
      if (::send(trickle.get(), &door_magic[k], 1, MSG_NOSIGNAL) != 1)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const auto start = door_test_clock::now();
  CHECK(closed_within(silent.get(), 5));
  CHECK(closed_within(trickle.get(), 5));
  CHECK(door_test_clock::now() - start < std::chrono::seconds(3));
  slow.join();
  REQUIRE(watch.wait([&] { return watch.lines.size() >= 2; }));
  CHECK(contains(watch.log(), "it did not prove it within 0.5 s (0 of 112 bytes)"));
  CHECK(door.refused() == 2);
}

TEST_CASE("a flood of connections holds a bounded number open, and a worker still gets in") {
  door_watch watch;
  auto settings = watch.settings("s3cret");
  settings.pending_limit = 8;
  std::vector<unique_fd> flood;
  const auto start = door_test_clock::now();
  {
    front_door door{settings, watch.admit()};
    for (int k = 0; k < 300; ++k)
      flood.push_back(connect_raw(door.port()));
    // All but the newest eight are closed by the door, oldest first.
    int closed = 0;
    for (auto& socket : flood)
      closed += closed_within(socket.get(), 0.2) ? 1 : 0;
    CHECK(closed >= 300 - 8);
    auto knocked = knock("127.0.0.1", door.port(), "s3cret", in_seconds_from_now(10));
    INFO(knocked.failure);
    CHECK(knocked.socket.get() >= 0);
    CHECK(door.refused() >= 300 - 8);
    // The log: five lines a window of 10 s, the rest counted.
    std::lock_guard<std::mutex> lock(watch.mutex);
    if (door_test_clock::now() - start < std::chrono::seconds(9))
      CHECK(watch.lines.size() == 5);
  }
  // Closing the door says how many it did not name.
  INFO(watch.log());
  if (door_test_clock::now() - start < std::chrono::seconds(9))
    CHECK(watch.lines.size() == 6);
  CHECK(contains(watch.lines.back(), "more connections that did not prove the shared secret"));
  CHECK(contains(watch.lines.back(), "(in 10 s, from 127.0.0.1)"));
  CHECK(contains(watch.lines[0], "more than 8 connections were proving it at once"));
}

TEST_CASE("a door that cannot listen says where and why") {
  door_watch watch;
  front_door first{watch.settings("s3cret"), watch.admit()};
  auto settings = watch.settings("s3cret");
  settings.port = first.port();
  CHECK_THROWS_WITH_AS(front_door(settings, watch.admit()),
                       doctest::Contains("is another run using that port?"), user_error);
  settings.listen = "bogus.invalid";
  CHECK_THROWS_WITH_AS(front_door(settings, watch.admit()),
                       doctest::Contains("cannot listen on 'bogus.invalid' port"), user_error);
}
