// front_door.hpp: node0's port, where a peer proves the shared secret before CAF reads a
// byte from it (Note [the front door] in front_door.cpp), and a worker's knock on it.
//
//   net::front_door door{settings, [&](unique_fd socket, const std::string& peer) {
//     /* the peer proved the secret: hand the socket to CAF */ }};
//   // a worker:
//   auto knocked = net::knock("127.0.0.1", 29500, secret, deadline);  // .socket, or .failure
//
// Not here: CAF (actors/session/cluster_system.cpp hands the sockets that pass to CAF's
// BASP broker), TLS, the gatekeeper's own proof (which binds the rank and the config).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/unique_fd.hpp"

namespace troupe::net {

/// The first 16 bytes each side sends: a peer that is not a troupe node is told apart at
/// once, before any proof.
inline constexpr std::string_view door_magic{"troupe-door/1\r\n\n", 16};
/// What both proofs are bound to (secret.hpp's proof `context`): a proof made for the
/// gatekeeper's exchange does not pass here, nor the reverse.
inline constexpr std::string_view door_context = "troupe front door";
/// What node0 sends first: door_magic and its nonce.
inline constexpr std::size_t door_greeting_bytes = 16 + 32;
/// What the worker answers: door_magic, its nonce and its proof (64 hex digits).
inline constexpr std::size_t door_answer_bytes = 16 + 32 + 64;
/// node0's proof, its last bytes before CAF's.
inline constexpr std::size_t door_reply_bytes = 64;
/// What node0 sends instead of its proof to a peer whose proof is wrong, before it closes
/// the connection, so that a worker given another secret stops at once rather than
/// retrying (door_reply_bytes long; a connection closed without it may have been one too
/// many, and is worth another try).
inline constexpr std::string_view door_refusal{
    "troupe-door/1 refused: the proof of the shared secret is wrong.\n", 64};

/// The server's side of one connection's proof, without a socket: what node0 sends, what it
/// reads (no byte past the worker's answer) and its verdict. The front door runs one per
/// connection; the fuzzer feeds it (tests/fuzz/fuzz_door.cpp).
class door_handshake {
 public:
  enum class state { reading, admitted, refused };

  /// `nonce`: door_greeting_bytes - 16 random bytes (random_nonce(32)).
  door_handshake(std::string secret, std::string nonce);

  /// What node0 sends as soon as it accepts: door_magic and the nonce.
  std::string greeting() const;
  /// How many bytes the answer still lacks (0 once decided).
  std::size_t wanted() const;
  /// Takes the next bytes of the peer's answer (at most wanted()); decides when the answer
  /// is whole, or at once when its first 16 bytes are not door_magic.
  state take(std::string_view bytes);
  state current() const { return state_; }
  /// Once admitted: node0's own proof, to send before the socket goes to CAF; once
  /// refused for a wrong proof: door_refusal; else empty.
  const std::string& reply() const { return reply_; }
  /// Once refused: why, for node0's log ("its first bytes are not ...").
  const std::string& why() const { return why_; }
  /// The bytes taken so far.
  std::size_t received() const { return answer_.size(); }

 private:
  std::string secret_;
  std::string nonce_;
  std::string answer_;
  std::string reply_;
  std::string why_;
  state state_ = state::reading;
};

/// Where and how node0's front door listens.
struct door_settings {
  std::string listen = "127.0.0.1";  // an address of this machine, or 0.0.0.0 / ::
  int port = 0;                      // 0: a free port (front_door::port says which)
  std::string secret;
  /// A peer must have proven the secret this long after its connection was accepted.
  double handshake_seconds = 5;
  /// Connections proving the secret at once; one more closes the oldest of them.
  std::size_t pending_limit = 64;
  /// A line for node0's log (refused peers, rate-limited); none: stderr.
  std::function<void(const std::string&)> log;
};

/// node0's listening socket and the thread that runs each connection's proof (Note [the
/// front door]). A connection that passes is given to `admit` (on the door's thread), with
/// its peer's address; every other is closed and named in the log. Stops and closes
/// every connection still proving when it goes.
class front_door {
 public:
  using admit_fn = std::function<void(unique_fd socket, const std::string& peer)>;

  /// Listens at once. Throws user_error saying why it cannot (an address that is not this
  /// machine's, a port in use), naming [cluster] listen and port.
  front_door(door_settings settings, admit_fn admit);
  ~front_door();
  front_door(const front_door&) = delete;
  front_door& operator=(const front_door&) = delete;

  /// The port it listens on.
  int port() const;
  /// Connections admitted and refused so far.
  std::uint64_t admitted() const;
  std::uint64_t refused() const;

  struct state;

 private:
  std::unique_ptr<state> state_;
};

/// What a worker's knock on node0's door came to.
struct knock_result {
  unique_fd socket{-1};   // the connection, both proofs done: the next bytes are CAF's
  bool answered = false;  // something accepted the TCP connection
  bool refused = false;   // node0 said this node's proof is wrong (door_refusal)
  std::string failure;    // why not, when socket is none
};

/// Connects to host:port and proves the secret to node0's front door, which proves it back;
/// by `deadline` (and within handshake_seconds of the connect). Never throws for the
/// network's reasons: they are in the result.
knock_result knock(const std::string& host, int port, const std::string& secret,
                   std::chrono::steady_clock::time_point deadline, double handshake_seconds = 5);

}  // namespace troupe::net
