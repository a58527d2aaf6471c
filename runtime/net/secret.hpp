// secret.hpp: the cluster's shared secret, where it comes from, and how two nodes prove to
// each other that they hold it without sending it (HMAC-SHA256 challenge and response,
// Note [proving the secret] in secret.cpp). Also the hashing and random bytes that the
// proofs and config_identity.hpp use, from OpenSSL's libcrypto.
//
//   const auto secret = troupe::net::load_secret(settings.secret_file);  // std::nullopt: none
//   // coordinator: C = random_nonce(32), send C
//   // worker:      W = random_nonce(32), send W and proof(secret, "worker", C, W, context)
//   // coordinator: verify_proof(...), send proof(secret, "coordinator", W, C, context)
//   // worker:      verify_proof(secret, "coordinator", W, C, context, received)
//
// Not here: the sockets and messages that carry nonces and proofs, encryption (the proofs
// authenticate the peers; they do not hide or protect the traffic after them), deciding
// whether a run may go without a secret (the caller's call; load_secret only reports none).
#pragma once

#include <stdlib.h>  // ::getenv

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::net {

/// The shared secret and where it was read, for messages ("TROUPE_SECRET",
/// "TROUPE_SECRET_FILE=/etc/troupe/secret", "secret file /etc/troupe/secret").
struct shared_secret {
  std::string value;   // never empty; never printed
  std::string source;  // where it came from
};

/// The largest secret file read; a larger file is taken for the wrong file.
inline constexpr std::size_t max_secret_file_bytes = 64 * 1024;

/// The secret, from the first of: the variable TROUPE_SECRET (its value), the variable
/// TROUPE_SECRET_FILE (a path), `secret_file` (a path from the caller, e.g. the config's
/// [cluster] secret_file; "" for none). The environment wins over the config so that one
/// machine can override it. std::nullopt when none of them is set: the caller decides
/// whether the run may go without one.
///
/// A secret file must be a regular file of at most max_secret_file_bytes that neither group
/// nor others may read, write or execute (mode & 077 == 0, as ssh asks of its keys); one
/// trailing newline ("\n" or "\r\n") is stripped. Throws user_error naming the source when
/// both variables are set, a file cannot be read, is not a regular file, is too large, or
/// has a wider mode (the message gives the mode in octal and the fix, `chmod 600 FILE`),
/// or when the secret is empty.
std::optional<shared_secret> load_secret(
    const std::string& secret_file = "",
    const std::function<const char*(const char*)>& getenv = ::getenv);

/// The secret of this user on this machine, for a run whose nodes all share the machine
/// and were given no secret (Note [the machine's own secret] in secret.cpp): read from
/// $XDG_RUNTIME_DIR/troupe/loopback-secret, or $HOME/.cache/troupe/loopback-secret, which
/// the first caller writes (32 random bytes in hex, mode 600; the directories 700). Throws
/// user_error when neither variable holds a path, or the file cannot be written or read.
shared_secret machine_secret(const std::function<const char*(const char*)>& getenv = ::getenv);

/// The secret in the file `path`, checked as load_secret says (a private regular file of
/// at most max_secret_file_bytes, one trailing newline stripped, not empty); `source`
/// names the setting in messages. Also for other secrets kept in files, like the TLS
/// key's passphrase ([cluster] key_passphrase_file).
std::string read_secret_file(const std::string& path, const std::string& source);

/// OpenSSL's queued error reasons, oldest first ("error:...: reason; ..."), and its queue
/// emptied; a placeholder when it queued none. For messages of the calls that failed.
std::string openssl_reason();

/// `bytes` random bytes (raw, not hex) from OpenSSL's RAND_bytes, for nonces. Throws
/// user_error (exit_code::run_failed) with OpenSSL's reason when it has no entropy.
std::string random_nonce(std::size_t bytes = 32);

/// HMAC-SHA256 of `message` under `key` (RFC 2104), as 64 lowercase hex digits.
std::string hmac_sha256_hex(const std::string& key, const std::string& message);
/// SHA-256 of `data` (FIPS 180-4), as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

/// Whether `a` and `b` are equal, taking a time that depends on their length only and not
/// on where they first differ (CRYPTO_memcmp), so that a peer cannot find a proof byte by
/// byte by timing the refusals. Different lengths are unequal at once.
bool constant_time_equal(std::string_view a, std::string_view b);

/// The role of the party that computes a proof: "worker" or "coordinator". Anything else
/// fails a TROUPE_CHECK.
inline constexpr std::string_view worker_role = "worker";
inline constexpr std::string_view coordinator_role = "coordinator";

/// The proof that the party in `role` holds `secret`, for the nonce `challenge` it was sent
/// and the nonce `response_nonce` it sends back, bound to `context` (what the two must agree
/// on, e.g. the rank and the config hash): HMAC-SHA256 under the secret of a versioned tag
/// and the four fields, each preceded by its length, so that no field's bytes can be moved
/// into its neighbour. 64 lowercase hex digits. Note [proving the secret] in secret.cpp
/// gives the exchange and what it does and does not protect.
std::string proof(const std::string& secret, std::string_view role, std::string_view challenge,
                  std::string_view response_nonce, std::string_view context);

/// Whether `received` is proof(secret, role, challenge, response_nonce, context), compared
/// in constant time.
bool verify_proof(const std::string& secret, std::string_view role, std::string_view challenge,
                  std::string_view response_nonce, std::string_view context,
                  std::string_view received);

}  // namespace troupe::net
