// secret.cpp: reading the shared secret (from the environment or a private file), the
// challenge-response proofs, and thin wrappers over libcrypto's SHA-256, HMAC, RAND_bytes
// and CRYPTO_memcmp (secret.hpp). The file is read through one descriptor, checked with
// fstat on that descriptor, so that what is checked is what is read.
#include "runtime/net/secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "runtime/base/limits.hpp"
#include "runtime/base/unique_fd.hpp"
#include "troupe/error.hpp"

namespace troupe::net {

// Note [proving the secret]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Every node of a run holds the same secret (TROUPE_SECRET, or a file only its owner can
// read). When a worker connects, the two prove to each other that they hold it, and the
// secret itself never crosses the wire:
//
//   1. coordinator -> worker:  C, a fresh random nonce
//   2. worker -> coordinator:  W, a fresh random nonce, and
//                              proof(secret, "worker", C, W, context)
//   3. the coordinator checks that proof with verify_proof; if it fails, it closes the
//      connection (saying only that the proof was wrong, never why);
//   4. coordinator -> worker:  proof(secret, "coordinator", W, C, context)
//   5. the worker checks it; if it fails, the worker is talking to an impostor and stops.
//
// `context` is what the two must also agree on (the worker's rank, the config and plugin
// hashes of config_identity.hpp), so that a proof made for one rank or one config does not
// pass for another. A proof is HMAC-SHA256 under the secret of "troupe proof v1", the role,
// the challenge, the response nonce and the context, each preceded by its length as 8 bytes
// (big-endian): without the lengths, ("ab", "c") and ("a", "bc") would be the same bytes.
//
// What it protects against:
// - an outsider without the secret cannot join the run (it cannot make step 2's proof) nor
//   pose as the coordinator to a worker (it cannot make step 4's);
// - a recorded proof is no use later: each side's proof covers the nonce the other side
//   just drew, so a replayed one answers the wrong question;
// - the roles differ, so a worker's proof cannot be reflected back as a coordinator's, even
//   by a peer that opens a second connection and relays the nonces;
// - refusals are compared in constant time (constant_time_equal), so timing them does not
//   reveal a proof byte by byte.
// What it does not protect against:
// - reading the traffic: tensors, gradients and configs travel in the clear unless the
//   connection is also TLS;
// - an attacker on the path after the handshake: it can still drop, delay, or (without TLS)
//   alter the messages that follow, since only the handshake is authenticated;
// - a leaked secret, or a guessable one: anyone who has it is a member. Use a long random
//   secret (e.g. `openssl rand -hex 32 > secret; chmod 600 secret`).

namespace {

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 0xf];
  }
  return out;
}

std::string octal_mode(mode_t mode) {
  std::ostringstream out;
  out << std::oct << std::setw(4) << std::setfill('0') << (mode & 07777);
  return out.str();
}

void append_field(std::string& message, std::string_view field) {
  const std::uint64_t size = field.size();
  for (int shift = 56; shift >= 0; shift -= 8)
    message += static_cast<char>((size >> shift) & 0xff);
  message.append(field.data(), field.size());
}

}  // namespace

std::string read_secret_file(const std::string& path, const std::string& source) {
  // Quoted through quote_user_text: a path (or a variable holding one) may be megabytes.
  const std::string where = "secret file " + quote_user_path(path) + " (" + source + ")";
  // O_NONBLOCK: a FIFO at that path must not hang the open; it is refused below.
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.get() < 0)
    throw user_error("cannot read the " + where + ": " + std::strerror(errno));
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0)
    throw user_error("cannot read the " + where + ": " + std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    throw user_error("the " + where + " is not a regular file: expected a file holding the secret");
  if ((status.st_mode & 077) != 0)
    throw user_error("the " + where + " has mode " + octal_mode(status.st_mode) +
                     ": group or others may use it, but a secret file must be private to its "
                     "owner (mode & 077 == 0); run `chmod 600 " +
                     quote_user_path(path) + "`");
  if (static_cast<std::uint64_t>(status.st_size) > max_secret_file_bytes)
    throw user_error("the " + where + " holds " + std::to_string(status.st_size) +
                     " bytes: expected a secret of at most " +
                     std::to_string(max_secret_file_bytes) + " bytes (is it the right file?)");
  std::string secret;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      throw user_error("cannot read the " + where + ": " + std::strerror(errno));
    if (got == 0)
      break;
    secret.append(buffer, static_cast<std::size_t>(got));
    if (secret.size() > max_secret_file_bytes)  // it grew after fstat
      throw user_error("the " + where + " holds more than " +
                       std::to_string(max_secret_file_bytes) + " bytes: expected a secret");
  }
  // One trailing newline, as `echo secret > file` and editors leave it; no more, so that a
  // secret that ends in whitespace on purpose keeps it.
  if (!secret.empty() && secret.back() == '\n') {
    secret.pop_back();
    if (!secret.empty() && secret.back() == '\r')
      secret.pop_back();
  }
  if (secret.empty())
    throw user_error("the " + where + " is empty: expected the secret in it");
  return secret;
}

