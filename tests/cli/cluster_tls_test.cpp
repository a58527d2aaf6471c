// cluster_tls_test.cpp: TLS between nodes ([cluster] tls; Note [TLS between nodes] in
// actors/session/cluster.cpp), with real `troupe` processes on loopback.
//
// Each test makes a throwaway CA and a node certificate signed by it with the `openssl`
// command-line tool, in its own temporary directory; every node of a test uses that one
// certificate (the CA is what the peers check, not the name). Covered: a run inside TLS
// equals a plain one, an encrypted key with its passphrase file, files that do not load
// (refused at start-up, naming the file), and a plain node meeting a TLS one (both end
// within [cluster] timeout, each saying why). Not here: the config keys' positions
// (tests/runtime/config/config_test.cpp), that the bytes on the wire are encrypted (that
// is OpenSSL's, and CAF's choice of ciphers).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "tests/cli/cluster_support.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using namespace troupe::testing::cluster;
using testing::run_troupe;

namespace {

// Runs a shell command quietly; true when it exits 0.
bool shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// In `dir`: ca.pem (a self-signed CA; its key ca.key), node.pem and node.key (a node
// certificate the CA signed), node.enc.key (the same key under the passphrase in pass.txt),
// and other-ca.pem with other.pem / other.key (a second CA and a certificate of its own).
// EC P-256 keys: quick to make.
void make_certificates(const test::temp_directory& dir) {
  const std::string in = "cd '" + dir.string() + "' && openssl ";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  for (const std::string ca : {"ca", "other-ca"})
    REQUIRE(shell(in + "req -x509" + ec + " -keyout " + ca + ".key -out " + ca +
                  ".pem -days 2 -subj /CN=troupe-test-" + ca));
  for (auto [name, ca] : {std::pair{"node", "ca"}, std::pair{"other", "other-ca"}}) {
    const std::string n = name;
    REQUIRE(shell(in + "req" + ec + " -keyout " + n + ".key -out " + n +
                  ".csr -subj /CN=troupe-test-" + n));
    REQUIRE(shell(in + "x509 -req -in " + n + ".csr -CA " + ca + ".pem -CAkey " + ca +
                  ".key -CAcreateserial -out " + n + ".pem -days 2"));
  }
  dir.write("pass.txt", "correct horse\n");
  REQUIRE(shell("chmod 600 '" + dir.file("pass.txt") + "'"));
  REQUIRE(shell(in + "pkey -in node.key -aes256 -passout file:pass.txt -out node.enc.key"));
}

const std::string dp2 = "[parallel]\ndevices = [\"cpu:0\", \"node1/cpu:0\"]\ndata = 2\n";

// [cluster] with TLS from the files of make_certificates (relative to the config file).
std::string tls_cluster(const std::string& certificate = "node.pem",
                        const std::string& key = "node.key", const std::string& extra = "") {
  return "\n[cluster]\ntimeout = 20\ntls = true\ncertificate = \"" + certificate + "\"\nkey = \"" +
         key + "\"\nca_file = \"ca.pem\"\n" + extra;
}

}  // namespace

TEST_CASE("a DP2 run over two processes inside TLS ends with a plain run's parameters") {
  if (!shell("command -v openssl")) {
    MESSAGE(
        "skipped: no `openssl` command to make the test's certificates (apt-get install "
        "openssl)");
    return;
  }
  test::temp_directory dir{"troupe-tls"};
  make_certificates(dir);
  auto plain = dir.write("plain.toml", cluster_config(dp2 + "\n[cluster]\ntimeout = 20\n", 8));
  auto ran = run_troupe("launch -n 2 " + plain + " -q --metrics /dev/null --checkpoint " +
                        dir.file("plain-ckpt"));
  INFO(ran.output);
  REQUIRE(ran.exit_code == 0);
  auto tls = dir.write("tls.toml", cluster_config(dp2 + tls_cluster(), 8));
  auto launched = run_troupe("launch -n 2 " + tls + " --metrics /dev/null --no-progress-bar " +
                             "--checkpoint " + dir.file("tls-ckpt"));
  INFO(launched.output);
  REQUIRE(launched.exit_code == 0);
  CHECK(launched.output.find("done: 8 steps") != std::string::npos);
  // The same messages, only encrypted. Tolerance as in cluster_test.cpp (1e-5 relative:
  // float summation order, were it ever to differ between two runs, stays far below it).
  check_same_parameters(final_parameters(dir.file("tls-ckpt")),
                        final_parameters(dir.file("plain-ckpt")));
  // An encrypted key, with its passphrase in a file.
  auto encrypted = dir.write(
      "encrypted.toml", cluster_config(dp2 + tls_cluster("node.pem", "node.enc.key",
                                                         "key_passphrase_file = \"pass.txt\"\n"),
                                       3));
  launched = run_troupe("launch -n 2 " + encrypted + " --metrics /dev/null --no-progress-bar");
  INFO(launched.output);
  CHECK(launched.exit_code == 0);
  CHECK(launched.output.find("done: 3 steps") != std::string::npos);
}

