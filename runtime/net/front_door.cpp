// front_door.cpp: node0's front door and a worker's knock (front_door.hpp).
#include "runtime/net/front_door.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <vector>

#include "runtime/base/limits.hpp"
#include "runtime/net/secret.hpp"
#include "troupe/error.hpp"

namespace troupe::net {

// Note [the front door]
// CAF 0.17's network layer (BASP) trusts the first bytes of a connection: a 32-byte header
// without its payload crashed node0, one that claimed 4 GiB made it allocate that much, a
// forged message reached any actor by its number before any handshake, and idle
// connections were neither limited nor closed. So CAF no longer accepts on node0's port:
// troupe listens there itself, and a connection reaches CAF only after its peer proved the
// shared secret on the door's own thread:
//
//   node0 -> peer   door_magic, nonce S (32 random bytes)
//   peer  -> node0  door_magic, nonce W, proof(secret, "worker", S, W, door_context)
//   node0 -> peer   proof(secret, "coordinator", W, S, door_context), if the peer's holds
//
// Then node0 gives the socket to CAF's BASP broker as if CAF had accepted it, and the worker
// gives its end to CAF as if CAF had connected it (actors/session/cluster_system.cpp). node0
// reads exactly the answer's door_answer_bytes and no more, so no byte of BASP is read
// here; the worker sends no BASP byte before node0's proof. The proofs are HMAC-SHA256
// (secret.cpp, Note [proving the secret]) compared in constant time; their roles keep one
// side's proof from passing for the other's, and the fresh nonces keep a recorded exchange
// from being replayed. node0 proves the secret only to a peer that proved it first, so the
// door answers no one's questions.
//
// Why a door of troupe's own rather than the other ways (issue 53). TLS on by default, with
// certificates derived from the secret, keeps peers without the secret out of BASP too, but
// CAF's openssl module accepts every TCP connection and holds it in its handshake with
// neither a limit nor a deadline (idle and slow peers would still use up node0's
// descriptors), and over TCP it halves DP2's rate (docs/benchmarks.md). Patching CAF
// 0.17.6 (Debian's source) would mean building CAF in every build and keeping a fork of
// its broker. The door is a few hundred lines that need nothing of CAF, so they are tested
// and fuzzed alone (tests/runtime/net/front_door_test.cpp, tests/fuzz/fuzz_door.cpp), it
// costs one round trip when a node joins and nothing after, and TLS stays an option that
// runs inside it.
//
// Bounds: a peer has handshake_seconds from its accept to prove the secret, however it
// trickles its bytes (a peer that sends one a second is closed at the deadline); at most
// pending_limit connections prove at once, and one more closes the oldest of them (a real
// worker answers within a round trip, so it is never the oldest for long), so a flood of
// connections costs that many descriptors and a few hundred bytes each. Each refusal is
// named in node0's log with the peer's address, five in a window of ten seconds, then one
// line with how many more and a few of their addresses.
//
// Not covered: the traffic after the proofs. Without [cluster] tls a host on the path can
// read, drop or alter it, and could take over a connection once it is admitted; and a
// worker that connects to a man in the middle lets it relay the worker's answer to node0
// and so open an admitted connection (with tls, the TLS handshake inside then fails
// without a certificate). And a peer
// that keeps the door's slots full can delay a worker's join (the worker retries until
// [cluster] timeout). The gatekeeper's own proof (Note [joining a run] in
// actors/session/cluster.cpp) still binds the rank and the config's hash.

namespace {

using door_clock = std::chrono::steady_clock;

constexpr std::size_t door_nonce_bytes = door_greeting_bytes - door_magic.size();

// The peer's first bytes, for the log: hex, and what they look like when that tells.
std::string describe_first_bytes(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (std::size_t k = 0; k < std::min<std::size_t>(bytes.size(), 8); ++k) {
    const auto byte = static_cast<unsigned char>(bytes[k]);
    hex += (hex.empty() ? "" : " ");
    hex += digits[byte >> 4];
    hex += digits[byte & 15];
  }
  std::string out =
      "its first bytes (" + hex + (bytes.size() > 8 ? " ..." : "") + ") are not a troupe node's";
  if (bytes.size() >= 2 && bytes[0] == '\x16' && bytes[1] == '\x03')
    out += " (a TLS handshake: is [cluster] tls on at that node and not here?)";
  return out;
}

}  // namespace

door_handshake::door_handshake(std::string secret, std::string nonce)
    : secret_(std::move(secret)), nonce_(std::move(nonce)) {
  TROUPE_CHECK(nonce_.size() == door_nonce_bytes, "a door nonce of " << nonce_.size() << " bytes");
}

std::string door_handshake::greeting() const { return std::string(door_magic) + nonce_; }

std::size_t door_handshake::wanted() const {
  return state_ == state::reading ? door_answer_bytes - answer_.size() : 0;
}

door_handshake::state door_handshake::take(std::string_view bytes) {
  if (state_ != state::reading)
    return state_;
  answer_.append(bytes.substr(0, wanted()));
  const auto magic_seen = std::min(answer_.size(), door_magic.size());
  if (answer_.compare(0, magic_seen, door_magic.substr(0, magic_seen)) != 0) {
    why_ = describe_first_bytes(answer_);
    return state_ = state::refused;
  }
  if (answer_.size() < door_answer_bytes)
    return state_;
  const std::string_view answer{answer_};
  const auto nonce = answer.substr(door_magic.size(), door_nonce_bytes);
  const auto claimed = answer.substr(door_greeting_bytes);
  if (!verify_proof(secret_, worker_role, nonce_, nonce, door_context, claimed)) {
    why_ = "its proof of the secret is wrong (a node given another secret?)";
    reply_ = door_refusal;
    return state_ = state::refused;
  }
  reply_ = proof(secret_, coordinator_role, nonce, nonce_, door_context);
  return state_ = state::admitted;
}

namespace {

// "127.0.0.1:41234", "[::1]:41234".
std::string describe_address(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(address, length, host, sizeof host, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  return address->sa_family == AF_INET6 ? "[" + std::string(host) + "]:" + service
                                        : std::string(host) + ":" + service;
}

// "5 s", "0.5 s".
std::string in_seconds(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", value);
  return text;
}

std::string host_of(const std::string& peer) { return peer.substr(0, peer.rfind(':')); }

// Sends all of `bytes` now or not at all: what the door sends (48 and 64 bytes) fits into
// the socket's buffer of a connection that has sent nothing else.
bool send_now(int socket, std::string_view bytes) {
  return ::send(socket, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(bytes.size());
}

void no_delay(int socket) {
  int one = 1;
  ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Node0's log of refused peers, five lines a window and then a count (Note [the front door]).
class refusal_log {
 public:
  static constexpr int shown_per_window = 5;
  static constexpr auto window = std::chrono::seconds(10);

  explicit refusal_log(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}
  ~refusal_log() { flush(); }

  void refuse(const std::string& peer, const std::string& why, door_clock::time_point now) {
    roll(now);
    if (shown_ < shown_per_window) {
      ++shown_;
      sink_("troupe: node0 closed a connection from " + peer +
            " that did not prove the shared secret: " + why);
      return;
    }
    ++hidden_;
    const auto host = host_of(peer);
    if (hidden_hosts_.size() < 3)
      hidden_hosts_.insert(host);
    else if (hidden_hosts_.count(host) == 0)
      more_hosts_ = true;
  }
  void line(const std::string& text) { sink_(text); }
  // Starts a new window once this one is over, saying how many it did not show.
  void roll(door_clock::time_point now) {
    if (now - window_start_ < window)
      return;
    flush();
    window_start_ = now;
    shown_ = 0;
  }
  // When roll has something to say.
  door_clock::time_point next_roll() const {
    return hidden_ == 0 ? door_clock::time_point::max() : window_start_ + window;
  }

 private:
  void flush() {
    if (hidden_ == 0)
      return;
    std::string hosts;
    for (const auto& host : hidden_hosts_)
      hosts += (hosts.empty() ? "" : ", ") + host;
    sink_("troupe: node0 closed " + std::to_string(hidden_) +
          " more connections that did not prove the shared secret (in 10 s, from " + hosts +
          (more_hosts_ ? " and others" : "") + ")");
    hidden_ = 0;
    hidden_hosts_.clear();
    more_hosts_ = false;
  }

  std::function<void(const std::string&)> sink_;
  door_clock::time_point window_start_{};
  int shown_ = 0;
  std::uint64_t hidden_ = 0;
  std::set<std::string> hidden_hosts_;  // the first three
  bool more_hosts_ = false;
};

// One connection proving the secret.
struct pending_peer {
  unique_fd socket;
  std::string peer;
  door_clock::time_point deadline;
  door_handshake shake;
};

std::string cannot_listen(const std::string& address, int port, const std::string& why,
                          bool not_here) {
  return "the coordinator cannot listen on " + quote_user_text(address) + " port " +
         std::to_string(port) + ": " + quote_user_text(why) +
         (not_here ? "; is it an address of this machine? ([cluster] listen or TROUPE_LISTEN)"
                   : "; is another run using that port? Choose another with [cluster] port or "
                     "MASTER_PORT");
}

// A listening socket on address:port; `bound` is its port.
unique_fd listen_on(const std::string& address, int port, int& bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0)
    throw user_error(cannot_listen(address, port, ::gai_strerror(rc), true));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard{found, ::freeaddrinfo};
  int error = EADDRNOTAVAIL;
  for (const auto* a = found; a != nullptr; a = a->ai_next) {
    unique_fd socket{
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol)};
    int one = 1;
    if (socket.get() < 0 ||
        ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(socket.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(socket.get(), 1024) != 0) {
      error = errno;
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    ::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&local), &length);
    bound =
        ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port
                                          : reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    return socket;
  }
  throw user_error(cannot_listen(address, port, std::strerror(error),
                                 error == EADDRNOTAVAIL || error == EAFNOSUPPORT));
}

}  // namespace

struct front_door::state {
  door_settings settings;
  admit_fn admit;
  unique_fd listener{-1};
  unique_fd wake{-1};  // an eventfd: written when the door closes
  int port = 0;
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> refused{0};
  door_clock::time_point paused_until{};  // the listener rests after running out of fds
  std::thread thread;

