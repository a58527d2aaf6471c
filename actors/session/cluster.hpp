// cluster.hpp: one run over several processes (nodes): rendezvous, roster, heartbeats.
//
// Every process of a run loads the same config and plans the same topology; each spawns
// the actors of its own node (runtime/graph: a device's node) and the coordinator (node 0)
// also the trainer and the checkpoint writer. They meet through the coordinator's front
// door (runtime/net/front_door.hpp: each proves the secret before CAF reads a byte; then
// TLS with [cluster] tls) and its gatekeeper (Note [joining a run] and Note [TLS between
// nodes] in the .cpp):
//
//   worker                                   coordinator's door, then its gatekeeper
//     knock: magic, nonce, proof             ->  admits the connection to CAF, proves back
//     hello(rank, config and plugin hashes)  ->  compares them with its own; a challenge C
//     prove(rank, nonce W, proof of C)       ->  checks the proof; its own proof of W, and
//                                                the trainer and checkpoint writer
//     join(rank, its actors, its agent)      ->  when every node has joined: the roster
//   agent <- wire(the roster): the worker wires its actors, answers; the run starts.
//
// Afterwards the coordinator's node watch pings every worker's agent each heartbeat and
// reports a node that goes silent or whose connection drops to the trainer, which ends
// the run on every node; a worker whose coordinator goes silent or away ends itself.
//
// Not here: what a node spawns and how a run goes (session.cpp), where the rank and the
// coordinator's address come from (runtime/net/launch_env.hpp), how the secret is proven
// (runtime/net/secret.hpp).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/base/unique_fd.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/config/config.hpp"
#include "runtime/net/config_identity.hpp"
#include "runtime/net/front_door.hpp"
#include "runtime/net/tls.hpp"
#include "runtime/trace_tools/merge.hpp"

namespace troupe {

/// Which node this process is and how it reaches the others.
struct cluster_node {
  int rank = 0;
  int nodes = 1;
  int local_rank = 0;               // among the nodes on this machine (CPU cores)
  std::string launcher = "single";  // who said so: troupe, torchrun, slurm, openmpi
  std::string coordinator_host = "127.0.0.1";
  int coordinator_port = 29500;
  std::string listen = "127.0.0.1";   // the coordinator's listening address
  std::optional<std::string> secret;  // given, or this machine's own (always set)
  net::config_identity identity;      // what every node must share with the coordinator
  double timeout = 60;                // rendezvous, seconds
  double heartbeat = 1;
  double node_timeout = 8;
  /// TLS on every link between nodes ([cluster] tls; Note [TLS between nodes] in the .cpp):
  /// the files, checked (runtime/net/tls.hpp). None: plain TCP.
  std::optional<net::tls_files> tls;