std::optional<shared_secret> load_secret(const std::string& secret_file,
                                         const std::function<const char*(const char*)>& getenv) {
  const char* value = getenv("TROUPE_SECRET");
  const char* file = getenv("TROUPE_SECRET_FILE");
  if (value != nullptr && file != nullptr)
    throw user_error("both TROUPE_SECRET and TROUPE_SECRET_FILE=" + quote_user_path(file) +
                     " are set: expected one of them (unset the other)");
  if (value != nullptr) {
    if (*value == '\0')
      throw user_error(
          "TROUPE_SECRET is set but empty: expected the secret (or unset it to use none)");
    return shared_secret{value, "TROUPE_SECRET"};
  }
  if (file != nullptr) {
    if (*file == '\0')
      throw user_error(
          "TROUPE_SECRET_FILE is set but empty: expected the path of a file "
          "holding the secret");
    const std::string source = "TROUPE_SECRET_FILE=" + quote_user_path(file);
    return shared_secret{read_secret_file(file, source), source};
  }
  if (!secret_file.empty())
    return shared_secret{read_secret_file(secret_file, "the secret_file setting"),
                         "secret file " + quote_user_path(secret_file)};
  return std::nullopt;
}

// Note [the machine's own secret]
// A run whose nodes all share this machine may go without a secret given to it (torchrun
// or mpirun on one host); its front door (front_door.cpp) still asks for one, so such a run
// uses a secret kept for the user on this machine: 32 random bytes in hex, in a private
// file that the first node to need it writes. That keeps other users of the machine out, as
// a secret given by hand would; it does not keep out the user's own processes, which can
// read the file. Written beside its place and then linked there, so that of two nodes
// starting at once one writes it and both read the same bytes.
shared_secret machine_secret(const std::function<const char*(const char*)>& getenv) {
  std::string directory;
  if (const char* runtime = getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime == '/')
    directory = std::string(runtime) + "/troupe";
  else if (const char* home = getenv("HOME"); home != nullptr && *home == '/')
    directory = std::string(home) + "/.cache/troupe";
  else
    throw user_error(
        "a run over several nodes of this machine without a shared secret keeps one of its own "
        "under $XDG_RUNTIME_DIR or $HOME, and neither is set to a path: set TROUPE_SECRET or "
        "TROUPE_SECRET_FILE on every node");
  const auto cannot = [&](const std::string& what) {
    return user_error("cannot " + what + " for this machine's own secret: " + std::strerror(errno) +
                      "; set TROUPE_SECRET or TROUPE_SECRET_FILE on every "
                      "node instead");
  };
  for (auto slash = directory.find('/', 1);; slash = directory.find('/', slash + 1)) {
    const auto part = directory.substr(0, slash);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      throw cannot("make the directory " + quote_user_path(part));
    if (slash == std::string::npos)
      break;
  }
  const std::string path = directory + "/loopback-secret";
  if (::access(path.c_str(), F_OK) != 0) {
    const std::string draft = path + "." + std::to_string(::getpid());
    unique_fd fd{
        ::open(draft.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)};
    const auto bytes = random_nonce(32);
    const auto text = to_hex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    if (fd.get() < 0 ||
        ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        fd.close() != 0)
      throw cannot("write " + quote_user_path(draft));
    const bool linked = ::link(draft.c_str(), path.c_str()) == 0 || errno == EEXIST;
    ::unlink(draft.c_str());
    if (!linked)
      throw cannot("write " + quote_user_path(path));
  }
  return {read_secret_file(path, "this machine's own secret"), "this machine's own secret file"};
}

std::string openssl_reason() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    out += (out.empty() ? "" : "; ") + std::string(text);
  }
  return out.empty() ? "no reason given by OpenSSL" : out;
}

std::string random_nonce(std::size_t bytes) {
  TROUPE_CHECK(bytes > 0 && bytes <= 1024, "a nonce of " << bytes << " bytes");
  std::string out(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(bytes)) != 1)
    throw user_error("cannot draw " + std::to_string(bytes) +
                         " random bytes for a nonce (OpenSSL RAND_bytes): " + openssl_reason(),
                     exit_code::run_failed);
  return out;
}

std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  TROUPE_CHECK(key.size() <= INT_MAX, "an HMAC key of " << key.size() << " bytes");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &size) == nullptr)
    throw user_error("HMAC-SHA256 failed (OpenSSL): " + openssl_reason(), exit_code::run_failed);
  return to_hex(digest, size);
}

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw user_error("SHA-256 failed (OpenSSL): " + openssl_reason(), exit_code::run_failed);
  return to_hex(digest, size);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string proof(const std::string& secret, std::string_view role, std::string_view challenge,
                  std::string_view response_nonce, std::string_view context) {
  TROUPE_CHECK(role == worker_role || role == coordinator_role,
               "a proof for the role '" << role << "' (expected worker or coordinator)");
  TROUPE_CHECK(!secret.empty(), "a proof under an empty secret");
  std::string message;
  append_field(message, "troupe proof v1");
  append_field(message, role);
  append_field(message, challenge);
  append_field(message, response_nonce);
  append_field(message, context);
  return hmac_sha256_hex(secret, message);
}

bool verify_proof(const std::string& secret, std::string_view role, std::string_view challenge,
                  std::string_view response_nonce, std::string_view context,
                  std::string_view received) {
  return constant_time_equal(proof(secret, role, challenge, response_nonce, context), received);
}

}  // namespace troupe::net
