// tls.hpp: the files of TLS between nodes ([cluster] tls), loaded once at start-up the way
// CAF's openssl module will load them, so that a wrong file is an error that says which.
//
// CAF 0.17's openssl module (caf::openssl::session) reads the certificate, the key and the
// CA file only when a connection opens, on CAF's network thread, and raises an exception
// there when one does not load: the process dies with no word on which file. check_tls
// makes the same OpenSSL calls (and two more: the key belongs to the certificate, the
// certificate chains to the CA) before the actor system starts.
//
// Not here: the config keys (runtime/config: [cluster] tls, certificate, key, ca_file,
// key_passphrase_file), loading the module and choosing its publish and remote_actor
// (actors/session/cluster.cpp, Note [TLS between nodes]).
#pragma once

#include <string>

namespace troupe::net {

/// What the nodes' TLS contexts are made of; absolute paths.
struct tls_files {
  std::string certificate;  // this node's certificate chain (PEM)
  std::string key;          // its private key (PEM), encrypted when passphrase is set
  std::string ca_file;      // the CA certificates every peer's certificate must chain to
  std::string passphrase;   // the key's; empty: none
};

/// Loads the files into a throwaway OpenSSL context as CAF will (Note [TLS between nodes]
/// in actors/session/cluster.cpp), and checks that the key is the certificate's and that the
/// certificate chains to a CA of ca_file, as every peer will check. Throws user_error
/// naming the [cluster] key, the file and OpenSSL's reason, with a hint.
void check_tls(const tls_files& files);

}  // namespace troupe::net
