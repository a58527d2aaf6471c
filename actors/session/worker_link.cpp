// worker_link.cpp: a worker's side of a run over several nodes (cluster.hpp): connect to
// node0 within the timeout, prove the secret, measure the clocks, join with this node's
// actors, then serve node0 (the roster, heartbeats, its trace) until the run is over.
#include <unistd.h>
#include <caf/io/all.hpp>

#include <algorithm>
#include <cstdio>
#include <csignal>
#include <set>
#include <thread>

#include "actors/session/cluster.hpp"
#include "actors/session/cluster_protocol.hpp"
#include "actors/trainer/interrupts.hpp"
#include "troupe/device.hpp"
#include "troupe/trace.hpp"

namespace troupe {

using namespace node_protocol;

namespace {

// The coordinator's gatekeeper, through node0's front door and CAF's BASP broker (inside
// TLS with [cluster] tls), by `deadline` at the latest (Note [TLS between nodes]); none,
// and `failure` says why and `answered` whether the TCP connection opened (something
// listens there). Throws user_error when node0 refused this node's proof of the secret.
caf::actor connect_to_gate(caf::actor_system& system, const cluster_node& node,
                           clock::time_point deadline, std::string& failure, bool& answered) {
  const auto port = static_cast<std::uint16_t>(node.coordinator_port);
  const auto wait =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()),
               std::chrono::milliseconds(200));
  auto knocked = net::knock(node.coordinator_host, node.coordinator_port, node.secret.value(),
                            clock::now() + wait);
  answered = knocked.answered;
  if (knocked.refused)
    throw user_error("node" + std::to_string(node.rank) +
                     " could not prove the shared secret to node0 at " + node.coordinator_host +
                     ":" + std::to_string(node.coordinator_port) + ": " + knocked.failure);
  if (knocked.socket.get() < 0) {
    failure = knocked.failure;
    return {};
  }
  const bool tls = node.tls.has_value();
  auto gate = connect_through_door(system, std::move(knocked.socket), port, wait, tls);
  if (gate)
    return *gate;
  // node0 proved the secret, so it is this run's: what failed is CAF's handshake, or TLS's.
  if (gate.error() == caf::sec::request_timeout)
    failure = "node0 admitted this node, but no handshake completed within " +
              seconds_text(std::chrono::duration<double>(wait).count()) +
              (tls ? " (is node0 without [cluster] tls?)"
                   : " (does node0 have [cluster] tls, and this node not?)");
  else if (tls)
    failure = "the TLS handshake failed (" + system.render(gate.error()) +
              "): node0 speaks no TLS, or a certificate does not verify against [cluster] "
              "ca_file";
  else
    failure = "node0 closed the connection during CAF's handshake (" + system.render(gate.error()) +
              "): does node0 have [cluster] tls, and this node not?";
  return {};
}

}  // namespace