  bool coordinator() const { return rank == 0; }
  /// "node1 (rank 1 of 2, torchrun)".
  std::string describe() const;
};

/// This process's node, from the launcher's environment (runtime/net/launch_env.hpp) and
/// the config's [cluster]; none for a one-process run. Sets config.cluster.nodes from the
/// launcher's world size when the config does not say, and throws user_error when the two
/// disagree, when the secret cannot be read, when the coordinator would listen beyond
/// loopback without a secret, or when [cluster] tls is on and its files do not load
/// (net::check_tls) or the key's passphrase file cannot be read.
std::optional<cluster_node> cluster_from_environment(
    run_config& config, const std::function<const char*(const char*)>& getenv = ::getenv);

/// The actors of a run by name, on whichever node they live.
struct roster {
  std::vector<std::string> names;
  std::vector<caf::actor> handles;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, roster& x) {
  return f(caf::meta::type_name("troupe::roster"), x.names, x.handles);
}

/// What a worker says first.
struct hello_msg {
  std::int32_t rank = 0;
  std::int32_t nodes = 0;
  std::string host;  // for the coordinator's log
  std::int32_t pid = 0;
  std::string config_hash;
  std::string plugins_hash;
  std::vector<std::string> plugins;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello_msg& x) {
  return f(caf::meta::type_name("troupe::hello_msg"), x.rank, x.nodes, x.host, x.pid, x.config_hash,
           x.plugins_hash, x.plugins);
}

/// What the coordinator hands a worker that proved the secret.
struct welcome_msg {
  std::string proof;  // the coordinator's, of the worker's nonce
  caf::actor trainer;
  caf::actor checkpoint_writer;  // none: no checkpoints
  caf::actor gloo_store;         // the run's gloo rendezvous store (cluster_store)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, welcome_msg& x) {
  return f(caf::meta::type_name("troupe::welcome_msg"), x.proof, x.trainer, x.checkpoint_writer,
           x.gloo_store);
}

/// The gloo rendezvous store of a run over several nodes: a key-value actor on the
/// coordinator that every node's gloo contexts reach (runtime/collective/gloo_allreduce.hpp).
/// `get` and `wait` block the calling thread (a gloo worker's) until the keys are set, at
/// most `timeout`; a lost coordinator or the timeout throws std::runtime_error, which the
/// gloo worker reports as the averager's failure.
std::shared_ptr<collective_store> cluster_store(caf::actor_system& system, caf::actor store,
                                                double timeout);

/// The address this node's gloo transport binds to: TROUPE_NODE_ADDRESS when set, else
/// 127.0.0.1 for a run on loopback, else this machine's host name.
std::string gloo_address(const cluster_node& node);

/// A value and a list of keys of the gloo store (cluster_store).
struct store_value {
  std::vector<char> bytes;
};
struct store_keys {
  std::vector<std::string> keys;
};

// Crosses as a string: CAF 0.17 resizes a std::vector<char> to the length the sender
// claims before it reads a byte (data_processor::apply_sequence), so 40 bytes from a peer
// could make this node allocate 4 GiB (the message fuzzer found it); a string's length is
// checked against the bytes the message has left.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_value& x) {
  if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    std::string bytes;
    auto err = f(caf::meta::type_name("troupe::store_value"), bytes);
    x.bytes.assign(bytes.begin(), bytes.end());
    return err;
  } else {
    std::string bytes(x.bytes.begin(), x.bytes.end());
    return f(caf::meta::type_name("troupe::store_value"), bytes);
  }
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_keys& x) {
  return f(caf::meta::type_name("troupe::store_keys"), x.keys);
}

/// Registers the types above and batch_rows_msg, which only cross between nodes (both ends
/// of every link need them; configure_cluster_system does it, and the message fuzzer).
void add_cluster_message_types(caf::actor_system_config& config);

/// Readies an actor system's config for a run over several nodes: CAF's middleman, with
/// node.tls its openssl module too (given the files), and the types above (both ends of
/// every link need them).
void configure_cluster_system(caf::actor_system_config& config, const cluster_node& node);

/// node0: gives a connection that passed the front door (runtime/net/front_door.hpp) to
/// CAF's BASP broker, which greets it as a connection accepted on `port`, where `gate` is
/// published (Note [the front door's hand-over] in cluster_system.cpp); with `tls`, inside
/// a TLS session of the system's openssl settings (configure_cluster_system). Any thread.
void admit_to_network(caf::actor_system& system, unique_fd socket, std::uint16_t port,
                      const caf::actor& gate, bool tls = false);

/// A worker: runs CAF's handshake (inside TLS with `tls`) over a connection to node0 that
/// passed its front door (net::knock), within `wait`; node0's published actor, or the
/// error (a timeout included).
caf::expected<caf::actor> connect_through_door(caf::actor_system& system, unique_fd socket,
                                               std::uint16_t port, std::chrono::milliseconds wait,
                                               bool tls = false);

