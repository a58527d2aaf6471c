// tls.cpp: check_tls, with OpenSSL's libssl (the library CAF's openssl module uses).
#include "runtime/net/tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <cstring>
#include <memory>
#include <utility>

#include "runtime/net/secret.hpp"
#include "troupe/error.hpp"

namespace troupe::net {

namespace {

struct context_free {
  void operator()(SSL_CTX* context) const { SSL_CTX_free(context); }
};
struct store_context_free {
  void operator()(X509_STORE_CTX* context) const { X509_STORE_CTX_free(context); }
};

// Hands OpenSSL the key's passphrase; none (0 bytes) when there is none, so that an
// encrypted key fails to load rather than OpenSSL asking on the terminal.
int passphrase_callback(char* buffer, int size, int, void* user) {
  const auto& passphrase = *static_cast<const std::string*>(user);
  if (passphrase.empty() || passphrase.size() >= static_cast<std::size_t>(size))
    return 0;
  std::memcpy(buffer, passphrase.data(), passphrase.size());
  return static_cast<int>(passphrase.size());
}

[[noreturn]] void fail(const char* key, const std::string& path, const std::string& what,
                       const std::string& hint) {
  throw user_error("[cluster] " + std::string(key) + " '" + path + "': " + what +
                   " (OpenSSL: " + openssl_reason() + ")" + hint);
}

}  // namespace

void check_tls(const tls_files& files) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, context_free> context{SSL_CTX_new(TLS_method())};
  if (!context)
    throw user_error("OpenSSL cannot make a TLS context: " + openssl_reason(),
                     exit_code::run_failed);
  SSL_CTX* ctx = context.get();
  if (SSL_CTX_use_certificate_chain_file(ctx, files.certificate.c_str()) != 1)
    fail("certificate", files.certificate, "cannot be read as a PEM certificate (chain)",
         "; expected this node's certificate, e.g. from `openssl req -x509` or your CA");
  std::string passphrase = files.passphrase;
  SSL_CTX_set_default_passwd_cb(ctx, passphrase_callback);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, &passphrase);
  const auto not_its_key = [&] {
    fail("key", files.key, "is not the private key of the certificate '" + files.certificate + "'",
         "; name the key that was made with that certificate");
  };
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
      not_its_key();
    fail("key", files.key, "cannot be read as a PEM private key",
         files.passphrase.empty()
             ? "; if the key is encrypted, put its passphrase in a file and name it in "
               "[cluster] key_passphrase_file"
             : "; is [cluster] key_passphrase_file the passphrase of this key?");
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    not_its_key();
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1)
    fail("ca_file", files.ca_file, "cannot be read as PEM CA certificates",
         "; expected the certificate of the CA that signed every node's certificate");
  // The peers verify this node's certificate against their ca_file (the same file on every
  // node of one config), node0 as a TLS server's and the workers as a client's: verify it
  // here first for both, so that a certificate from another CA, or one whose extended key
  // usage allows only one of the two, is refused at its source, not as a failed handshake
  // on the other end.
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  for (auto [purpose, role] : {std::pair{X509_PURPOSE_SSL_SERVER, "a TLS server's (node0)"},
                               std::pair{X509_PURPOSE_SSL_CLIENT, "a TLS client's (a worker)"}}) {
    std::unique_ptr<X509_STORE_CTX, store_context_free> verify{X509_STORE_CTX_new()};
    if (!verify || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(ctx),
                                       SSL_CTX_get0_certificate(ctx), chain) != 1)
      throw user_error("OpenSSL cannot verify a certificate: " + openssl_reason(),
                       exit_code::run_failed);
    X509_STORE_CTX_set_purpose(verify.get(), purpose);
    if (X509_verify_cert(verify.get()) != 1)
      throw user_error(
          "[cluster] certificate '" + files.certificate + "': does not verify as " + role +
          " against [cluster] ca_file '" + files.ca_file +
          "': " + X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get())) +
          "; the other nodes would refuse it: sign it with that CA for both server and client "
          "use (or without extendedKeyUsage), or name the CA that signed it");
  }
  ERR_clear_error();
}

}  // namespace troupe::net
