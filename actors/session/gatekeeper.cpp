// gatekeeper.cpp: node0's door for the workers: a hello opens a challenge, a proof of
// the secret wins a rank, a join brings the node's actors (Note [joining a run] in
// cluster.cpp, Note [who may claim a rank] below); the session waits here for them all.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>

#include "actors/session/cluster_protocol.hpp"
#include "actors/trainer/interrupts.hpp"
#include "troupe/trace.hpp"

namespace troupe::node_protocol {

namespace {

// Note [who may claim a rank]
// A hello is a claim, not a proof: anyone who reaches node0's port can send one, with any
// rank and any hashes (a config file is no secret). So a hello opens a challenge for its
// own peer (rank and CAF node) and changes nothing else: repeated hellos, from a peer
// without the secret or a second process started with the same rank, cannot close the
// challenge another peer is answering (they did, and the real worker was refused as if
// it lacked the secret). The first peer to prove the secret for a rank holds it, and only
// that peer may join as it. A config that differs is judged after the proof, which
// covers the hashes the peer claims: a node with the secret and another config ends the
// run at once with both hashes, as before, while a hello alone with other hashes no
// longer can (it did, from a peer that proved nothing). A newer proof for a rank that has
// not joined replaces the older (its process may have failed before it joined and been
// restarted); a joined rank is refused. A hello's fields are bounded before it is kept,
// and at most max(max_open_challenges, 4 per node) challenges are open at once, the
// oldest dropped first (all nodes of a large run say hello within a retry of each other).
// The join proves the secret again (over the proof's nonces the other way round), so a
// peer that claims the prover's CAF node id, which BASP lets it, cannot join in its place.
// Without TLS such a peer can still evict open challenges (docs/guide/nodes.md,
// "Security").
constexpr std::size_t max_open_challenges = 256;

struct gate_state {
  cluster_node node;
  caf::actor trainer;
  caf::actor writer;
  caf::actor store;
  // Note [who may claim a rank]: a challenge is open per (rank, peer); the first proof
  // wins the rank, for that peer alone.
  struct open_challenge {
    hello_msg hello;
    std::string challenge;
    std::uint64_t order = 0;  // when it was opened: the oldest goes first past the cap
  };
  std::map<std::pair<int, caf::node_id>, open_challenge> open;
  std::uint64_t opened = 0;
  bool polling = false;  // the signal poll's timer is armed
  struct worker {
    hello_msg hello;
    caf::node_id prover;  // the peer that proved the secret for this rank
    std::string challenge, nonce;  // of that proof: the join proves the secret with them
    bool proven = false;
    bool joined = false;
    roster actors;
    caf::actor agent;
  };
  std::map<int, worker> workers;
  std::string failure;  // the rendezvous cannot succeed (a node runs another config)
  exit_code failure_code = exit_code::bad_input;
  caf::response_promise waiting;
  bool has_waiting = false;

  static const char* name;

