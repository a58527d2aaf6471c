// cluster_protocol.hpp: what the pieces of a run over several nodes share: the atoms of
// their messages, what a proof of the secret covers besides it, and small helpers.
// Internal to actors/session/ (the gatekeeper, the node watch, the gloo store, the
// coordinator's gate and a worker's link); the Notes on joining and TLS are in cluster.cpp.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <iomanip>
#include <sstream>
#include <string>

#include "actors/session/cluster.hpp"
#include "runtime/net/secret.hpp"
#include "troupe/error.hpp"
#include "troupe/exit_code.hpp"

namespace troupe::node_protocol {

using hello_atom = caf::atom_constant<caf::atom("hello")>;
using prove_atom = caf::atom_constant<caf::atom("prove")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using all_atom = caf::atom_constant<caf::atom("alljoined")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using wire_atom = caf::atom_constant<caf::atom("wire")>;
using wired_atom = caf::atom_constant<caf::atom("wired")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using done_atom = caf::atom_constant<caf::atom("rundone")>;
using clock_atom = caf::atom_constant<caf::atom("clock")>;
using trace_atom = caf::atom_constant<caf::atom("trace")>;
using signal_poll_atom = caf::atom_constant<caf::atom("sigpoll")>;

using clock = std::chrono::steady_clock;

inline std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

// A refusal carries its text and the exit code it means: bad input (another config, a
// wrong secret) or a failed run (a node that never came).
inline caf::error refusal(std::string why, exit_code code = exit_code::bad_input) {
  return caf::make_error(caf::sec::runtime_error, std::move(why),
                         static_cast<std::int32_t>(exit_status(code)));
}

// The error as a user_error: a refusal's text and code, or CAF's rendering of any other
// error (a failed run).
inline user_error error_of(caf::actor_system& system, const caf::error& error) {
  const auto& context = error.context();
  if (error.category() == caf::atom("system") &&
      error.code() == static_cast<std::uint8_t>(caf::sec::runtime_error) &&
      context.match_elements<std::string, std::int32_t>())
    return user_error(context.get_as<std::string>(0),
                      static_cast<exit_code>(context.get_as<std::int32_t>(1)));
  return user_error(system.render(error), exit_code::run_failed);
}

// What the two ends of a proof agree on besides the secret.
inline std::string proof_context(int rank, const net::config_identity& identity) {
  return "rank=" + std::to_string(rank) + ";config=" + identity.config_hash +
         ";plugins=" + identity.plugins_hash;
}

inline std::string fresh_nonce() { return net::sha256_hex(net::random_nonce(32)); }

// The key of the proofs: the shared secret, or for a run without one (loopback only, see
// cluster_from_environment) a fixed word, so the exchange is the same and a node with a
// secret still refuses a coordinator without one (and the reverse).
inline std::string proof_key(const cluster_node& node) {
  return node.secret.value_or("troupe: no shared secret");
}

inline std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::setprecision(3) << seconds << " s";
  return out.str();
}

inline bool is_loopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1" ||
         address.rfind("127.", 0) == 0;
}

/// node0's gatekeeper (gatekeeper.cpp): answers a worker's hello, proof and join (Note
/// [who may claim a rank]), and the session's wait for every worker.
caf::actor spawn_gatekeeper(caf::actor_system& system, cluster_node node, caf::actor trainer,
                            caf::actor writer, caf::actor store);

/// node0's watch over the joined workers (node_watch.cpp): a lost node is told to the
/// trainer (node_lost_atom); (get_atom) -> the ranks lost so far.
caf::actor spawn_node_watch(caf::actor_system& system, joined_cluster joined, caf::actor trainer,
                            double heartbeat, double node_timeout);

/// node0's gloo rendezvous store (gloo_store.cpp), which cluster_store reaches.
caf::actor spawn_gloo_store(caf::actor_system& system);

}  // namespace troupe::node_protocol