  void run();
  bool serve(std::deque<pending_peer>& pending, refusal_log& log);
  void read_answer(pending_peer& p, refusal_log& log);
  void accept_new(std::deque<pending_peer>& pending, refusal_log& log);
  void refuse(pending_peer& p, const std::string& why, refusal_log& log) {
    ++refused;
    log.refuse(p.peer, why, door_clock::now());
    p.socket = unique_fd{-1};
  }
};

front_door::front_door(door_settings settings, admit_fn admit) : state_(new state) {
  if (!settings.log)
    settings.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  state_->listener = listen_on(settings.listen, settings.port, state_->port);
  state_->wake = unique_fd{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  if (state_->wake.get() < 0)
    throw user_error(std::string("the coordinator's front door has no eventfd: ") +
                     std::strerror(errno));
  state_->settings = std::move(settings);
  state_->admit = std::move(admit);
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

front_door::~front_door() {
  const std::uint64_t one = 1;
  (void)!::write(state_->wake.get(), &one, sizeof one);
  state_->thread.join();
}

int front_door::port() const { return state_->port; }
std::uint64_t front_door::admitted() const { return state_->admitted; }
std::uint64_t front_door::refused() const { return state_->refused; }

void front_door::state::run() {
  std::deque<pending_peer> pending;
  refusal_log log{settings.log};
  try {
    while (serve(pending, log)) {
    }
  } catch (const std::exception& e) {  // no entropy for a nonce, say: the door stays shut
    log.line(std::string("troupe: node0's front door closed: ") + e.what());
  }
}

// One round of the door's loop: waits for the first of a connection, an answer's bytes, a
// deadline or the wake-up; false once woken.
bool front_door::state::serve(std::deque<pending_peer>& pending, refusal_log& log) {
  const auto now = door_clock::now();
  std::vector<pollfd> fds{{wake.get(), POLLIN, 0},
                          {now >= paused_until ? listener.get() : -1, POLLIN, 0}};
  auto next =
      std::min(log.next_roll(), now < paused_until ? paused_until : door_clock::time_point::max());
  for (const auto& p : pending) {
    fds.push_back({p.socket.get(), POLLIN, 0});
    next = std::min(next, p.deadline);
  }
  const int timeout =
      next == door_clock::time_point::max()
          ? -1
          : static_cast<int>(std::max<std::int64_t>(
                0, std::chrono::ceil<std::chrono::milliseconds>(next - now).count()));
  if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
    throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
  if (fds[0].revents != 0)
    return false;
  for (std::size_t k = 0; k < pending.size(); ++k)
    if (fds[k + 2].revents != 0)
      read_answer(pending[k], log);
  const auto after = door_clock::now();
  for (auto& p : pending)
    if (p.socket.get() >= 0 && after >= p.deadline)
      refuse(p,
             "it did not prove it within " + in_seconds(settings.handshake_seconds) + " (" +
                 std::to_string(p.shake.received()) + " of " + std::to_string(door_answer_bytes) +
                 " bytes)",
             log);
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [](const pending_peer& p) { return p.socket.get() < 0; }),
                pending.end());
  if ((fds[1].revents & POLLIN) != 0)
    accept_new(pending, log);
  log.roll(after);
  return true;
}

void front_door::state::read_answer(pending_peer& p, refusal_log& log) {
  char buffer[door_answer_bytes];
  const auto got = ::recv(p.socket.get(), buffer, p.shake.wanted(), 0);
  if (got < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      refuse(p, std::string("reading from it failed: ") + std::strerror(errno), log);
    return;
  }
  if (got == 0) {
    refuse(p,
           p.shake.received() == 0
               ? std::string("it closed the connection without a word")
               : "it closed the connection after " + std::to_string(p.shake.received()) +
                     " of the " + std::to_string(door_answer_bytes) + " bytes of a proof",
           log);
    return;
  }
  switch (p.shake.take({buffer, static_cast<std::size_t>(got)})) {
    case door_handshake::state::reading:
      return;
    case door_handshake::state::refused:
      if (!p.shake.reply().empty())
        (void)send_now(p.socket.get(), p.shake.reply());
      refuse(p, p.shake.why(), log);
      return;
    case door_handshake::state::admitted:
      break;
  }
  if (!send_now(p.socket.get(), p.shake.reply())) {
    refuse(p, "it proved the secret, then did not take node0's proof", log);
    return;
  }
  ++admitted;
  try {
    admit(std::move(p.socket), p.peer);
  } catch (const std::exception& e) {
    log.line("troupe: node0 could not hand the connection from " + p.peer +
             " to its network layer: " + e.what());
  }
  p.socket = unique_fd{-1};
}

void front_door::state::accept_new(std::deque<pending_peer>& pending, refusal_log& log) {
  for (int k = 0; k < 256; ++k) {  // then the answers get their turn
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    unique_fd socket{::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC)};
    const auto now = door_clock::now();
    if (socket.get() < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return;
      // Out of descriptors or memory: the oldest connection still proving makes room, and
      // the listener rests a moment instead of waking the loop for the same error.
      if (!pending.empty()) {
        refuse(pending.front(), "node0 ran out of descriptors, and it waited longest", log);
        pending.pop_front();
      }
      paused_until = now + std::chrono::milliseconds(100);
      return;
    }
    no_delay(socket.get());
    pending_peer p{std::move(socket),
                   describe_address(reinterpret_cast<const sockaddr*>(&address), length),
                   now + std::chrono::duration_cast<door_clock::duration>(
                             std::chrono::duration<double>(settings.handshake_seconds)),
                   door_handshake{settings.secret, random_nonce(door_nonce_bytes)}};
    if (pending.size() >= settings.pending_limit) {
      refuse(pending.front(),
             "more than " + std::to_string(settings.pending_limit) +
                 " connections were proving it at once, and it had waited longest",
             log);
      pending.pop_front();
    }
    if (!send_now(p.socket.get(), p.shake.greeting())) {
      refuse(p, std::string("node0 could not send it a greeting: ") + std::strerror(errno), log);
      continue;
    }
    pending.push_back(std::move(p));
  }
}

// ---- the worker's side ----

namespace {

// Waits for `events` on `socket` until `until`; false when the time is up.
bool wait_ready(int socket, short events, door_clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - door_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd fd{socket, events, 0};
    const int n = ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000000)));
    if (n > 0)
      return true;
    if (n < 0 && errno != EINTR)
      return false;
  }
}

