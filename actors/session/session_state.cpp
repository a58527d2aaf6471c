// session_state.cpp: what the phases share that is more than a field (see the header):
// wiring this node's actors, stopping them, and the trace's own description of the run.
#include "actors/session/session_state.hpp"

#include <algorithm>
#include <iterator>
#include <set>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/base/batch_rows.hpp"
#include "troupe/actor_kind.hpp"

namespace troupe {

namespace {

// The actors by name and the wires at each, in the graph's order: wiring each actor by a scan
// of every wire, with a linear find per end, took O(actors x wires) (5 s for 4,000 layers
// with data = 4; minutes at the actor limit).
struct wire_index {
  std::unordered_map<std::string, const actor_plan*> actors;
  std::unordered_map<std::string, std::vector<const wire_plan*>> wires_at;

  explicit wire_index(const topology& graph) {
    for (const auto& a : graph.actors)
      actors.emplace(a.name, &a);
    for (const auto& wire : graph.wires) {
      wires_at[wire.from].push_back(&wire);
      if (wire.to != wire.from)
        wires_at[wire.to].push_back(&wire);
    }
  }
  const actor_plan* find(const std::string& name) const { return actors.at(name); }
};

// The wiring message of one actor: every wire that starts or ends at it.
wiring_msg wiring_of(const actor_plan& a, const wire_index& graph,
                     const std::map<std::string, caf::actor>& spawned,
                     const std::map<std::string, std::uint32_t>& tracks, const caf::actor& trainer) {
  wiring_msg w;
  w.trainer = trainer;
  auto track_of = [&](const std::string& name) {
    auto it = tracks.find(name);
    return it == tracks.end() ? 0u : it->second;
  };
  w.track = track_of(a.name);
  const auto at = graph.wires_at.find(a.name);
  if (at == graph.wires_at.end())
    return w;
  for (const auto* wire_at : at->second) {
    const auto& wire = *wire_at;
    auto end_at = [&](const std::string& peer) {
      const auto* p = graph.find(peer);
      return wire_end{to_string(wire.kind), peer,          p->kind_name(),
                      spawned.at(peer),     p->replica,    track_of(peer),
                      p->device.to_string(), wire.capacity};
    };
    if (wire.from == a.name) {
      w.outgoing.push_back(end_at(wire.to));
      // A loader's batches for another node are assembled there (batch_assembler_actor.hpp).
      const auto* to = graph.find(wire.to);
      auto relay = spawned.find(batch_assembler_name(to->device.node));
      if (a.kind == actor_kind::data_loader && wire.kind == wire_kind::activations &&
          to->device.node != a.device.node && relay != spawned.end())
        w.outgoing.back().relay = relay->second;
    }
    if (wire.to == a.name)
      w.incoming.push_back(end_at(wire.from));
  }
  return w;
}

// A fused group's wiring (Note [fused layers] in runtime/graph/fusion.hpp): its members'
// wires in model order, less those between members, so its one activations wire in is the
// first member's, its wire out the last's, and its grads wires one a member with
// parameters, in order.
wiring_msg wiring_of(const fusion_group& group, const wire_index& graph,
                     const std::map<std::string, caf::actor>& spawned,
                     const std::map<std::string, std::uint32_t>& tracks, const caf::actor& trainer) {
  wiring_msg w;
  w.trainer = trainer;
  auto track = tracks.find(group.name());
  w.track = track == tracks.end() ? 0u : track->second;
  auto outside = [&](const wire_end& end) {
    return std::find(group.members.begin(), group.members.end(), end.peer_name) ==
           group.members.end();
  };
  for (const auto& m : group.members) {
    auto own = wiring_of(*graph.find(m), graph, spawned, tracks, trainer);
    std::copy_if(own.outgoing.begin(), own.outgoing.end(), std::back_inserter(w.outgoing), outside);
    std::copy_if(own.incoming.begin(), own.incoming.end(), std::back_inserter(w.incoming), outside);
  }
  return w;
}

}  // namespace

std::vector<int> session_state::batch_assembler_nodes() const {
  const auto& graph_plan = graph();
  const wire_index g{graph_plan};
  std::vector<int> nodes;
  for (const auto& wire : graph_plan.wires) {
    const auto* from = g.find(wire.from);
    const auto* to = g.find(wire.to);
    if (wire.kind == wire_kind::activations && from->kind == actor_kind::data_loader &&
        runs_here(*to) && from->device.node != to->device.node &&
        std::find(nodes.begin(), nodes.end(), to->device.node) == nodes.end())
      nodes.push_back(to->device.node);
  }
  return nodes;
}

void session_state::wire_local(caf::scoped_actor& self) const {
  const wire_index index{graph()};
  std::map<std::string, const fusion_group*> fused;  // by its first member
  std::set<std::string> inside;                       // every member
  for (const auto& g : prepared.fusion) {
    fused[g.members.front()] = &g;
    inside.insert(g.members.begin(), g.members.end());
  }
  for (const auto& a : graph().actors) {
    if (!runs_here(a))
      continue;
    auto group = fused.find(a.name);
    if (group != fused.end())
      self->send(spawned.at(a.name), wiring_of(*group->second, index, everyone, tracks, trainer));
    else if (inside.count(a.name) == 0)
      self->send(spawned.at(a.name), wiring_of(a, index, everyone, tracks, trainer));
  }
  // The batch assembler has no wires: its wiring brings the trainer and its track.
  auto assembler = spawned.find(batch_assembler_name(rank));
  if (assembler != spawned.end()) {
    wiring_msg w;
    w.trainer = trainer;
    w.track = tracks.count(assembler->first) ? tracks.at(assembler->first) : 0;
    self->send(assembler->second, w);
  }
}

void session_state::stop_spawned() const {
  for (const auto& [name, handle] : spawned)
    caf::anon_send_exit(handle, caf::exit_reason::kill);
  if (drives) {
    caf::anon_send_exit(trainer, caf::exit_reason::kill);
    if (checkpoints.enabled())
      caf::anon_send_exit(checkpoints.writer, caf::exit_reason::kill);
  }
}

std::string session_state::trace_json(const run_outcome& how) const {
  const auto& g = graph();
  const auto& plan = prepared.plan;
  nlohmann::json meta = {
      {"troupe_version", TROUPE_VERSION_STRING}, {"config", config.path},
      {"replicas", g.replicas},                  {"stages", g.stages},
      {"microbatches", g.microbatches},          {"schedule", to_string(g.schedule)},
      {"virtual_stages", g.virtual_stages},
      {"averaging", to_string(g.averaging)},     {"batch_size", plan.batch_size},
      {"steps", how.steps},                      {"train_s", how.train_seconds},
  };
  auto wires = nlohmann::json::array();
  for (const auto& w : g.wires)
    wires.push_back({{"from", w.from},
                     {"to", w.to},
                     {"kind", to_string(w.kind)},
                     {"capacity", w.capacity},
                     {"crosses_nodes", g.crosses_nodes(w)}});
  meta["wires"] = wires;
  meta["nodes"] = g.nodes;
  if (g.rule != averaging_rule::synchronous) {
    meta["averaging_rule"] = to_string(g.rule);
    if (g.rule == averaging_rule::async)
      meta["max_staleness"] = g.max_staleness;
    else
      meta["sync_every"] = g.sync_every;
  }
  // Note [an emulated link] in runtime/net/link_model.cpp: said wherever its times are.
  if (config.cluster.link.given && g.nodes > 1)
    meta["emulated_link"] = describe_link(config.cluster.link);
  return recorder->json(meta.dump());
}

void session_state::leave_actor_system() {
  spawned.clear();
  everyone.clear();
  trainer = nullptr;
  checkpoints.writer = nullptr;
  trainer_config.reset();
  gloo = {};
  sequencers = {};
  system = nullptr;
}

}  // namespace troupe
