// cluster.cpp: one run over several processes: how a node joins (the Notes below, which
// the gatekeeper, the node watch, the gate and the link follow) and a node's place in the
// run, from its launcher's environment and the config's [cluster].
//
// The pieces: gatekeeper.cpp (node0's door), node_watch.cpp (lost nodes), gloo_store.cpp
// (gloo's rendezvous), cluster_system.cpp (CAF's network and TLS), coordinator_gate.cpp
// and worker_link.cpp (the two sides as the session sees them).
#include "actors/session/cluster.hpp"

#include <unistd.h>

#include <cstdlib>

#include "actors/session/cluster_protocol.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/net/launch_env.hpp"
#include "runtime/net/secret.hpp"
#include "troupe/plugin.hpp"

namespace troupe {

// Note [joining a run]
// The handles of the trainer and of every actor are given only to a worker that proved
// the shared secret (runtime/net/secret.hpp, Note [proving the secret]). The proof is
// bound to the worker's rank and to the hashes of its config and plugins, so a proof made
// for another run, rank or config does not pass. A worker that cannot prove it is refused,
// named in the coordinator's log, and ends with an error; the run goes on waiting for the
// real one until the rendezvous timeout. Before any of this, a peer proved the secret at
// node0's front door (runtime/net/front_door.cpp, Note [the front door]): no byte of a peer
// without it reaches CAF's network layer (BASP), whose holes (a header without its payload
// crashed node0, a forged message reached any actor by its number) are behind it. This
// proof binds what the door's does not: the rank and the config.
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
// With [cluster] tls every link between nodes runs inside TLS (1.2 or 1.3, ciphers
// "HIGH:!aNULL:!MD5"), after the front door (Note [the front door] in
// runtime/net/front_door.cpp): a connection first proves the secret in the clear, then
// node0 and the worker start a TLS session on it (CAF's openssl module's session, with the
// certificate, key and CA file of its options), and CAF's handshake and everything after
// run inside it (cluster_system.cpp: a scribe of troupe's that reads and writes through the
// session, handed to the BASP broker as the plain one is). So the door's bounds hold with
// TLS too, and a peer without the secret never starts a TLS handshake. With a CA file, the
// session sets SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT on both ends: node0
// requires each worker's certificate and each worker node0's, and OpenSSL checks that it
// chains to a CA of ca_file and is within its validity dates. CAF names no host to check,
// so the peer's host name is not compared with its certificate: any certificate the CA
// signed is as good as another. TLS adds confidentiality and integrity of the traffic; the
// secret still decides who gets in and who joins.
//
// CAF loads the files only when a session starts, on its network thread, where a file that
// does not load ends the process: net::check_tls loads them first (cluster_from_
// environment), so that is a user error naming the file. A plain node and a TLS node pass
// the door (the same secret) and then fail the next handshake at once (each end's first
// bytes are garbage to the other); the worker retries until [cluster] timeout. Not
// covered: gloo's own TCP transport (averaging = "gloo"), which run_session refuses with
// tls (Note [gloo outside the door] in run_modes.cpp).

using node_protocol::is_loopback;

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
  else if (node.coordinator() ? is_loopback(node.listen) : is_loopback(node.coordinator_host))
    node.secret = net::machine_secret(getenv).value;  // Note [the machine's own secret]
  if (c.tls) {
    node.tls = net::tls_files{c.certificate, c.key, c.ca_file, {}};
    if (!c.key_passphrase_file.empty())
      node.tls->passphrase =
          net::read_secret_file(c.key_passphrase_file, "[cluster] key_passphrase_file");
    net::check_tls(*node.tls);
  }
  if (!node.secret && node.coordinator())
    throw user_error("the coordinator would listen on " + node.listen +
                     ", beyond this machine, without a shared secret: set TROUPE_SECRET or "
                     "TROUPE_SECRET_FILE, or [cluster] secret_file, on every node");
  if (!node.secret)
    throw user_error("node" + std::to_string(node.rank) + " would reach node0 at " +
                     quote_user_text(node.coordinator_host) +
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

}  // namespace troupe
