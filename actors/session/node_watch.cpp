// node_watch.cpp: node0's watch over the joined workers (Note [joining a run] in
// cluster.cpp): each worker's agent is monitored (its proxy dies when the connection drops)
// and pinged every heartbeat; a node closed or silent past node_timeout is told to the
// trainer, which ends the run naming it.
#include <map>
#include <string>
#include <vector>

#include "actors/session/cluster_protocol.hpp"
#include "actors/trainer/trainer_actor.hpp"
#include "troupe/messages.hpp"

namespace troupe::node_protocol {

namespace {

struct watch_state {
  struct watched {
    caf::actor agent;
    std::vector<std::string> actors;
    std::string where;
    clock::time_point last_heard;
    bool lost = false;
  };
  std::map<int, watched> nodes;
  caf::actor trainer;
  double heartbeat = 1;
  double node_timeout = 8;
  static const char* name;
};
const char* watch_state::name = "troupe.node_watch";

using watch_actor = caf::stateful_actor<watch_state>;

void lose(watch_actor* self, int rank, const std::string& what) {
  auto& w = self->state.nodes.at(rank);
  if (w.lost)
    return;
  w.lost = true;
  std::string actors;
  for (const auto& name : w.actors)
    actors += (actors.empty() ? "" : ", ") + name;
  self->send(self->state.trainer, node_lost_atom::value, static_cast<std::int32_t>(rank),
             "node" + std::to_string(rank) + " (" + w.where + "; its actors: " + actors +
                 ") was lost: " + what);
}

caf::behavior node_watch(watch_actor* self, joined_cluster joined, caf::actor trainer,
                         double heartbeat, double node_timeout) {
  auto& s = self->state;
  s.trainer = std::move(trainer);
  s.heartbeat = heartbeat;
  s.node_timeout = node_timeout;
  for (std::size_t k = 1; k < joined.agents.size(); ++k) {
    auto& w = s.nodes[static_cast<int>(k)];
    w.agent = joined.agents[k];
    w.actors = joined.names[k];
    w.where = joined.where[k];
    w.last_heard = clock::now();
    self->monitor(w.agent);
  }
  self->set_down_handler([self](caf::down_msg& down) {
    for (auto& [rank, w] : self->state.nodes)
      if (w.agent.address() == down.source)
        lose(self, rank, "its connection closed (" + self->system().render(down.reason) + ")");
  });
  self->send(self, tick_atom::value);
  return {
      [self](tick_atom) {
        auto& s = self->state;
        auto now = clock::now();
        for (auto& [rank, w] : s.nodes) {
          if (w.lost)
            continue;
          auto silent = std::chrono::duration<double>(now - w.last_heard).count();
          if (silent > s.node_timeout)
            lose(self, rank,
                 "no heartbeat for " + seconds_text(silent) + " ([cluster] node_timeout " +
                     seconds_text(s.node_timeout) + ")");
          else
            self->send(w.agent, ping_atom::value);
        }
        self->delayed_send(self, milliseconds(s.heartbeat), tick_atom::value);
      },
      [self](pong_atom, std::int32_t rank, std::int64_t sent_to_nodes) {
        auto it = self->state.nodes.find(rank);
        if (it != self->state.nodes.end())
          it->second.last_heard = clock::now();
        self->send(self->state.trainer, node_bytes_atom::value, rank, sent_to_nodes);
      },
      [self](caf::get_atom) {  // the ranks of the nodes lost so far
        std::vector<std::int32_t> lost;
        for (const auto& [rank, w] : self->state.nodes)
          if (w.lost)
            lost.push_back(rank);
        return lost;
      },
  };
}

}  // namespace

caf::actor spawn_node_watch(caf::actor_system& system, joined_cluster joined, caf::actor trainer,
                            double heartbeat, double node_timeout) {
  return system.spawn(node_watch, std::move(joined), std::move(trainer), heartbeat, node_timeout);
}

}  // namespace troupe::node_protocol