/// The nodes of a run as the coordinator sees them once everyone joined.
struct joined_cluster {
  roster actors;                                // every node's, the coordinator's included
  std::vector<caf::actor> agents;               // agents[k] for node k >= 1 (agents[0] none)
  std::vector<std::vector<std::string>> names;  // names[k]: node k's actors
  std::vector<std::string> where;               // where[k]: "host pid N"
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, joined_cluster& x) {
  return f(caf::meta::type_name("troupe::joined_cluster"), x.actors, x.agents, x.names, x.where);
}

/// The coordinator's side. Opens the front door on node.listen:node.coordinator_port to
/// the gatekeeper, which answers workers until all have joined or node.timeout passes.
class coordinator_gate {
 public:
  /// Throws user_error when the port cannot be opened.
  coordinator_gate(caf::actor_system& system, const cluster_node& node, caf::actor trainer,
                   caf::actor checkpoint_writer);
  ~coordinator_gate();
  coordinator_gate(const coordinator_gate&) = delete;
  coordinator_gate& operator=(const coordinator_gate&) = delete;

  /// Waits until every worker has joined and adds `own` (node 0's actors). Throws
  /// user_error (a node timed out) or config_error-like user_error (a node runs another
  /// config: both hashes printed).
  joined_cluster wait_for_workers(const roster& own);

  /// Sends every worker the whole roster and waits until each has wired its actors (up
  /// to the timeout each); throws user_error naming a node that did not, or that the
  /// watch lost meanwhile (call watch() first).
  void wire_workers(const joined_cluster& joined);

  /// Starts pinging the workers; a lost node is reported to the trainer.
  void watch(const joined_cluster& joined);

  /// Tells every worker how the run ended, so it exits with `code`, saying `why` (the
  /// coordinator's failure; empty for a run that succeeded).
  void finish(const joined_cluster& joined, int code, const std::string& why = {});

  /// The nodes the watch has lost so far (none before watch()), asked at once.
  std::set<std::int32_t> lost_nodes();

  /// Every live worker's trace (worker_link::serve's `trace_json`) with its clock offset.
  /// A worker that does not answer within the timeout, or that the watch has lost (asked
  /// before each), is left out (and said so on stderr).
  std::vector<trace::node_trace> collect_traces(const joined_cluster& joined);

  /// The run's gloo rendezvous store (cluster_store), on this node.
  const caf::actor& gloo_store() const { return store_; }

 private:
  caf::actor_system& system_;
  cluster_node node_;
  caf::actor trainer_;
  caf::actor store_;
  caf::actor gate_;
  caf::actor watch_;
  std::uint16_t port_ = 0;
  std::unique_ptr<net::front_door> door_;  // node0's port (Note [the front door])
};

/// A worker's side, from connecting to leaving.
class worker_link {
 public:
  /// Connects to the coordinator (retrying until node.timeout) and proves the secret.
  /// Throws user_error (no coordinator, refused, another config).
  worker_link(caf::actor_system& system, const cluster_node& node);
  ~worker_link();
  worker_link(const worker_link&) = delete;
  worker_link& operator=(const worker_link&) = delete;

  const welcome_msg& welcome() const { return welcome_; }

  /// Joins with this node's actors; then serves the coordinator (the roster, heartbeats,
  /// its trace) until it says the run is over. `wire` is called with the whole roster,
  /// `trace_json` when the coordinator asks for this node's trace. Returns the run's exit
  /// code, or throws user_error when the coordinator is lost.
  int serve(const roster& own, const std::function<void(const roster&)>& wire,
            const std::function<std::string()>& trace_json);

 private:
  caf::actor_system& system_;
  cluster_node node_;
  caf::actor gate_;
  welcome_msg welcome_;
  std::string join_proof_;  // proves the secret again with the join (Note [who may claim a rank])
  double offset_us_ = 0;  // node0's trace clock minus this node's (Note [clocks of nodes])
  double rtt_us_ = 0;
};

}  // namespace troupe
