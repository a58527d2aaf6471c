// cluster.cpp: the coordinator's gatekeeper and node watch, and a worker's link.
#include "actors/cluster.hpp"

#include <gloo/rendezvous/store.h>
#include <unistd.h>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <set>
#include <sstream>
#include <thread>

#include "actors/batch_assembler_actor.hpp"
#include "actors/checkpoint_writer.hpp"
#include "actors/interrupts.hpp"
#include "runtime/net/launch_env.hpp"
#include "runtime/net/secret.hpp"
#include "troupe/error.hpp"
#include "troupe/messages.hpp"
#include "troupe/plugin.hpp"
#include "troupe/trace.hpp"

namespace troupe {

// Note [joining a run]
// The handles of the trainer and of every actor are given only to a worker that proved
// the shared secret (runtime/net/secret.hpp, Note [proving the secret]). The proof is
// bound to the worker's rank and to the hashes of its config and plugins, so a proof made
// for another run, rank or config does not pass. A worker that cannot prove it is refused,
// named in the coordinator's log, and ends with an error; the run goes on waiting for the
// real one until the rendezvous timeout. Without TLS this is no wall against the network:
// CAF 0.17's BASP delivers a direct message to any actor of the registry by its number,
// from a peer that never finished a handshake (an outside review forged a node's loss that
// way), and its transport trusts a header's payload length before anything of ours runs
// (docs/guide/nodes.md, "Security"). With [cluster] tls a peer without a certificate
// never speaks BASP (Note [TLS between nodes]).
//
// Every node plans the same topology from the same config (the hashes say so), so the
// roster (actor names and handles) is all a node needs to wire its own actors: each node
// sends the wiring messages to its own actors itself, with its own trace tracks, and the
// coordinator starts the run only when every worker has said it did (so the wiring is in
// every mailbox before anything the start sets off, as in one process).
//
// Failures after the start: the node watch (coordinator) monitors every worker's agent,
// whose proxy dies the moment the connection drops (a killed process), and pings it every
// heartbeat for links that go silent without closing; either way the trainer ends the run
// naming the node. A worker watches its coordinator the same way, and exits on its own.

// Note [TLS between nodes]
// With [cluster] tls, CAF's openssl module carries every link between nodes: node0
// publishes the gatekeeper with caf::openssl::publish and the workers connect through the
// openssl middleman actor, so every message after the TCP connect is inside TLS (1.2 or
// 1.3, ciphers "HIGH:!aNULL:!MD5"). With a certificate, key and CA file, CAF's session sets
// SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT on both ends: node0 requires each
// worker's certificate and each worker node0's, and OpenSSL checks that it chains to a CA
// of ca_file and is within its validity dates. CAF names no host to check, so the peer's
// host name is not compared with its certificate: any certificate the CA signed is as good
// as another. The shared secret's proof (Note [joining a run]) is unchanged on top and
// still decides who joins; TLS adds confidentiality and integrity of the traffic, and
// keeps peers without a certificate of that CA from speaking BASP to node0 at all.
//
// CAF loads the files only when a connection opens, on its network thread, where a file
// that does not load ends the process: net::check_tls loads them first (cluster_from_
// environment), so that is a user error naming the file. A worker connects with a
// deadline of its own rather than with caf::openssl::remote_actor (or caf::io's), which
// waits for the handshake without limit: a peer that accepts the TCP connection and then
// says nothing (a stalled TLS handshake, a port that serves something else) would hold
// the worker forever. A plain node and a TLS node fail each other's handshake at once (each
// end's first bytes are garbage to the other), and the worker retries until [cluster]
// timeout. Not covered: gloo's own TCP transport (averaging = "gloo"), which run_session
// refuses with tls.

namespace {

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

std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

// A refusal carries its text and the exit code it means: bad input (another config, a
// wrong secret) or a failed run (a node that never came).
caf::error refusal(std::string why, exit_code code = exit_code::bad_input) {
  return caf::make_error(caf::sec::runtime_error, std::move(why),
                         static_cast<std::int32_t>(exit_status(code)));
}

// The error as a user_error: a refusal's text and code, or CAF's rendering of any other
// error (a failed run).
user_error error_of(caf::actor_system& system, const caf::error& error) {
  const auto& context = error.context();
  if (error.category() == caf::atom("system") &&
      error.code() == static_cast<std::uint8_t>(caf::sec::runtime_error) &&
      context.match_elements<std::string, std::int32_t>())
    return user_error(context.get_as<std::string>(0),
                      static_cast<exit_code>(context.get_as<std::int32_t>(1)));
  return user_error(system.render(error), exit_code::run_failed);
}

// What the two ends of a proof agree on besides the secret.
std::string proof_context(int rank, const net::config_identity& identity) {
  return "rank=" + std::to_string(rank) + ";config=" + identity.config_hash +
         ";plugins=" + identity.plugins_hash;
}

std::string fresh_nonce() { return net::sha256_hex(net::random_nonce(32)); }

// The key of the proofs: the shared secret, or for a run without one (loopback only, see
// cluster_from_environment) a fixed word, so the exchange is the same and a node with a
// secret still refuses a coordinator without one (and the reverse).
std::string proof_key(const cluster_node& node) {
  return node.secret.value_or("troupe: no shared secret");
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::setprecision(3) << seconds << " s";
  return out.str();
}

// ---- the gatekeeper ----

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

caf::behavior gatekeeper(gate_actor* self, cluster_node node, caf::actor trainer, caf::actor writer,
                         caf::actor store) {
  self->state.store = std::move(store);
  self->state.node = std::move(node);
  self->state.trainer = std::move(trainer);
  self->state.writer = std::move(writer);
  return {
      [self](hello_atom, hello_msg& hello) -> caf::result<std::string> {
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
      },
      [self](prove_atom, std::int32_t rank, const std::string& nonce,
             const std::string& proof) -> caf::result<welcome_msg> {
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
      },
      // Note [clocks of nodes]: node0's trace clock, for a worker to measure its offset.
      [](clock_atom) { return static_cast<std::int64_t>(trace::now_ns()); },
      [self](join_atom, std::int32_t rank, roster& actors, caf::actor& agent,
             const std::string& proof) -> caf::result<void> {
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
      },
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

// ---- the node watch ----

struct watch_state {
  struct watched {
    caf::actor agent;
    std::vector<std::string> actors;
    std::string where;
    clock::time_point last_heard;
    bool lost = false;
  };
  std::map<int, watched> nodes;
  caf::actor trainer;
  double heartbeat = 1;
  double node_timeout = 8;
  static const char* name;
};
const char* watch_state::name = "troupe.node_watch";

using watch_actor = caf::stateful_actor<watch_state>;

void lose(watch_actor* self, int rank, const std::string& what) {
  auto& w = self->state.nodes.at(rank);
  if (w.lost)
    return;
  w.lost = true;
  std::string actors;
  for (const auto& name : w.actors)
    actors += (actors.empty() ? "" : ", ") + name;
  self->send(self->state.trainer, node_lost_atom::value, static_cast<std::int32_t>(rank),
             "node" + std::to_string(rank) + " (" + w.where + "; its actors: " + actors +
                 ") was lost: " + what);
}

caf::behavior node_watch(watch_actor* self, joined_cluster joined, caf::actor trainer,
                         double heartbeat, double node_timeout) {
  auto& s = self->state;
  s.trainer = std::move(trainer);
  s.heartbeat = heartbeat;
  s.node_timeout = node_timeout;
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    auto& w = s.nodes[static_cast<int>(k)];
    w.agent = joined.agents[k];
    w.actors = joined.names[k];
    w.where = joined.where[k];
    w.last_heard = clock::now();
    self->monitor(w.agent);
  }
  self->set_down_handler([self](caf::down_msg& down) {
    for (auto& [rank, w] : self->state.nodes)
      if (w.agent.address() == down.source)
        lose(self, rank, "its connection closed (" + self->system().render(down.reason) + ")");
  });
  self->send(self, tick_atom::value);
  return {
      [self](tick_atom) {
        auto& s = self->state;
        auto now = clock::now();
        for (auto& [rank, w] : s.nodes) {
          if (w.lost)
            continue;
          auto silent = std::chrono::duration<double>(now - w.last_heard).count();
          if (silent > s.node_timeout)
            lose(self, rank,
                 "no heartbeat for " + seconds_text(silent) + " ([cluster] node_timeout " +
                     seconds_text(s.node_timeout) + ")");
          else
            self->send(w.agent, ping_atom::value);
        }
        self->delayed_send(self, milliseconds(s.heartbeat), tick_atom::value);
      },
      [self](pong_atom, std::int32_t rank) {
        auto it = self->state.nodes.find(rank);
        if (it != self->state.nodes.end())
          it->second.last_heard = clock::now();
      },
      [self](caf::get_atom) {  // the ranks of the nodes lost so far
        std::vector<std::int32_t> lost;
        for (const auto& [rank, w] : self->state.nodes)
          if (w.lost)
            lost.push_back(rank);
        return lost;
      },
  };
}

}  // namespace

namespace {

bool is_loopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1" ||
         address.rfind("127.", 0) == 0;
}

// ---- the gloo store ----

using store_set_atom = caf::atom_constant<caf::atom("storeset")>;
using store_get_atom = caf::atom_constant<caf::atom("storeget")>;
using store_wait_atom = caf::atom_constant<caf::atom("storewait")>;

struct store_state {
  std::map<std::string, std::vector<char>> values;
  struct waiter {
    std::vector<std::string> keys;
    caf::response_promise promise;
    bool get = false;  // answers with the first key's value
  };
  std::vector<waiter> waiting;
  static const char* name;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!values.count(k))
        return false;
    return true;
  }
};
const char* store_state::name = "troupe.gloo_store";

