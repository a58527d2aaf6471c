// allreduce_bench.cpp: one layer's gradient all-reduce between two troupe nodes over
// loopback, the actor ring (averaging = "ring") next to gloo (averaging = "gloo").
//
// Two processes (a fork), each a node with one CPU device (node0 on core 0, node1 on core
// 1), each with the averager of its replica as a run spawns it (spawn_grad_averager),
// wired to the process's own sink. The ring's two averagers reach each other through CAF's
// io module (node0 publishes a rendezvous actor, as the coordinator publishes its
// gatekeeper); gloo's contexts meet through a gloo FileStore in a temporary directory (a
// run uses the coordinator's store actor instead; the all-reduce is the same). For each
// size, round after round, both nodes hand their averager one step's gradients and wait
// for the sums; the time is node0's from handing them over to holding the sums, written.
// Prints the median of 15 rounds after 3 warm-up ones, in ms, and the ratio gloo / ring;
// the ring twice: its tensors over CAF's TCP link, and through shared memory (Note
// [tensors through shared memory] in runtime/net/shared_memory.cpp, as a run of nodes on
// one machine sends them), each a pair of processes of its own.
//
//     build/troupe_allreduce_bench [MiB ...]     (default: 1 16)
//
// Not a test (bench/nodes.py runs it). Unsharded (shard_optimizer = false) on both sides:
// the sharded ring hands back only its owned half and all-gathers parameters instead.
#include <gloo/rendezvous/file_store.h>
#include <sys/wait.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "actors/session/cluster.hpp"
#include "actors/averaging/grad_averager_actor.hpp"
#include "actors/transport/shm_delivery.hpp"
#include "runtime/net/shared_memory.hpp"
#include "troupe/messages.hpp"

using namespace troupe;

namespace {

// gloo's file store as the run's collective store: the two processes of the bench meet in a
// folder (runtime/collective/store.hpp).
class file_store final : public troupe::collective_store {
 public:
  explicit file_store(const std::string& folder) : inner_(folder) {}
  void set(const std::string& key, const std::vector<char>& value) override {
    inner_.set(key, value);
  }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    inner_.wait({key}, timeout);
    return inner_.get(key);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_.wait(keys, timeout);
  }

 private:
  gloo::rendezvous::FileStore inner_;
};

constexpr int warm_up_rounds = 3;
constexpr int timed_rounds = 15;