TEST_CASE("TLS files that do not load are refused at start-up, naming the file and the fix") {
  if (!shell("command -v openssl")) {
    MESSAGE("skipped: no `openssl` command to make the test's certificates");
    return;
  }
  test::temp_directory dir{"troupe-tls"};
  make_certificates(dir);
  struct bad_case {
    const char* what;
    std::string cluster;
    std::string expected;
  };
  const std::vector<bad_case> cases = {
      {"an encrypted key without its passphrase", tls_cluster("node.pem", "node.enc.key"),
       "[cluster] key '" + dir.file("node.enc.key") + "': cannot be read as a PEM private key"},
      {"the key of another certificate", tls_cluster("node.pem", "other.key"),
       "is not the private key of the certificate '" + dir.file("node.pem") + "'"},
      {"a certificate from another CA", tls_cluster("other.pem", "other.key"),
       "[cluster] certificate '" + dir.file("other.pem") + "': does not verify as a TLS " +
           "server's (node0) against [cluster] ca_file '" + dir.file("ca.pem") + "'"},
      {"a certificate that is not PEM", tls_cluster("pass.txt", "node.key"),
       "cannot be read as a PEM certificate (chain)"},
  };
  for (const auto& c : cases) {
    INFO("case: " << c.what);
    auto config = dir.write("bad.toml", cluster_config(dp2 + c.cluster, 3));
    auto launched = run_troupe("launch -n 2 " + config + " -q --metrics /dev/null");
    INFO(launched.output);
    CHECK(launched.exit_code == 2);
    CHECK(launched.output.find(c.expected) != std::string::npos);
  }
  // gloo's transport is not inside TLS: refused rather than sent in the clear.
  auto gloo =
      dir.write("gloo.toml", cluster_config(dp2 + "averaging = \"gloo\"\n" + tls_cluster(), 3));
  auto launched = run_troupe("launch -n 2 " + gloo + " -q --metrics /dev/null");
  INFO(launched.output);
  CHECK(launched.exit_code == 2);
  CHECK(launched.output.find("averaging = \"gloo\" sends the gradients over gloo's own TCP "
                             "connections, which [cluster] tls") != std::string::npos);
}

TEST_CASE("a plain node and a TLS node do not hang: both end within [cluster] timeout") {
  if (!shell("command -v openssl")) {
    MESSAGE("skipped: no `openssl` command to make the test's certificates");
    return;
  }
  test::temp_directory dir{"troupe-tls"};
  make_certificates(dir);
  // timeout = 4: how long the worker retries and node0 waits for it.
  auto tls = dir.write("tls.toml", cluster_config(dp2 + "\n[cluster]\ntimeout = 4\ntls = true\n"
                                                        "certificate = \"node.pem\"\nkey = "
                                                        "\"node.key\"\nca_file = \"ca.pem\"\n",
                                                  3));
  auto plain = dir.write("plain.toml", cluster_config(dp2 + "\n[cluster]\ntimeout = 4\n", 3));
  struct pairing {
    const char* name;
    std::string coordinator_config, worker_config;
    std::string worker_says;
  };
  const std::vector<pairing> pairings = {
      {"a plain worker at a TLS node0", tls, plain,
       "it answered, but no handshake succeeded: node0 closed the connection during CAF's "
       "handshake"},
      {"a TLS worker at a plain node0", plain, tls,
       "it answered, but no handshake succeeded: the TLS handshake failed"},
  };
  for (const auto& p : pairings) {
    INFO("pairing: " << p.name);
    const int port = free_port();
    const auto started = clock_type::now();
    const std::string log = dir.file(std::to_string(&p - pairings.data()));
    node_process coordinator{troupe_env(0, 2, port),
                             {"run", p.coordinator_config, "--metrics", "/dev/null"},
                             log + "-0.log"};
    node_process worker{troupe_env(1, 2, port), {"run", p.worker_config}, log + "-1.log"};
    // 4 s of timeout, plus start-up and a last attempt: 15 s is a hang.
    CHECK(worker.wait(15) == 1);
    CHECK(coordinator.wait(15) == 1);
    CHECK(seconds_since(started) < 15);
    INFO("node0 printed:\n" << coordinator.output() << "\nnode1 printed:\n" << worker.output());
    CHECK(worker.output().find("node1 could not reach the coordinator at 127.0.0.1:" +
                               std::to_string(port) + " within 4 s") != std::string::npos);
    CHECK(worker.output().find(p.worker_says) != std::string::npos);
    CHECK(worker.output().find("and that [cluster] tls is the same on every node") !=
          std::string::npos);
    CHECK(coordinator.output().find("missing node1") != std::string::npos);
  }
}
