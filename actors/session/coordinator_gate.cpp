// coordinator_gate.cpp: node0's side of a run over several nodes, as the session sees it
// (cluster.hpp): open the front door to the gatekeeper, wait for the workers, wire them,
// watch them, collect their traces and tell them how the run ended.
#include <caf/io/all.hpp>

#include <cstdio>
#include <optional>
#include <set>

#include "actors/session/cluster.hpp"
#include "actors/session/cluster_protocol.hpp"

namespace troupe {

using namespace node_protocol;

coordinator_gate::coordinator_gate(caf::actor_system& system, const cluster_node& node,
                                   caf::actor trainer, caf::actor checkpoint_writer)
    : system_(system), node_(node), trainer_(trainer) {
  store_ = spawn_gloo_store(system);
  gate_ = spawn_gatekeeper(system, node, std::move(trainer), std::move(checkpoint_writer), store_);
  // Note [the front door] in runtime/net/front_door.cpp; with tls, each admitted
  // connection runs TLS before CAF's handshake (Note [TLS between nodes] in cluster.cpp).
  net::door_settings door;
  door.listen = node.listen;
  door.port = node.coordinator_port;
  door.secret = node.secret.value();
  try {
    door_ = std::make_unique<net::front_door>(
        std::move(door), [&system, gate = gate_, port = node.coordinator_port,
                          tls = node.tls.has_value()](unique_fd socket, const std::string&) {
          admit_to_network(system, std::move(socket), static_cast<std::uint16_t>(port), gate, tls);
        });
  } catch (...) {
    caf::anon_send_exit(gate_, caf::exit_reason::kill);
    caf::anon_send_exit(store_, caf::exit_reason::kill);
    throw;
  }
  port_ = static_cast<std::uint16_t>(door_->port());
  if (!is_loopback(node.listen) && !node.tls)
    std::fprintf(stderr,
                 "note: node0 listens on %s without [cluster] tls: a peer proves the secret "
                 "before CAF reads a byte from it, but what the nodes send each other crosses "
                 "the network unencrypted and unprotected; use tls = true unless every host "
                 "on the path is trusted\n",
                 node.listen.c_str());
}

coordinator_gate::~coordinator_gate() {
  if (watch_)
    caf::anon_send_exit(watch_, caf::exit_reason::user_shutdown);
  door_.reset();  // no more connections; those admitted stay CAF's
  caf::anon_send_exit(gate_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
}

joined_cluster coordinator_gate::wait_for_workers(const roster& own) {
  joined_cluster joined;
  caf::scoped_actor self{system_};
  std::optional<user_error> failure;
  self->request(gate_, caf::infinite, all_atom::value, node_.timeout)
      .receive([&](joined_cluster& workers) { joined = std::move(workers); },
               [&](caf::error& error) { failure = error_of(system_, error); });
  if (failure)
    throw *failure;
  joined.names.at(0) = own.names;
  joined.where.at(0) = "coordinator";
  joined.actors.names.insert(joined.actors.names.begin(), own.names.begin(), own.names.end());
  joined.actors.handles.insert(joined.actors.handles.begin(), own.handles.begin(),
                               own.handles.end());
  return joined;
}

void coordinator_gate::wire_workers(const joined_cluster& joined) {
  caf::scoped_actor self{system_};
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    // In slices of a second, asking the watch (started before the wiring) between them: a
    // node lost after its join never answers, and would cost the whole timeout, unnamed.
    const auto deadline = clock::now() + milliseconds(node_.timeout);
    for (bool wired = false; !wired;) {
      std::optional<user_error> failure;
      bool timed_out = false;
      self->request(joined.agents[k], std::chrono::seconds(1), wire_atom::value, joined.actors)
          .receive([&](wired_atom) { wired = true; },
                   [&](caf::error& error) {
                     timed_out = error == caf::sec::request_timeout;
                     failure = error_of(system_, error);
                   });
      if (wired)
        break;
      if (!timed_out || clock::now() >= deadline)
        throw user_error(
            "node" + std::to_string(k) + " could not wire its actors: " + failure->what(),
            exit_code::run_failed);
      if (lost_nodes().count(static_cast<std::int32_t>(k)) != 0)
        throw user_error("node" + std::to_string(k) + " (" + joined.where[k] +
                             ") was lost after it joined, before its actors were wired",
                         exit_code::run_failed);
    }
  }
}

void coordinator_gate::watch(const joined_cluster& joined) {
  watch_ = spawn_node_watch(system_, joined, trainer_, node_.heartbeat, node_.node_timeout);
}

std::set<std::int32_t> coordinator_gate::lost_nodes() {
  std::set<std::int32_t> lost;
  if (!watch_)
    return lost;
  caf::scoped_actor self{system_};
  self->request(watch_, milliseconds(node_.timeout), caf::get_atom::value)
      .receive(
          [&](const std::vector<std::int32_t>& ranks) { lost.insert(ranks.begin(), ranks.end()); },
          [&](caf::error&) {});
  return lost;
}

std::vector<trace::node_trace> coordinator_gate::collect_traces(const joined_cluster& joined) {
  std::vector<trace::node_trace> out;
  caf::scoped_actor self{system_};
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    // A node the watch has lost never answers: asking it would hold the end of the run (and
    // node0's own trace) for the whole [cluster] timeout. Asked before each node, since
    // one may be lost while the others send theirs.
    if (lost_nodes().count(static_cast<std::int32_t>(k))) {
      std::fprintf(stderr,
                   "troupe: node%zu's trace is left out of the merged trace: the node was lost\n",
                   k);
      continue;
    }
    trace::node_trace t;
    t.node = static_cast<int>(k);
    t.where = joined.where[k];
    bool answered = false;
    self->request(joined.agents[k], milliseconds(node_.timeout), trace_atom::value)
        .receive(
            [&](double offset, double rtt, std::string& text) {
              t.offset_us = offset;
              t.rtt_us = rtt;
              t.json = std::move(text);
              answered = true;
            },
            [&](caf::error& error) {
              std::fprintf(stderr, "troupe: node%zu's trace is left out of the merged trace: %s\n",
                           k, system_.render(error).c_str());
            });
    if (answered && !t.json.empty())  // empty: that node records nothing
      out.push_back(std::move(t));
  }
  return out;
}

void coordinator_gate::finish(const joined_cluster& joined, int code, const std::string& why) {
  if (watch_) {
    caf::anon_send_exit(watch_, caf::exit_reason::user_shutdown);
    watch_ = caf::actor{};
  }
  for (std::size_t k = 1; k < joined.agents.size(); ++k)
    if (joined.agents[k])
      caf::anon_send(joined.agents[k], done_atom::value, static_cast<std::int32_t>(code), why);
}

}  // namespace troupe