// One node's half of the benchmark: returns node0's median times (ms), or {} on node1.
// `shared`: through shared memory, and the ring only.
std::vector<double> run_node(int rank, const std::vector<std::int64_t>& sizes,
                             const std::string& store_dir, int port_out, int port_in, bool shared) {
  set_this_node(rank);
  caf::actor_system_config config;
  configure_cluster_system(config, cluster_node{});  // as a node of a run
  add_message_types(config);
  std::optional<net::shm_links> links;
  std::optional<net::shm_links::scope> links_in_use;
  if (shared) {
    links.emplace();
    links_in_use.emplace(*links);
  }
  caf::actor_system system{config};
  std::unique_ptr<stream_poller> poller;  // as a run takes messages from shared memory
  if (links)
    poller = deliver_shared_memory(system, *links);
  device_id cpu;
  device_id::parse("cpu:0", cpu);
  cpu.node = rank;
  device_set devices{{cpu}, rank};
  caf::scoped_actor self{system};

  // The ring's peer: node0 publishes a rendezvous that swaps handles with node1.
  auto peer_promise = std::make_shared<std::promise<std::vector<caf::actor>>>();
  std::vector<caf::actor> mine, theirs;
  auto averager = [&](averaging_method method, std::int32_t layer) {
    grad_averager_settings s;
    s.name = "r" + std::to_string(rank) + ".avg_" + std::to_string(layer);
    s.method = method;
    s.layer_index = layer;
    s.replica = rank;
    s.replicas = 2;
    s.bucket_elements = 1 << 18;  // [parallel] bucket_elements' default
    s.gloo.store = std::make_shared<file_store>(store_dir);
    s.gloo.prefix = "allreduce_bench/";
    s.gloo.hostname = "127.0.0.1";
    s.on = &devices.at(cpu);
    return spawn_grad_averager(system, s);
  };
  for (std::size_t i = 0; i < sizes.size(); ++i)
    mine.push_back(averager(averaging_method::ring, static_cast<std::int32_t>(i)));
  if (rank == 0) {
    auto rendezvous = system.spawn([mine, peer_promise](caf::event_based_actor*) -> caf::behavior {
      return {[mine, peer_promise](const std::vector<caf::actor>& peers) {
        peer_promise->set_value(peers);
        return mine;
      }};
    });
    auto port = caf::io::publish(rendezvous, 0, "127.0.0.1");
    if (!port)
      std::exit(1);
    std::uint16_t p = *port;
    if (::write(port_out, &p, sizeof(p)) != sizeof(p))
      std::exit(1);
    theirs = peer_promise->get_future().get();
    caf::anon_send_exit(rendezvous, caf::exit_reason::user_shutdown);
  } else {
    std::uint16_t port = 0;
    if (::read(port_in, &port, sizeof(port)) != sizeof(port))
      std::exit(1);
    auto node0 = system.middleman().remote_actor("127.0.0.1", port);
    if (!node0)
      std::exit(1);
    self->request(*node0, std::chrono::seconds(30), mine)
        .receive([&](const std::vector<caf::actor>& peers) { theirs = peers; },
                 [](caf::error&) { std::exit(1); });
  }

  auto wire = [&](const caf::actor& a, const caf::actor& next) {
    wiring_msg w;
    w.trainer = caf::actor_cast<caf::actor>(self);  // failures come here
    w.outgoing.push_back(
        {"grads", "sink", "sink", caf::actor_cast<caf::actor>(self), rank, 0, cpu.to_string(), 0});
    if (next)
      w.outgoing.push_back({"ring", "next", "averager", next, 1 - rank, 0, "cpu:0", 0});
    self->send(a, w);
  };
  std::vector<double> medians;
  auto time_rounds = [&](const caf::actor& a, std::int32_t layer, std::int64_t elements) {
    std::vector<double> times;
    for (int round = 0; round < warm_up_rounds + timed_rounds; ++round) {
      // Fresh gradients each round, as a layer's backward makes them: the ring sums in place.
      auto grads = tensor::empty({elements}, dtype::f32, cpu);
      std::fill(grads.f32(), grads.f32() + elements, 1.0f + static_cast<float>(rank));
      auto start = std::chrono::steady_clock::now();
      self->send(a, weight_grads_msg{round, layer, rank, {grads}, trace_stamp{}});
      self->receive(
          [&](weight_grads_msg& sums) {
            for (auto& t : sums.grads)
              t.wait_ready();
            if (sums.grads.at(0).f32()[0] != 3.0f) {  // 1 + 2
              std::fprintf(stderr, "node%d: a wrong sum %g\n", rank, sums.grads.at(0).f32()[0]);
              std::exit(1);
            }
          },
          [&](const failure_msg& failure) {
            std::fprintf(stderr, "node%d: %s: %s\n", rank, failure.actor.c_str(),
                         failure.what.c_str());
            std::exit(1);
          },
          caf::after(std::chrono::seconds(60)) >>
              [&] {
                std::fprintf(stderr, "node%d: no sums after 60 s\n", rank);
                std::exit(1);
              });
      std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      if (round >= warm_up_rounds)
        times.push_back(took.count());
    }
    std::nth_element(times.begin(), times.begin() + timed_rounds / 2, times.end());
    medians.push_back(times[timed_rounds / 2]);
  };
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    wire(mine[i], theirs.at(i));
    time_rounds(mine[i], static_cast<std::int32_t>(i), sizes[i]);
  }
  for (std::size_t i = 0; i < sizes.size() && !shared; ++i) {
    auto layer = static_cast<std::int32_t>(sizes.size() + i);
    auto gloo = averager(averaging_method::gloo, layer);
    wire(gloo, nullptr);
    time_rounds(gloo, layer, sizes[i]);
    caf::anon_send_exit(gloo, caf::exit_reason::user_shutdown);
  }
  for (auto& a : mine)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  devices.synchronize();
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> mib;
  for (int i = 1; i < argc; ++i)
    mib.push_back(std::max(1L, std::strtol(argv[i], nullptr, 10)));
  if (mib.empty())
    mib = {1, 16};
  std::vector<std::int64_t> sizes;
  for (auto m : mib)
    sizes.push_back(m * (1 << 20) / 4);
  // One pair of processes: node0's medians, or none if node1 failed.
  auto run_pair = [&](bool shared) -> std::vector<double> {
    char store_dir[] = "/tmp/troupe_allreduce_bench.XXXXXX";
    if (!::mkdtemp(store_dir))
      return {};
    int port_pipe[2];  // node0's port, to node1
    if (::pipe(port_pipe) != 0)
      return {};
    pid_t child = ::fork();
    if (child == 0) {
      run_node(1, sizes, store_dir, -1, port_pipe[0], shared);
      ::_exit(0);
    }
    auto medians = run_node(0, sizes, store_dir, port_pipe[1], -1, shared);
    int status = 0;
    ::waitpid(child, &status, 0);
    std::filesystem::remove_all(store_dir);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "node1 failed\n");
      return {};
    }
    return medians;
  };
  const auto medians = run_pair(false);  // the ring over TCP, then gloo
  const auto shared = run_pair(true);    // the ring through shared memory
  if (medians.empty() || shared.empty())
    return 1;
  std::printf("%9s %13s %13s %10s %12s\n", "MiB", "ring TCP ms", "ring shm ms", "gloo ms",
              "gloo / ring");
  for (std::size_t i = 0; i < mib.size(); ++i)
    std::printf("%9ld %13.3f %13.3f %10.3f %11.2fx\n", static_cast<long>(mib[i]), medians[i],
                shared[i], medians[mib.size() + i], medians[mib.size() + i] / shared[i]);
  return 0;
}
