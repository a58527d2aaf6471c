// secret_test.cpp: the hashes against their standards' vectors (RFC 4231 for HMAC-SHA256,
// FIPS 180-4 for SHA-256), the challenge-response proofs (the exchange of Note [proving the
// secret] passes; a wrong secret, a swapped role, shifted fields, another context or a
// replayed nonce fail), and where the secret comes from (the environment, a private file;
// wide modes, empty secrets and ambiguous sources refused).
#include "runtime/net/secret.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::test::temp_directory;

namespace {

namespace fs = std::filesystem;

using environment = std::map<std::string, std::string>;

std::optional<shared_secret> secret_from(const environment& variables,
                                         const std::string& secret_file = "") {
  return load_secret(secret_file, [&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

using troupe::test::user_error_of;

using troupe::test::contains;

// A file holding `text` with the permission bits `mode`.
std::string secret_file(const temp_directory& directory, const std::string& name,
                        const std::string& text, fs::perms mode) {
  const auto path = directory.write(name, text);
  fs::permissions(path, mode, fs::perm_options::replace);
  return path;
}

constexpr auto owner_read_write = fs::perms::owner_read | fs::perms::owner_write;  // 0600

}  // namespace

TEST_CASE("HMAC-SHA256 gives RFC 4231's results for its test cases 1, 2, 3, 6 and 7") {
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hmac_sha256_hex(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Keys longer than SHA-256's 64-byte block are hashed first (cases 6 and 7).
  CHECK(hmac_sha256_hex(std::string(131, '\xaa'),
                        "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hmac_sha256_hex(std::string(131, '\xaa'),
                        "This is a test using a larger than block-size key and a larger than "
                        "block-size data. The key needs to be hashed before being used by the "
                        "HMAC algorithm.") ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("SHA-256 of \"abc\" and of nothing are FIPS 180-4's") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex(std::string("a\0b", 3)) != sha256_hex("a"));  // bytes past a NUL count
}

TEST_CASE("constant_time_equal is equality of length and of every byte") {
  CHECK(constant_time_equal("", ""));
  CHECK(constant_time_equal("abc", "abc"));
  CHECK_FALSE(constant_time_equal("abc", "abd"));
  CHECK_FALSE(constant_time_equal("abc", "ab"));
  CHECK_FALSE(constant_time_equal("", "a"));
  CHECK_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST_CASE("random nonces have the length asked for and never repeat") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const auto nonce = random_nonce(32);
    CHECK(nonce.size() == 32);
    seen.insert(nonce);
  }
  CHECK(seen.size() == 100);  // 100 draws of 256 bits: a repeat means a broken generator
  CHECK(random_nonce(1).size() == 1);
  CHECK_THROWS_AS(random_nonce(0), check_failure);
}

TEST_CASE("the exchange of Note [proving the secret] passes when both hold the secret") {
  const std::string secret = "correct horse battery staple";
  const std::string context = "rank 3; config sha256 ab12";
  const auto challenge = random_nonce();  // C, from the coordinator
  const auto response = random_nonce();   // W, from the worker
  const auto from_worker = proof(secret, worker_role, challenge, response, context);
  CHECK(from_worker.size() == 64);
  CHECK(verify_proof(secret, worker_role, challenge, response, context, from_worker));
  const auto from_coordinator = proof(secret, coordinator_role, response, challenge, context);
  CHECK(verify_proof(secret, coordinator_role, response, challenge, context, from_coordinator));
  CHECK(from_worker != from_coordinator);
}

TEST_CASE("a proof made without the secret, for the other role, or with fields moved fails") {
  const std::string secret = "s3cret";
  const auto good = proof(secret, worker_role, "challenge", "response", "context");
  SUBCASE("a wrong secret") {
    CHECK_FALSE(verify_proof(secret, worker_role, "challenge", "response", "context",
                             proof("s3cret!", worker_role, "challenge", "response", "context")));
  }
  SUBCASE("a worker's proof offered as the coordinator's (a reflection)") {
    CHECK_FALSE(verify_proof(secret, coordinator_role, "challenge", "response", "context", good));
  }
  SUBCASE("the nonces swapped") {
    CHECK_FALSE(verify_proof(secret, worker_role, "response", "challenge", "context", good));
  }
  SUBCASE("bytes moved across a field boundary") {
    CHECK(proof(secret, worker_role, "challeng", "eresponse", "context") != good);
    CHECK(proof(secret, worker_role, "challenge", "respons", "econtext") != good);
    CHECK(proof(secret, worker_role, "challengeresponse", "", "context") != good);
  }
  SUBCASE("another context (another rank or config)") {
    CHECK_FALSE(verify_proof(secret, worker_role, "challenge", "response", "context2", good));
  }
  SUBCASE("a replay against a fresh challenge") {
    CHECK_FALSE(verify_proof(secret, worker_role, "challenge2", "response", "context", good));
  }
  SUBCASE("a truncated or empty proof") {
    CHECK_FALSE(
        verify_proof(secret, worker_role, "challenge", "response", "context", good.substr(0, 63)));
    CHECK_FALSE(verify_proof(secret, worker_role, "challenge", "response", "context", ""));
  }
}

TEST_CASE("a proof for a role other than worker or coordinator is a programmer error") {
  CHECK_THROWS_AS(proof("s", "Worker", "c", "w", ""), check_failure);
}

TEST_CASE("with no secret configured load_secret says so, and the caller decides") {
  CHECK_FALSE(secret_from({}).has_value());
  CHECK_FALSE(secret_from({{"TROUPE_SECRETS", "x"}}).has_value());
}

TEST_CASE("TROUPE_SECRET is the secret as given, trailing newline and all") {
  const auto secret = secret_from({{"TROUPE_SECRET", "abc\n"}});
  REQUIRE(secret.has_value());
  CHECK(secret->value == "abc\n");  // only files lose their newline
  CHECK(secret->source == "TROUPE_SECRET");
}

TEST_CASE("an empty secret, or both variables at once, is refused") {
  CHECK(contains(user_error_of([] {
                   secret_from({{"TROUPE_SECRET", ""}});
                 }),
                 "TROUPE_SECRET is set but empty"));
  CHECK(contains(user_error_of([] {
                   secret_from({{"TROUPE_SECRET_FILE", ""}});
                 }),
                 "TROUPE_SECRET_FILE is set but empty"));
  CHECK(contains(user_error_of([] {
                   secret_from({{"TROUPE_SECRET", "a"}, {"TROUPE_SECRET_FILE", "/f"}});
                 }),
                 "both TROUPE_SECRET and TROUPE_SECRET_FILE='/f' are set"));
}

TEST_CASE("a megabyte path to the secret file is quoted short in every message") {
  const std::string huge = "/" + std::string(1 << 20, 'p');
  for (const auto& message : {user_error_of([&] {
                                secret_from({{"TROUPE_SECRET_FILE", huge}});
                              }),
                              user_error_of([&] { secret_from({}, huge); }), user_error_of([&] {
                                secret_from({{"TROUPE_SECRET", "a"}, {"TROUPE_SECRET_FILE", huge}});
                              })}) {
    CHECK(!message.empty());
    CHECK(message.size() < 2000);
    CHECK(contains(message, "(1048577 bytes)"));
  }
}

TEST_CASE("a private secret file is read with one trailing newline stripped") {
  const temp_directory directory{"troupe-secret"};
  const auto unix_file = secret_file(directory, "unix", "abc\n", owner_read_write);
  const auto windows_file = secret_file(directory, "windows", "abc\r\n", owner_read_write);
  const auto two_lines = secret_file(directory, "two", "abc\n\n", owner_read_write);
  const auto bare = secret_file(directory, "bare", " abc ", fs::perms::owner_read);
  const auto from_variable = secret_from({{"TROUPE_SECRET_FILE", unix_file}});
  REQUIRE(from_variable.has_value());
  CHECK(from_variable->value == "abc");
  CHECK(from_variable->source == "TROUPE_SECRET_FILE='" + unix_file + "'");
  CHECK(secret_from({}, windows_file)->value == "abc");
  CHECK(secret_from({}, two_lines)->value == "abc\n");
  CHECK(secret_from({}, bare)->value == " abc ");
  CHECK(secret_from({}, bare)->source == "secret file '" + bare + "'");
}

TEST_CASE("the environment's secret wins over the caller's secret file") {
  const temp_directory directory{"troupe-secret"};
  const auto config_file = secret_file(directory, "config", "from config", owner_read_write);
  const auto env_file = secret_file(directory, "env", "from env file", owner_read_write);
  CHECK(secret_from({{"TROUPE_SECRET", "from env"}}, config_file)->value == "from env");
  CHECK(secret_from({{"TROUPE_SECRET_FILE", env_file}}, config_file)->value == "from env file");
  CHECK(secret_from({}, config_file)->value == "from config");
}

TEST_CASE("a secret file that group or others may use is refused with its mode and the fix") {
  const temp_directory directory{"troupe-secret"};
  const auto readable =
      secret_file(directory, "readable", "abc",
                  owner_read_write | fs::perms::group_read | fs::perms::others_read);
  auto message = user_error_of([&] { secret_from({}, readable); });
  CHECK(contains(message, "'" + readable + "'"));
  CHECK(contains(message, "has mode 0644"));
  CHECK(contains(message, "chmod 600 '" + readable + "'"));
  const auto group_writable =
      secret_file(directory, "group", "abc", owner_read_write | fs::perms::group_write);
  CHECK(contains(user_error_of([&] { secret_from({}, group_writable); }), "has mode 0620"));
  const auto others_executable =
      secret_file(directory, "others", "abc", owner_read_write | fs::perms::others_exec);
  CHECK(contains(user_error_of([&] {
                   secret_from({{"TROUPE_SECRET_FILE", others_executable}});
                 }),
                 "has mode 0601"));
}

TEST_CASE("an empty, missing, oversized or non-regular secret file is refused, naming it") {
  const temp_directory directory{"troupe-secret"};
  const auto empty = secret_file(directory, "empty", "", owner_read_write);
  const auto newline = secret_file(directory, "newline", "\n", owner_read_write);
  const auto large = secret_file(directory, "large", std::string(max_secret_file_bytes + 1, 'x'),
                                 owner_read_write);
  CHECK(contains(user_error_of([&] { secret_from({}, empty); }), "'" + empty + "'"));
  CHECK(contains(user_error_of([&] { secret_from({}, empty); }), "is empty"));
  CHECK(contains(user_error_of([&] { secret_from({}, newline); }), "is empty"));
  CHECK(contains(user_error_of([&] { secret_from({}, large); }), "at most 65536 bytes"));
  const auto missing = directory / "missing";
  CHECK(contains(user_error_of([&] { secret_from({}, missing); }),
                 "cannot read the secret file '" + missing + "'"));
  CHECK(contains(user_error_of([&] { secret_from({}, missing); }), "No such file"));
  CHECK(contains(user_error_of([&] { secret_from({}, directory.string()); }),
                 "is not a regular file"));
}

TEST_CASE("this machine's own secret is written once, private, and read by every node") {
  // Note [the machine's own secret]: a run of several nodes on one machine with no secret.
  const temp_directory home{"troupe-secret-home"};
  const temp_directory runtime{"troupe-secret-run"};
  auto own_secret = [&](const environment& variables) {
    return machine_secret([&](const char* name) -> const char* {
      const auto found = variables.find(name);
      return found == variables.end() ? nullptr : found->second.c_str();
    });
  };
  const auto first = own_secret({{"HOME", home.string()}});
  CHECK(first.value.size() == 64);
  const auto path = home.string() + "/.cache/troupe/loopback-secret";
  REQUIRE(fs::exists(path));
  CHECK((fs::status(path).permissions() & fs::perms::all) == owner_read_write);
  CHECK((fs::status(home.string() + "/.cache/troupe").permissions() & fs::perms::all) ==
        fs::perms::owner_all);
  // The second node reads the first one's; $XDG_RUNTIME_DIR is preferred when it is set.
  CHECK(own_secret({{"HOME", home.string()}}).value == first.value);
  const auto elsewhere =
      own_secret({{"HOME", home.string()}, {"XDG_RUNTIME_DIR", runtime.string()}});
  CHECK(fs::exists(runtime.string() + "/troupe/loopback-secret"));
  CHECK(elsewhere.value != first.value);
  // Nowhere to keep it: refused, saying what to set instead.
  CHECK(
      contains(user_error_of([&] { own_secret({}); }), "set TROUPE_SECRET or TROUPE_SECRET_FILE"));
  CHECK(contains(user_error_of([&] {
                   own_secret({{"HOME", "relative/home"}});
                 }),
                 "neither is set to a path"));
  // A file someone widened is refused like any secret file.
  fs::permissions(path, owner_read_write | fs::perms::group_read);
  CHECK(contains(user_error_of([&] { own_secret({{"HOME", home.string()}}); }), "has mode 0640"));
}