// Reads exactly `size` bytes by `until`; "" when it did, else why not.
std::string read_all_of(int socket, std::size_t size, door_clock::time_point until,
                        std::string& out) {
  out.clear();
  char buffer[door_answer_bytes];
  while (out.size() < size) {
    if (!wait_ready(socket, POLLIN, until))
      return "no answer within the time left";
    const auto got = ::recv(socket, buffer, std::min(sizeof buffer, size - out.size()), 0);
    if (got == 0)
      return "the connection closed";
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return std::strerror(errno);
    if (got > 0)
      out.append(buffer, static_cast<std::size_t>(got));
  }
  return "";
}

// A TCP connection to host:port by `until`, or none with `failure` set.
unique_fd connect_by(const std::string& host, int port, door_clock::time_point until,
                     std::string& failure) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    failure = std::string("cannot resolve ") + quote_user_text(host) + ": " + ::gai_strerror(rc);
    return unique_fd{-1};
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard{found, ::freeaddrinfo};
  for (const auto* a = found; a != nullptr; a = a->ai_next) {
    unique_fd socket{
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol)};
    if (socket.get() < 0) {
      failure = std::strerror(errno);
      continue;
    }
    int error = ::connect(socket.get(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      if (!wait_ready(socket.get(), POLLOUT, until)) {
        failure = "the TCP connection did not open in time";
        continue;
      }
      socklen_t length = sizeof error;
      ::getsockopt(socket.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    }
    if (error == 0) {
      no_delay(socket.get());
      return socket;
    }
    failure = std::string("cannot connect to ") + host + ":" + std::to_string(port) + ": " +
              std::strerror(error);
  }
  return unique_fd{-1};
}

}  // namespace

