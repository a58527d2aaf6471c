// cluster_system.cpp: an actor system that speaks to the other nodes: CAF's network
// (caf::io, or its openssl module with [cluster] tls) and the message types that cross.
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

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

}  // namespace troupe
