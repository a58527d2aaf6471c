// link_bench.cpp: how fast one tensor goes from one troupe node to another over loopback.
//
// Two processes (a fork): node0 publishes a sink actor with CAF's io module, as the
// coordinator publishes its gatekeeper; node1 connects and sends it tensors of 1, 16 and
// 64 MiB, each answered by an 8-byte acknowledgement, through troupe's own tensor
// serialisation (include/troupe/detail/tensor_inspect.hpp: the header, then the bytes in one block,
// validated on arrival), the actor systems set up as a run's nodes are
// (configure_cluster_system). Prints GB/s per size: the median of 9 rounds of 8 tensors,
// over CAF's TCP link, and through the shared-memory inbox the receiver offers (Note
// [tensors through shared memory] in runtime/net/shared_memory.cpp: staged, then sent as
// its place; "-" for a tensor larger than the 32 MiB inbox, which a run sends over TCP);
// then a message's latency: half the median round trip of a one-float tensor and its
// acknowledgement (what `troupe simulate --link` takes as a link's latency).
//
// Not a test (bench/nodes.py runs it); not a collective (averaging is measured by the DP
// runs of bench/nodes.py).
#include <sys/wait.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "actors/session/cluster.hpp"
#include "runtime/net/shared_memory.hpp"
#include "troupe/messages.hpp"

using namespace troupe;

namespace {

caf::behavior sink(caf::event_based_actor*) {
  return {[](const tensor& t) { return static_cast<std::int64_t>(t.bytes()); }};
}

}  // namespace

int main() {
  int to_parent[2];  // the sink's port, then its inbox's offer
  int to_child[2];   // "done"
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0)
    return 1;
  pid_t child = ::fork();
  if (child == 0) {
    caf::actor_system_config config;
    configure_cluster_system(config, cluster_node{});  // as a node of a run
    add_message_types(config);
    net::shm_links links;
    net::shm_links::scope links_in_use{links};
    caf::actor_system system{config};
    auto s = system.spawn(sink);
    auto port = caf::io::publish(s, 0, "127.0.0.1");
    if (!port)
      ::_exit(1);
    std::uint16_t p = *port;
    if (::write(to_parent[1], &p, sizeof(p)) != sizeof(p))
      ::_exit(1);
    auto made = links.offer("parent");
    if (!std::holds_alternative<net::shm_offer>(made))
      ::_exit(1);
    const auto& o = std::get<net::shm_offer>(made);
    char offer[256];
    std::snprintf(offer, sizeof offer, "%s %d %d %llu %llu", o.boot_id.c_str(), o.pid, o.fd,
                  static_cast<unsigned long long>(o.key),
                  static_cast<unsigned long long>(o.capacity));
    if (::write(to_parent[1], offer, sizeof offer) != sizeof offer)
      ::_exit(1);
    char stop;
    (void)!::read(to_child[0], &stop, 1);  // until the parent is done
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    ::_exit(0);
  }
  std::uint16_t port = 0;
  char offer_text[256];
  if (::read(to_parent[0], &port, sizeof(port)) != sizeof(port) ||
      ::read(to_parent[0], offer_text, sizeof offer_text) != sizeof offer_text)
    return 1;
  net::shm_offer offer;
  char boot[128] = {};
  unsigned long long key = 0, capacity = 0;
  if (std::sscanf(offer_text, "%127s %d %d %llu %llu", boot, &offer.pid, &offer.fd, &key,
                  &capacity) != 5)
    return 1;
  offer.boot_id = boot;
  offer.key = key;
  offer.capacity = capacity;
  net::shm_links links;
  net::shm_links::scope links_in_use{links};
  if (auto why = links.connect("child", offer); !why.empty()) {
    std::fprintf(stderr, "link_bench: no shared memory: %s\n", why.c_str());
    return 1;
  }
  {
    caf::actor_system_config config;
    configure_cluster_system(config, cluster_node{});  // as a node of a run
    add_message_types(config);
    caf::actor_system system{config};
    auto remote = caf::io::remote_actor(system, "127.0.0.1", port);
    if (!remote) {
      std::fprintf(stderr, "link_bench: %s\n", system.render(remote.error()).c_str());
      return 1;
    }
    caf::scoped_actor self{system};
    std::printf("%10s %10s %14s\n", "MiB", "TCP GB/s", "shm GB/s");
    for (std::int64_t mib : {1, 16, 64}) {
      auto t = tensor::zeros({mib * 1024 * 1024 / 4});
      // One tensor there and its answer back; through shared memory as send_written does:
      // staged, then sent as a tensor over its slot (false when the inbox cannot hold it).
      auto send_one = [&](bool shared) {
        auto sent = t;
        if (shared) {
          auto staged = links.stage("child", t.raw(), t.bytes());
          if (!staged)
            return false;
          sent = tensor::borrowing(staged->data, t.shape(), t.type(), t.device(),
                                   std::move(staged->owner));
        }
        self->request(*remote, caf::infinite, sent)
            .receive([](std::int64_t) {}, [](caf::error&) {});
        return true;
      };
      std::vector<double> rates[2];
      for (bool shared : {false, true}) {
        if (!send_one(shared))  // warm-up: connection buffers, pools
          continue;
        for (int round = 0; round < 9; ++round) {
          auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < 8; ++i)
            send_one(shared);
          double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          rates[shared].push_back(8.0 * static_cast<double>(t.bytes()) / seconds / 1e9);
        }
        std::sort(rates[shared].begin(), rates[shared].end());
      }
      auto median = [](const std::vector<double>& r) {
        char text[32] = "-";
        if (!r.empty())
          std::snprintf(text, sizeof text, "%.2f", r[r.size() / 2]);
        return std::string{text};
      };
      std::printf("%10lld %10s %14s\n", static_cast<long long>(mib), median(rates[0]).c_str(),
                  median(rates[1]).c_str());
    }
    auto small = tensor::zeros({1});
    std::vector<double> trips;
    for (int i = 0; i < 201; ++i) {
      auto start = std::chrono::steady_clock::now();
      self->request(*remote, caf::infinite, small).receive([](std::int64_t) {}, [](caf::error&) {});
      trips.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(trips.begin(), trips.end());
    std::printf("latency (half a round trip, median of %zu): %.1f us\n", trips.size(),
                trips[trips.size() / 2] / 2);
  }
  (void)!::write(to_child[1], "x", 1);
  ::waitpid(child, nullptr, 0);
  return 0;
}