knock_result knock(const std::string& host, int port, const std::string& secret,
                   door_clock::time_point deadline, double handshake_seconds) {
  knock_result out;
  unique_fd socket = connect_by(host, port, deadline, out.failure);
  if (socket.get() < 0)
    return out;
  out.answered = true;
  const auto until =
      std::min(deadline, door_clock::now() + std::chrono::duration_cast<door_clock::duration>(
                                                 std::chrono::duration<double>(handshake_seconds)));
  std::string greeting;
  if (auto why = read_all_of(socket.get(), door_greeting_bytes, until, greeting); !why.empty()) {
    out.failure = "node0 sent no greeting of troupe's front door (" + why +
                  "): is [cluster] tls on at node0 and not here, or is another program "
                  "listening on that port?";
    return out;
  }
  if (greeting.compare(0, door_magic.size(), door_magic) != 0) {
    out.failure =
        "node0's port answered with bytes that are not troupe's front door: does another "
        "program listen on that port?";
    return out;
  }
  const auto theirs = greeting.substr(door_magic.size());
  const auto ours = random_nonce(door_nonce_bytes);
  const auto answer =
      std::string(door_magic) + ours + proof(secret, worker_role, theirs, ours, door_context);
  if (!wait_ready(socket.get(), POLLOUT, until) ||
      ::send(socket.get(), answer.data(), answer.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(answer.size())) {
    out.failure = "node0 did not take this node's proof of the secret";
    return out;
  }
  std::string reply;
  if (auto why = read_all_of(socket.get(), door_reply_bytes, until, reply); !why.empty()) {
    out.failure =
        "node0 took this node's proof of the secret but sent none of its own (" + why + ")";
    return out;
  }
  if (reply == door_refusal) {
    out.refused = true;
    out.failure =
        "node0 refused this node's proof of the secret: is the secret (TROUPE_SECRET, "
        "TROUPE_SECRET_FILE or [cluster] secret_file) the same on every node?";
    return out;
  }
  if (!verify_proof(secret, coordinator_role, ours, theirs, door_context, reply)) {
    out.failure =
        "node0 could not prove the shared secret: is it another run's node0, or was it given "
        "another secret?";
    return out;
  }
  out.socket = std::move(socket);
  return out;
}

}  // namespace troupe::net