worker_link::worker_link(caf::actor_system& system, const cluster_node& node)
    : system_(system), node_(node) {
  const auto deadline = clock::now() + milliseconds(node.timeout);
  std::string last_error;
  std::string handshake_error;  // the last from a node0 that answered: the telling one,
                                // should node0 have ended by the last attempt
  for (;;) {
    bool answered = false;
    gate_ = connect_to_gate(system, node, deadline, last_error, answered);
    if (gate_)
      break;
    if (answered)
      handshake_error = last_error;
    if (const int signal = interrupt_signal(); signal != 0)  // as a run would stop
      throw user_error("node" + std::to_string(node.rank) + " was interrupted (" +
                           (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                           ") while reaching the coordinator",
                       signal == SIGTERM ? exit_code::terminated : exit_code::interrupted);
    if (clock::now() >= deadline)
      throw user_error("node" + std::to_string(node.rank) + " could not reach the coordinator at " +
                           node.coordinator_host + ":" + std::to_string(node.coordinator_port) +
                           " within " + seconds_text(node.timeout) + " ([cluster] timeout): " +
                           (handshake_error.empty()
                                ? last_error
                                : "it answered, but no handshake succeeded: " + handshake_error) +
                           "; start node0 there, or check [cluster] address and port "
                           "(or MASTER_ADDR and MASTER_PORT), and that [cluster] tls is the "
                           "same on every node",
                       exit_code::run_failed);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  caf::scoped_actor self{system};
  hello_msg hello;
  hello.rank = node.rank;
  hello.nodes = node.nodes;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  hello.host = host;
  hello.pid = static_cast<std::int32_t>(getpid());
  hello.config_hash = node.identity.config_hash;
  hello.plugins_hash = node.identity.plugins_hash;
  hello.plugins = node.identity.plugins;
  std::optional<user_error> failure;
  std::string challenge;
  auto wait = milliseconds(node.timeout);
  self->request(gate_, wait, hello_atom::value, hello)
      .receive([&](std::string& c) { challenge = std::move(c); },
               [&](caf::error& error) { failure = error_of(system, error); });
  if (failure)
    throw *failure;
  const auto context = proof_context(node.rank, node.identity);
  const std::string secret = proof_key(node);
  const auto nonce = fresh_nonce();
  self->request(gate_, wait, prove_atom::value, static_cast<std::int32_t>(node.rank), nonce,
                net::proof(secret, net::worker_role, challenge, nonce, context))
      .receive([&](welcome_msg& w) { welcome_ = std::move(w); },
               [&](caf::error& error) { failure = error_of(system, error); });
  if (failure)
    throw *failure;
  join_proof_ = net::proof(secret, net::worker_role, nonce, challenge, context);
  if (!net::verify_proof(secret, net::coordinator_role, nonce, challenge, context, welcome_.proof))
    throw user_error("the coordinator at " + node.coordinator_host + ":" +
                         std::to_string(node.coordinator_port) +
                         " could not prove the shared secret: not joining it",
                     exit_code::run_failed);
  // Note [clocks of nodes]
  // A trace merged from every node needs their clocks on one time line. Each round trip
  // asks node0 for its trace clock; with t0 and t1 this node's clock before and after,
  // node0's reading was taken at about (t0 + t1) / 2, off by at most half the round trip.
  // The shortest of 8 round trips gives the offset (CAF's messages are fast next to
  // clock drift over a run of minutes; the merged trace's metadata states the round trip).
  // node0 answers at once: a round trip that does not come back within node_timeout
  // means node0 went (a request over a dropped link is never answered), so the rest are
  // not asked, and the join that follows says so.
  double best = -1;
  for (int i = 0; i < 8; ++i) {
    auto t0 = trace::now_ns();
    std::int64_t theirs = 0;
    bool answered = false;
    self->request(gate_, milliseconds(node.node_timeout), clock_atom::value)
        .receive([&](std::int64_t t) { theirs = t, answered = true; }, [](caf::error&) {});
    auto t1 = trace::now_ns();
    if (!answered)
      break;
    if (best < 0 || t1 - t0 < best) {
      best = static_cast<double>(t1 - t0);
      offset_us_ = (static_cast<double>(theirs) - (static_cast<double>(t0) + t1) / 2) / 1000.0;
      rtt_us_ = best / 1000.0;
    }
  }
}

worker_link::~worker_link() = default;

int worker_link::serve(const roster& own, const std::function<void(const roster&)>& wire,
                       const std::function<std::string()>& trace_json) {
  caf::scoped_actor self{system_};
  self->monitor(gate_);
  std::optional<user_error> failure;
  // Answered at once (the roster comes later, with wire_atom): node_timeout, not the
  // rendezvous timeout, tells a node0 that went from one that is slow.
  self->request(gate_, milliseconds(node_.node_timeout), join_atom::value,
                static_cast<std::int32_t>(node_.rank), own, caf::actor{self}, join_proof_)
      .receive([] {}, [&](caf::error& error) { failure = error_of(system_, error); });
  if (failure)
    throw *failure;
  const auto coordinator = "the coordinator (node0 at " + node_.coordinator_host + ":" +
                           std::to_string(node_.coordinator_port) + ")";
  // Until the run is wired, the rendezvous timeout; then heartbeats.
  bool wired = false;
  auto last_heard = clock::now();
  const auto sent_before = stream::sent_to_nodes();  // this process's earlier sessions'

  int code = -1;
  while (code < 0) {
    self->receive(
        [&](wire_atom, const roster& all) {
          wire(all);
          wired = true;
          last_heard = clock::now();
          return wired_atom::value;
        },
        [&](ping_atom) {
          last_heard = clock::now();
          // With the bytes this node has sent to others so far (node0's metrics).
          self->send(caf::actor_cast<caf::actor>(self->current_sender()), pong_atom::value,
                     static_cast<std::int32_t>(node_.rank), stream::sent_to_nodes() - sent_before);
        },
        [&](trace_atom) {
          last_heard = clock::now();
          return caf::make_message(offset_us_, rtt_us_, trace_json());
        },
        [&](done_atom, std::int32_t exit, const std::string& why) {
          code = exit;
          // A failure elsewhere ends this node too: its output says so, and where.
          if (exit == 0)
            return;
          auto reason = why;
          if (reason.empty())
            reason = exit == exit_status(exit_code::interrupted)  ? "node0 was interrupted (SIGINT)"
                     : exit == exit_status(exit_code::terminated) ? "node0 was terminated (SIGTERM)"
                                                                  : "see node0's output";
          throw user_error(
              "the coordinator ended the run (exit code " + std::to_string(exit) + "): " + reason,
              static_cast<exit_code>(exit));
        },
        [&](caf::down_msg& down) {
          throw user_error(coordinator + " was lost: its connection closed (" +
                               system_.render(down.reason) + "); stopping node" +
                               std::to_string(node_.rank),
                           exit_code::run_failed);
        },
        caf::after(milliseconds(node_.heartbeat)) >>
            [&] {
              // Until the run is wired, Ctrl-C or SIGTERM ends this node at once (after,
              // node0 stops every node after the current step).
              if (const int signal = interrupt_signal(); signal != 0 && !wired)
                throw user_error(
                    "node" + std::to_string(node_.rank) + " was interrupted (" +
                        (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                        ") while waiting for the other nodes",
                    signal == SIGTERM ? exit_code::terminated : exit_code::interrupted);
              auto silent = std::chrono::duration<double>(clock::now() - last_heard).count();
              auto limit = wired ? node_.node_timeout : node_.timeout + node_.node_timeout;
              if (silent > limit)
                throw user_error(coordinator + " went silent: no heartbeat for " +
                                     seconds_text(silent) + "; stopping node" +
                                     std::to_string(node_.rank),
                                 exit_code::run_failed);
            });
  }
  return code;
}

}  // namespace troupe