using store_actor = caf::stateful_actor<store_state>;

caf::behavior gloo_store_actor(store_actor* self) {
  return {
      [self](store_set_atom, const std::string& key, const store_value& value) {
        auto& s = self->state;
        s.values[key] = value.bytes;
        std::vector<store_state::waiter> still;
        for (auto& w : s.waiting) {
          if (!s.has_all(w.keys))
            still.push_back(std::move(w));
          else if (w.get)
            w.promise.deliver(store_value{s.values.at(w.keys.front())});
          else
            w.promise.deliver(caf::unit);
        }
        s.waiting = std::move(still);
      },
      [self](store_get_atom, const std::string& key) -> caf::result<store_value> {
        auto& s = self->state;
        auto it = s.values.find(key);
        if (it != s.values.end())
          return store_value{it->second};
        s.waiting.push_back({{key}, self->make_response_promise(), true});
        return s.waiting.back().promise;
      },
      [self](store_wait_atom, const store_keys& keys) -> caf::result<void> {
        auto& s = self->state;
        if (s.has_all(keys.keys))
          return caf::unit;
        s.waiting.push_back({keys.keys, self->make_response_promise(), false});
        return s.waiting.back().promise;
      },
  };
}

// A gloo store whose keys live in the coordinator's store actor.
class remote_gloo_store : public gloo::rendezvous::Store {
 public:
  remote_gloo_store(caf::actor_system& system, caf::actor store, double timeout)
      : system_(system), store_(std::move(store)), timeout_(milliseconds(timeout)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    caf::anon_send(store_, store_set_atom::value, key, store_value{data});
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> out;
    caf::scoped_actor self{system_};
    std::string failure;
    self->request(store_, timeout_, store_get_atom::value, key)
        .receive([&](store_value& v) { out = std::move(v.bytes); },
                 [&](caf::error& e) { failure = system_.render(e); });
    fail_if(failure, "get '" + key + "'");
    return out;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    caf::scoped_actor self{system_};
    std::string failure;
    self->request(store_, timeout, store_wait_atom::value, store_keys{keys})
        .receive([] {}, [&](caf::error& e) { failure = system_.render(e); });
    fail_if(failure, "wait for " + std::to_string(keys.size()) + " key(s)");
  }