  std::string where(const hello_msg& h) const { return h.host + " pid " + std::to_string(h.pid); }
  bool complete() const {
    int joined = 0;
    for (const auto& [rank, w] : workers)
      joined += w.joined ? 1 : 0;
    return joined == node.nodes - 1;
  }
  std::string missing() const {
    std::string out;
    for (int rank = 1; rank < node.nodes; ++rank) {
      auto it = workers.find(rank);
      if (it == workers.end() || !it->second.joined)
        out += (out.empty() ? "node" : ", node") + std::to_string(rank);
    }
    return out;
  }
};
const char* gate_state::name = "troupe.gatekeeper";

using gate_actor = caf::stateful_actor<gate_state>;

// Whether the message being handled comes from this process (the session, a timer), not
// from a peer: the gatekeeper answers peers only hello, prove and join.
bool from_this_node(gate_actor* self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

// Hands the joined workers (or the failure) to the coordinator's session, once.
void settle(gate_actor* self) {
  auto& s = self->state;
  if (!s.has_waiting)
    return;
  if (!s.failure.empty()) {
    // Workers that joined end as node0 does, saying why (they would find node0 lost).
    for (const auto& [rank, w] : s.workers)
      if (w.joined && w.agent)
        self->send(w.agent, done_atom::value,
                   static_cast<std::int32_t>(exit_status(s.failure_code)), s.failure);
    s.waiting.deliver(refusal(s.failure, s.failure_code));
    s.has_waiting = false;
  } else if (s.complete()) {
    joined_cluster joined;
    const auto n = static_cast<std::size_t>(s.node.nodes);
    joined.agents.resize(n);
    joined.names.resize(n);
    joined.where.resize(n);
    for (const auto& [rank, w] : s.workers) {
      auto k = static_cast<std::size_t>(rank);
      joined.agents[k] = w.agent;
      joined.names[k] = w.actors.names;
      joined.where[k] = s.where(w.hello);
      joined.actors.names.insert(joined.actors.names.end(), w.actors.names.begin(),
                                 w.actors.names.end());
      joined.actors.handles.insert(joined.actors.handles.end(), w.actors.handles.begin(),
                                   w.actors.handles.end());
    }
    s.waiting.deliver(std::move(joined));
    s.has_waiting = false;
  }
}

// A hello: a challenge for its own peer, nothing else (Note [who may claim a rank]).
caf::result<std::string> open_challenge(gate_actor* self, hello_msg& hello) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  if (!sender)
    return refusal("a hello needs a sender");
  if (hello.rank < 1 || hello.rank >= s.node.nodes || hello.nodes != s.node.nodes)
    return refusal("the coordinator runs " + std::to_string(s.node.nodes) +
                   " nodes (ranks 0 to " + std::to_string(s.node.nodes - 1) +
                   "), and this node says it is rank " + std::to_string(hello.rank) + " of " +
                   std::to_string(hello.nodes) +
                   "; start every node with the same world size");
  auto& w = s.workers[hello.rank];
  if (w.joined)
    return refusal("node" + std::to_string(hello.rank) + " has joined already (from " +
                   s.where(w.hello) + "); two processes were started with rank " +
                   std::to_string(hello.rank));
  // Kept until the proof: what a hello holds is bounded before it is.
  bool bounded = hello.host.size() <= 255 && hello.config_hash.size() <= 128 &&
                 hello.plugins_hash.size() <= 128 && hello.plugins.size() <= 1024;
  for (const auto& plugin : hello.plugins)
    bounded = bounded && plugin.size() <= 1024;
  if (!bounded)
    return refusal("a hello whose host, hashes or plugins are longer than troupe writes");
  // Note [who may claim a rank]: a hello proves nothing, so it changes nothing but
  // its own peer's challenge; a config that differs is judged once the secret is
  // proven (with the hashes the peer claims), not on a hello's word.
  const auto cap =
      std::max<std::size_t>(max_open_challenges, 4 * static_cast<std::size_t>(s.node.nodes));
  if (s.open.size() >= cap)
    s.open.erase(std::min_element(
        s.open.begin(), s.open.end(),
        [](const auto& a, const auto& b) { return a.second.order < b.second.order; }));
  auto& pending = s.open[{hello.rank, sender->node()}];
  pending.hello = std::move(hello);
  pending.challenge = fresh_nonce();
  pending.order = ++s.opened;
  return pending.challenge;
}

// A proof of the secret for a rank: the first wins it, for its peer alone; a node with
// the secret and another config ends the rendezvous.
caf::result<welcome_msg> take_proof(gate_actor* self, std::int32_t rank, const std::string& nonce,
                                    const std::string& proof) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  auto it = sender ? s.open.find({rank, sender->node()}) : s.open.end();
  if (it == s.open.end())
    return refusal("say hello first: no challenge is open for rank " + std::to_string(rank));
  auto pending = std::move(it->second);
  s.open.erase(it);  // one try per challenge
  auto& w = s.workers[rank];
  if (w.joined)
    return refusal("node" + std::to_string(rank) + " has joined already (from " +
                   s.where(w.hello) + "); two processes were started with rank " +
                   std::to_string(rank));
  // The proof covers the config the peer says it runs: a node with the secret and
  // another config proves it, and then ends the run with both hashes.
  const net::config_identity theirs{pending.hello.config_hash, pending.hello.plugins_hash,
                                    pending.hello.plugins};
  const std::string secret = proof_key(s.node);
  const auto context = proof_context(rank, theirs);
  if (!net::verify_proof(secret, net::worker_role, pending.challenge, nonce, context,
                         proof)) {
    std::fprintf(stderr,
                 "troupe: refused a node claiming to be node%d (%s, CAF node %s): it "
                 "could not prove the shared secret\n",
                 rank, s.where(pending.hello).c_str(),
                 caf::to_string(sender->node()).c_str());
    return refusal(
        "the coordinator refused this node: it could not prove the shared "
        "secret (set the same TROUPE_SECRET, TROUPE_SECRET_FILE or [cluster] "
        "secret_file on every node)");
  }
  auto differs = net::mismatch(theirs, s.node.identity);
  if (!differs.empty()) {
    s.failure = "node" + std::to_string(rank) + " (" + s.where(pending.hello) +
                ") runs another config than the coordinator; as node" + std::to_string(rank) +
                " sees it:\n" + differs;
    settle(self);
    return refusal(differs);
  }
  // A rank proven and not joined may be proven again: the first prover may have
  // failed before it joined and been restarted. The newer one may join.
  if (w.proven && w.prover != sender->node())
    std::fprintf(stderr,
                 "troupe: node%d proved the secret again (%s, before %s): the newer one "
                 "may join\n",
                 static_cast<int>(rank), s.where(pending.hello).c_str(),
                 s.where(w.hello).c_str());
  w.hello = std::move(pending.hello);
  w.prover = sender->node();
  w.challenge = pending.challenge;
  w.nonce = nonce;
  w.proven = true;
  return welcome_msg{
      net::proof(secret, net::coordinator_role, nonce, pending.challenge, context), s.trainer,
      s.writer, s.store};
}

// A join from the peer that proved the secret for its rank, with its actors.
caf::result<void> take_join(gate_actor* self, std::int32_t rank, roster& actors,
                            caf::actor& agent, const std::string& proof) {
  auto& s = self->state;
  auto it = s.workers.find(rank);
  const auto& sender = self->current_sender();
  if (it == s.workers.end() || !it->second.proven || it->second.joined || !sender ||
      sender->node() != it->second.prover)
    return refusal("node" + std::to_string(rank) + " must prove the secret before it joins");
  // Note [who may claim a rank]: the join proves the secret too, over the proof's
  // nonces the other way round, so a peer that only claims the prover's node id
  // (BASP lets it) cannot join in its place and receive the roster.
  const auto& w = it->second;
  const net::config_identity theirs{w.hello.config_hash, w.hello.plugins_hash,
                                    w.hello.plugins};
  if (!net::verify_proof(proof_key(s.node), net::worker_role, w.nonce, w.challenge,
                         proof_context(rank, theirs), proof)) {
    std::fprintf(stderr,
                 "troupe: refused a join as node%d from CAF node %s (the id of the "
                 "process that proved the secret from %s): its proof of the secret is "
                 "wrong\n",
                 static_cast<int>(rank), caf::to_string(sender->node()).c_str(),
                 s.where(w.hello).c_str());
    return refusal("node" + std::to_string(rank) + " must prove the secret before it joins");
  }
  it->second.actors = std::move(actors);
  it->second.agent = std::move(agent);
  it->second.joined = true;
  settle(self);
  return caf::unit;
}

caf::behavior gatekeeper(gate_actor* self, cluster_node node, caf::actor trainer, caf::actor writer,
                         caf::actor store) {
  self->state.store = std::move(store);
  self->state.node = std::move(node);
  self->state.trainer = std::move(trainer);
  self->state.writer = std::move(writer);
  return {
      [self](hello_atom, hello_msg& hello) { return open_challenge(self, hello); },
      [self](prove_atom, std::int32_t rank, const std::string& nonce, const std::string& proof) {
        return take_proof(self, rank, nonce, proof);
      },
      // Note [clocks of nodes]: node0's trace clock, for a worker to measure its offset.
      [](clock_atom) { return static_cast<std::int64_t>(trace::now_ns()); },
      [self](join_atom, std::int32_t rank, roster& actors, caf::actor& agent,
             const std::string& proof) { return take_join(self, rank, actors, agent, proof); },
      [self](all_atom, double timeout) -> caf::result<joined_cluster> {
        if (!from_this_node(self))  // only the session waits; a peer may not
          return refusal("not yours to ask");
        auto& s = self->state;
        s.waiting = self->make_response_promise();
        s.has_waiting = true;
        self->delayed_send(self, milliseconds(timeout), expire_atom::value, timeout);
        if (!s.polling) {
          s.polling = true;
          self->send(self, signal_poll_atom::value);
        }
        settle(self);
        return s.waiting;
      },
      // Ctrl-C or SIGTERM while the workers are awaited ends the wait at once, with the
      // signal's exit code (interrupts.hpp), as it ends a run.
      [self](signal_poll_atom) {
        if (!from_this_node(self))
          return;
        auto& s = self->state;
        if (!s.has_waiting || !s.failure.empty()) {
          s.polling = false;
          return;
        }
        if (const int signal = interrupt_signal(); signal != 0) {
          s.failure = std::string{"interrupted ("} + (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                      ") while waiting for " + s.missing() + " to join";
          s.failure_code = signal == SIGTERM ? exit_code::terminated : exit_code::interrupted;
          s.polling = false;
          settle(self);
          return;
        }
        self->delayed_send(self, milliseconds(0.1), signal_poll_atom::value);  // seconds
      },
      [self](expire_atom, double timeout) {
        if (!from_this_node(self))
          return;
        auto& s = self->state;
        if (s.has_waiting && s.failure.empty() && !s.complete()) {
          s.failure = "not every node joined within " + seconds_text(timeout) +
                      " ([cluster] timeout): missing " + s.missing() +
                      "; start them with the same config (troupe launch -n " +
                      std::to_string(s.node.nodes) + " does it all)";
          s.failure_code = exit_code::run_failed;
          settle(self);
        }
      },
  };
}

}  // namespace

caf::actor spawn_gatekeeper(caf::actor_system& system, cluster_node node, caf::actor trainer,
                            caf::actor writer, caf::actor store) {
  return system.spawn(gatekeeper, std::move(node), std::move(trainer), std::move(writer),
                      std::move(store));
}

}  // namespace troupe::node_protocol
