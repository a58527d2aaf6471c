// fuzz_door.cpp: libFuzzer harness for node0's front door (issue 53), the first code that
// reads a peer's bytes (runtime/net/front_door.hpp, Note [the front door]): the server's
// side of the proof, fed the input in chunks as a socket would deliver it.
//
// The input's first byte chooses the chunk size (1 + byte / 2) and the mode (its lowest
// bit): 0, the rest as the peer's bytes; 1, a right answer for the harness's nonce and
// secret with the rest XORed over it (and what is longer appended), so that mutations of a
// real proof are tried too. Findings: a crash; a sanitizer report; the door taking more
// bytes than it asked for or more than an answer's; a verdict without its reply or reason;
// admitting an answer that is not the right one.
//
// `troupe_fuzz_write_seeds` writes the seed corpus: a right answer, a wrong proof, a BASP
// header, a TLS ClientHello's start, a truncated answer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "runtime/net/front_door.hpp"
#include "runtime/net/secret.hpp"

namespace {

using troupe::net::door_handshake;

const std::string fuzz_secret = "fuzz secret";
const std::string fuzz_nonce(32, 'n');

// The answer a worker holding fuzz_secret sends to fuzz_nonce (Note [the front door]).
std::string right_answer() {
  const std::string ours(32, 'w');
  return std::string(troupe::net::door_magic) + ours +
         troupe::net::proof(fuzz_secret, troupe::net::worker_role, fuzz_nonce, ours,
                            troupe::net::door_context);
}

void require(bool holds) {
  if (!holds)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::size_t chunk = 1 + data[0] / 2;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool mutate_right_answer = (data[0] & 1) != 0;
  if (mutate_right_answer) {
    auto answer = right_answer();
    for (std::size_t k = 0; k < bytes.size(); ++k)
      if (k < answer.size())
        answer[k] = static_cast<char>(answer[k] ^ bytes[k]);
      else
        answer += bytes[k];
    bytes = answer;
  }
  door_handshake shake{fuzz_secret, fuzz_nonce};
  require(shake.greeting().size() == troupe::net::door_greeting_bytes);
  std::string_view rest{bytes};
  std::string taken;
  while (!rest.empty() && shake.current() == door_handshake::state::reading) {
    const auto wanted = shake.wanted();
    require(wanted > 0 && shake.received() + wanted == troupe::net::door_answer_bytes);
    const auto n = std::min({chunk, wanted, rest.size()});
    shake.take(rest.substr(0, n));
    taken.append(rest.substr(0, n));
    rest.remove_prefix(n);
    require(shake.received() == taken.size());
  }
  switch (shake.current()) {
    case door_handshake::state::reading:
      require(rest.empty() && shake.why().empty() && shake.reply().empty());
      break;
    case door_handshake::state::refused:
      require(!shake.why().empty() && shake.wanted() == 0);
      break;
    case door_handshake::state::admitted:
      // Only the right answer passes; the reply is node0's proof of it.
      require(taken == right_answer());
      require(shake.reply() == troupe::net::proof(fuzz_secret, troupe::net::coordinator_role,
                                                  std::string(32, 'w'), fuzz_nonce,
                                                  troupe::net::door_context));
      break;
  }
  return 0;
}

extern "C" int troupe_fuzz_write_seeds(const char* directory) {
  const auto right = right_answer();
  std::string wrong = right;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  std::string basp(32, '\0');
  basp[0] = 1;  // a client handshake, claiming no payload
  const std::string tls_hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  const struct {
    const char* name;
    char selector;
    std::string bytes;
  } seeds[] = {
      {"right_answer", '\x00', right},         {"right_answer_in_ones", '\x01', ""},
      {"wrong_proof", '\x20', wrong},          {"basp_header", '\x40', basp},
      {"tls_client_hello", '\x10', tls_hello}, {"truncated", '\x7e', right.substr(0, 60)},
  };
  int written = 0;
  for (const auto& seed : seeds) {
    std::ofstream out(std::string(directory) + "/" + seed.name, std::ios::binary);
    out.put(seed.selector);
    out << seed.bytes;
    written += out ? 1 : 0;
  }
  return written;
}
