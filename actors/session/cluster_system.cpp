// cluster_system.cpp: an actor system that speaks to the other nodes: CAF's network
// (caf::io, and the openssl module's TLS sessions with [cluster] tls), the message types
// that cross, and the hand-over of connections that passed the front door.
#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/interfaces.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/openssl/all.hpp>
#include <caf/openssl/session.hpp>

#include "actors/base/batch_rows.hpp"
#include "actors/session/cluster.hpp"
#include "actors/training/checkpoint_writer.hpp"

namespace troupe {

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

// Note [the front door's hand-over]
// With the front door (runtime/net/front_door.cpp, Note [the front door]) CAF accepts and
// connects nothing on node0's port; troupe gives it each connection once both ends proved
// the secret, through the two messages CAF 0.17's BASP broker takes for connections it did
// not open itself (caf/io/basp_broker.cpp):
//   node0:  (publish_atom, scribe, port, actor, signatures): the broker adds the connection,
//           publishes the actor at that port (as publish does) and sends its server
//           handshake, as for a connection its own acceptor took;
//   worker: (connect_atom, scribe, port): the broker adds the connection, sends its client
//           handshake and answers with node0's node, published actor and signatures, as
//           it answers CAF's middleman actor for remote_actor.
// The scribe is CAF's for a connected socket (its multiplexer's new_scribe, which makes it
// non-blocking with TCP_NODELAY, as CAF's own does off its thread). The broker is the named
// broker "BASP" that the middleman started with the system. What CAF's middleman actor
// adds on a worker and troupe does not need: a cache of connections by host and port (a
// worker connects once) and a monitor on the remote actor (the worker watches node0
// itself, Note [joining a run] in cluster.cpp).

namespace {

caf::actor basp_broker(caf::actor_system& system) {
  return system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

// A stream's reads and writes through a TLS session (CAF's openssl module's, which holds
// the SSL object and reports its handshake's progress as rw_state).
struct tls_io {
  explicit tls_io(caf::openssl::session_ptr session) : session(std::move(session)) {}
  caf::io::network::rw_state read_some(std::size_t& n, caf::io::network::native_socket fd,
                                       void* buffer, std::size_t size) {
    return session->read_some(n, fd, buffer, size);
  }
  caf::io::network::rw_state write_some(std::size_t& n, caf::io::network::native_socket fd,
                                        const void* buffer, std::size_t size) {
    return session->write_some(n, fd, buffer, size);
  }
  bool must_read_more(caf::io::network::native_socket fd, std::size_t threshold) {
    return session->must_read_more(fd, threshold);
  }
  caf::openssl::session_ptr session;
};

// A connection inside TLS as a BASP broker holds it (Note [TLS between nodes] in
// cluster.cpp): CAF's own scribe over a socket, but reading and writing through the session.
class tls_scribe final : public caf::io::scribe {
 public:
  tls_scribe(caf::io::network::default_multiplexer& mpx, caf::io::network::native_socket fd,
             caf::openssl::session_ptr session)
      : caf::io::scribe(caf::io::network::conn_hdl_from_socket(fd)),
        stream_(mpx, fd, std::move(session)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!started_) {
      started_ = true;
      stream_.start(this);
      stream_.force_empty_write(this);  // the handshake may have bytes to write first
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto address = caf::io::network::remote_addr_of_fd(stream_.fd());
    return address ? *address : std::string();
  }
  std::uint16_t port() const override {
    auto port = caf::io::network::remote_port_of_fd(stream_.fd());
    return port ? *port : std::uint16_t{0};
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool started_ = false;
  caf::io::network::stream_impl<tls_io> stream_;
};

// CAF's scribe for `socket`: plain, or inside TLS with [cluster] tls (`accepted`: node0's
// end, which answers the TLS handshake).
caf::io::scribe_ptr scribe_for(caf::actor_system& system, unique_fd socket, bool tls,
                               bool accepted) {
  auto& mpx = static_cast<caf::io::network::default_multiplexer&>(system.middleman().backend());
  if (!tls)
    return mpx.new_scribe(socket.release());
  auto session = caf::openssl::make_session(system, socket.get(), accepted);
  if (!session)
    throw user_error(
        "OpenSSL could not start a TLS session on a connection between nodes (the other end "
        "speaks no TLS, or a certificate does not verify against [cluster] ca_file?)",
        exit_code::run_failed);
  const int fd = socket.release();
  return caf::make_counted<tls_scribe>(mpx, fd, std::move(session));
}

}  // namespace

void admit_to_network(caf::actor_system& system, unique_fd socket, std::uint16_t port,
                      const caf::actor& gate, bool tls) {
  auto scribe = scribe_for(system, std::move(socket), tls, true);
  caf::anon_send(basp_broker(system), caf::publish_atom::value, std::move(scribe), port,
                 caf::actor_cast<caf::strong_actor_ptr>(gate), std::set<std::string>{});
}

caf::expected<caf::actor> connect_through_door(caf::actor_system& system, unique_fd socket,
                                               std::uint16_t port, std::chrono::milliseconds wait,
                                               bool tls) {
  caf::io::scribe_ptr scribe;
  try {
    scribe = scribe_for(system, std::move(socket), tls, false);
  } catch (const user_error& e) {  // OpenSSL refused at once: node0 speaks no TLS, say
    return caf::make_error(caf::sec::cannot_connect_to_node, std::string(e.what()));
  }
  caf::scoped_actor self{system};
  caf::expected<caf::actor> out{caf::sec::no_actor_published_at_port};
  self->request(basp_broker(system), wait, caf::connect_atom::value, std::move(scribe), port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& remote, const std::set<std::string>&) {
            if (remote)
              out = caf::actor_cast<caf::actor>(std::move(remote));
          },
          [&](caf::error& error) { out = std::move(error); });
  return out;
}

}  // namespace troupe