 private:
  static void fail_if(const std::string& failure, const std::string& what) {
    if (!failure.empty())
      throw std::runtime_error("the gloo store on the coordinator did not answer " + what + ": " +
                               failure);
  }

  caf::actor_system& system_;
  caf::actor store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> cluster_gloo_store(caf::actor_system& system,
                                                            caf::actor store, double timeout) {
  return std::make_shared<remote_gloo_store>(system, std::move(store), timeout);
}

std::string gloo_address(const cluster_node& node) {
  if (const char* address = std::getenv("TROUPE_NODE_ADDRESS"); address && *address)
    return address;
  if (is_loopback(node.coordinator_host) && is_loopback(node.listen))
    return "127.0.0.1";
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::optional<cluster_node> cluster_from_environment(
    run_config& config, const std::function<const char*(const char*)>& getenv) {
  const auto identity = net::identity_from_environment(getenv);
  auto& c = config.cluster;
  if (identity.world_size == 1 && c.nodes <= 1)
    return std::nullopt;
  if (c.nodes == 0)
    c.nodes = identity.world_size;
  if (c.nodes != identity.world_size)
    throw user_error(c.nodes_where.to_string() + ": [cluster] nodes is " + std::to_string(c.nodes) +
                     ", and " +
                     (identity.launcher == "single"
                          ? std::string("no launcher started this process (no TROUPE_RANK, RANK, "
                                        "OMPI_COMM_WORLD_RANK or SLURM_PROCID)")
                          : "the launcher (" + identity.launcher + ") started " +
                                std::to_string(identity.world_size) + " processes") +
                     "; start it with troupe launch -n " + std::to_string(c.nodes) + " " +
                     config.path + " or with as many processes");
  cluster_node node;
  node.rank = identity.rank;
  node.nodes = identity.world_size;
  node.local_rank = identity.local_rank;
  node.launcher = identity.launcher;
  // The launcher's coordinator when it names one; the config's otherwise.
  const bool names_host = identity.launcher == "troupe" || identity.launcher == "torchrun" ||
                          getenv("MASTER_ADDR") != nullptr || (identity.launcher == "slurm");
  const bool names_port = identity.launcher == "troupe" || getenv("MASTER_PORT") != nullptr;
  node.coordinator_host = names_host ? identity.coordinator_host : c.address;
  node.coordinator_port = names_port ? identity.coordinator_port : static_cast<int>(c.port);
  node.listen = c.listen;
  if (const char* listen = getenv("TROUPE_LISTEN"); listen != nullptr && *listen != '\0')
    node.listen = listen;
  if (auto secret = net::load_secret(c.secret_file, getenv))
    node.secret = secret->value;
  if (c.tls) {
    node.tls = net::tls_files{c.certificate, c.key, c.ca_file, {}};
    if (!c.key_passphrase_file.empty())
      node.tls->passphrase =
          net::read_secret_file(c.key_passphrase_file, "[cluster] key_passphrase_file");
    net::check_tls(*node.tls);
  }
  if (!node.secret && node.coordinator() && !is_loopback(node.listen))
    throw user_error("the coordinator would listen on " + node.listen +
                     ", beyond this machine, without a shared secret: set TROUPE_SECRET or "
                     "TROUPE_SECRET_FILE, or [cluster] secret_file, on every node");
  std::vector<std::string> plugins;
  for (const auto& [name, path] : loaded_plugins())
    plugins.push_back(path);
  node.identity = net::identify(config.path, plugins);
  node.timeout = c.timeout;
  node.heartbeat = c.heartbeat;
  node.node_timeout = c.node_timeout;
  return node;
}

std::string cluster_node::describe() const {
  return "node" + std::to_string(rank) + " (rank " + std::to_string(rank) + " of " +
         std::to_string(nodes) + ", " + launcher + ")";
}

void add_cluster_message_types(caf::actor_system_config& config) {
  config.add_message_type<roster>("troupe::roster");
  config.add_message_type<hello_msg>("troupe::hello_msg");
  config.add_message_type<welcome_msg>("troupe::welcome_msg");
  config.add_message_type<checkpoint_shard_msg>("troupe::checkpoint_shard_msg");
  config.add_message_type<store_value>("troupe::store_value");
  config.add_message_type<store_keys>("troupe::store_keys");
  config.add_message_type<batch_rows_msg>("troupe::batch_rows_msg");
}

// Note [deserialising on the multiplexer]
// CAF 0.17's BASP broker hands each incoming message to a pool of "BASP workers"
// (middleman.workers, 1 on a 2-core machine) that deserialise it on a scheduler thread. The
// hand-over copies the whole payload into the worker (instance.cpp, worker::launch), on the
// multiplexer's thread, before the worker copies it once more into the tensor. With no
// workers, the multiplexer deserialises from its read buffer at once: one copy of a tensor's
// bytes instead of two, and no wake-up of another thread. Tensors are most of what crosses
// (bench/link_bench.cpp); the small messages lose only a parallel deserialisation they do
// not need.
void configure_cluster_system(caf::actor_system_config& config, const cluster_node& node) {
  config.load<caf::io::middleman>();
  config.set("middleman.workers", 0);  // Note [deserialising on the multiplexer]
  if (node.tls) {
    // CAF reads these members (its options openssl.certificate, .key, .passphrase and
    // .cafile) when a connection opens; any of them set turns on its peer verification.
    config.load<caf::openssl::manager>();
    config.openssl_certificate = node.tls->certificate;
    config.openssl_key = node.tls->key;
    config.openssl_passphrase = node.tls->passphrase;
    config.openssl_cafile = node.tls->ca_file;
  }
  add_cluster_message_types(config);
}

// ---- coordinator_gate ----

coordinator_gate::coordinator_gate(caf::actor_system& system, const cluster_node& node,
                                   caf::actor trainer, caf::actor checkpoint_writer)
    : system_(system), node_(node), trainer_(trainer) {
  store_ = system.spawn(gloo_store_actor);
  gate_ = system.spawn(gatekeeper, node, std::move(trainer), std::move(checkpoint_writer), store_);
  const auto at = static_cast<std::uint16_t>(node.coordinator_port);
  auto port = node.tls ? caf::openssl::publish(gate_, at, node.listen.c_str(), true)
                       : caf::io::publish(gate_, at, node.listen.c_str(), true);
  if (!port) {
    caf::anon_send_exit(gate_, caf::exit_reason::kill);
    const auto why = system.render(port.error());
    throw user_error("the coordinator cannot listen on " + node.listen + ":" +
                     std::to_string(node.coordinator_port) + ": " + why +
                     (why.find("No local interface") != std::string::npos
                          ? "; is " + node.listen +
                                " an address of this machine? ([cluster] listen or TROUPE_LISTEN)"
                          : "; is another run using that port? Choose another with [cluster] "
                            "port or MASTER_PORT"));
  }
  port_ = *port;
  // The secret decides who joins; without TLS it cannot keep a host that reaches the port
  // from CAF's own network code (docs/guide/nodes.md, "Security").
  if (!is_loopback(node.listen) && !node.tls)
    std::fprintf(stderr,
                 "note: node0 listens on %s without [cluster] tls: any host that reaches its "
                 "port can crash or disturb this run through CAF's network layer before the "
                 "secret is asked for; use tls = true unless every host on the network is "
                 "trusted\n",
                 node.listen.c_str());
}

coordinator_gate::~coordinator_gate() {
  if (watch_)
    caf::anon_send_exit(watch_, caf::exit_reason::user_shutdown);
  // With tls too: both middleman actors hand the port to the one BASP broker, which closes
  // it (caf::openssl::unpublish does not compile in CAF 0.17.6: it omits the actor).
  caf::io::unpublish(gate_, port_);
  caf::anon_send_exit(gate_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
}

joined_cluster coordinator_gate::wait_for_workers(const roster& own) {
  joined_cluster joined;
  caf::scoped_actor self{system_};
  std::optional<user_error> failure;
  self->request(gate_, caf::infinite, all_atom::value, node_.timeout)
      .receive([&](joined_cluster& workers) { joined = std::move(workers); },
               [&](caf::error& error) { failure = error_of(system_, error); });
  if (failure)
    throw *failure;
  joined.names.at(0) = own.names;
  joined.where.at(0) = "coordinator";
  joined.actors.names.insert(joined.actors.names.begin(), own.names.begin(), own.names.end());
  joined.actors.handles.insert(joined.actors.handles.begin(), own.handles.begin(),
                               own.handles.end());
  return joined;
}

void coordinator_gate::wire_workers(const joined_cluster& joined) {
  caf::scoped_actor self{system_};
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    // In slices of a second, asking the watch (started before the wiring) between them: a
    // node lost after its join never answers, and would cost the whole timeout, unnamed.
    const auto deadline = clock::now() + milliseconds(node_.timeout);
    for (bool wired = false; !wired;) {
      std::optional<user_error> failure;
      bool timed_out = false;
      self->request(joined.agents[k], std::chrono::seconds(1), wire_atom::value, joined.actors)
          .receive([&](wired_atom) { wired = true; },
                   [&](caf::error& error) {
                     timed_out = error == caf::sec::request_timeout;
                     failure = error_of(system_, error);
                   });
      if (wired)
        break;
      if (!timed_out || clock::now() >= deadline)
        throw user_error(
            "node" + std::to_string(k) + " could not wire its actors: " + failure->what(),
            exit_code::run_failed);
      if (lost_nodes().count(static_cast<std::int32_t>(k)) != 0)
        throw user_error("node" + std::to_string(k) + " (" + joined.where[k] +
                             ") was lost after it joined, before its actors were wired",
                         exit_code::run_failed);
    }
  }
}

void coordinator_gate::watch(const joined_cluster& joined) {
  watch_ = system_.spawn(node_watch, joined, trainer_, node_.heartbeat, node_.node_timeout);
}

std::set<std::int32_t> coordinator_gate::lost_nodes() {
  std::set<std::int32_t> lost;
  if (!watch_)
    return lost;
  caf::scoped_actor self{system_};
  self->request(watch_, milliseconds(node_.timeout), caf::get_atom::value)
      .receive(
          [&](const std::vector<std::int32_t>& ranks) { lost.insert(ranks.begin(), ranks.end()); },
          [&](caf::error&) {});
  return lost;
}

std::vector<trace::node_trace> coordinator_gate::collect_traces(const joined_cluster& joined) {
  std::vector<trace::node_trace> out;
  caf::scoped_actor self{system_};
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    // A node the watch has lost never answers: asking it would hold the end of the run (and
    // node0's own trace) for the whole [cluster] timeout. Asked before each node, since
    // one may be lost while the others send theirs.
    if (lost_nodes().count(static_cast<std::int32_t>(k))) {
      std::fprintf(stderr,
                   "troupe: node%zu's trace is left out of the merged trace: the node was lost\n",
                   k);
      continue;
    }
    trace::node_trace t;
    t.node = static_cast<int>(k);
    t.where = joined.where[k];
    bool answered = false;
    self->request(joined.agents[k], milliseconds(node_.timeout), trace_atom::value)
        .receive(
            [&](double offset, double rtt, std::string& text) {
              t.offset_us = offset;
              t.rtt_us = rtt;
              t.json = std::move(text);
              answered = true;
            },
            [&](caf::error& error) {
              std::fprintf(stderr, "troupe: node%zu's trace is left out of the merged trace: %s\n",
                           k, system_.render(error).c_str());
            });
    if (answered && !t.json.empty())  // empty: that node records nothing
      out.push_back(std::move(t));
  }
  return out;
}

void coordinator_gate::finish(const joined_cluster& joined, int code, const std::string& why) {
  if (watch_) {
    caf::anon_send_exit(watch_, caf::exit_reason::user_shutdown);
    watch_ = caf::actor{};
  }
  for (std::size_t k = 1; k < joined.agents.size(); ++k)
    if (joined.agents[k])
      caf::anon_send(joined.agents[k], done_atom::value, static_cast<std::int32_t>(code), why);
}

// ---- worker_link ----

namespace {

// The coordinator's gatekeeper, through CAF's middleman actor (or the openssl module's), by
// `deadline` at the latest (Note [TLS between nodes]); none, and `failure` says why and
// `answered` whether the TCP connection opened (something listens there).
caf::actor connect_to_gate(caf::actor_system& system, const cluster_node& node,
                           clock::time_point deadline, std::string& failure, bool& answered) {
  const auto manager =
      node.tls ? system.openssl_manager().actor_handle() : system.middleman().actor_handle();
  const auto port = static_cast<std::uint16_t>(node.coordinator_port);
  const auto wait =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()),
               std::chrono::milliseconds(200));
  caf::scoped_actor self{system};
  caf::actor gate;
  self->request(manager, wait, caf::connect_atom::value, node.coordinator_host, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& remote, const std::set<std::string>&) {
            if (remote)
              gate = caf::actor_cast<caf::actor>(std::move(remote));
            else
              failure = system.render(caf::make_error(caf::sec::no_actor_published_at_port, port));
          },
          [&](caf::error& error) {
            // cannot_connect_to_node with a context ("ip_connect failed", host, port): no
            // TCP connection; without one, from the openssl module: TCP connected, and
            // the TLS handshake failed at its first step (the peer's first bytes were
            // not TLS).
            const bool no_tcp =
                error == caf::sec::cannot_connect_to_node && !error.context().empty();
            answered = !no_tcp;
            if (error == caf::sec::cannot_connect_to_node && !no_tcp)
              failure =
                  "the TLS handshake failed at once (node0 speaks no TLS, or its certificate "
                  "does not verify against [cluster] ca_file?)";
            else if (error == caf::sec::request_timeout)
              failure = "the connection opened, but no handshake completed within " +
                        seconds_text(std::chrono::duration<double>(wait).count()) +
                        (node.tls ? " (is node0 without [cluster] tls?)"
                                  : " (does node0 have [cluster] tls, and this node not?)");
            else
              failure = system.render(error);
          });
  return gate;
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
          self->send(caf::actor_cast<caf::actor>(self->current_sender()), pong_atom::value,
                     static_cast<std::int32_t>(node_.rank));
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
