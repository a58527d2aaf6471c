// expand.cpp: expanding the shorthand [model] + [parallel] into actors and wires, and
// balancing pipeline stages by cost.
//
// Names: with one replica, "layer_3", "loss", "optimizer_3"; with R replicas, "r1.layer_3",
// "r1.loss"; averagers are "avg_3" (central) or "r1.avg_3" (ring and gloo, one per
// replica), and ring or gloo averaging gives each replica its own optimizer
// "r1.optimizer_3" (only the ring's averagers have ring wires). The data loader is
// "loader". Replica r's stage s runs on device (r * P + s mod P) mod D of [parallel] devices,
// where P = S / v (S stages, v of them a device when interleaved, else P = S).
#include "runtime/graph/topology.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "runtime/base/limits.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {

const actor_plan* topology::find(const std::string& name) const {
  for (const auto& a : actors)
    if (a.name == name)
      return &a;
  return nullptr;
}

bool topology::crosses_nodes(const wire_plan& wire) const {
  const auto* from = find(wire.from);
  const auto* to = find(wire.to);
  return from != nullptr && to != nullptr && from->device.node != to->device.node;
}

bool topology::takes_turns() const {
  if (virtual_stages > 1)
    return true;
  if (schedule != pipeline_schedule::zb_h1 || stages < 2)
    return false;
  std::map<std::pair<device_id, std::int32_t>, std::int32_t> stage_on;
  for (const auto& a : actors)
    if (a.kind == actor_kind::layer &&
        stage_on.emplace(std::make_pair(a.device, a.replica), a.stage).first->second != a.stage)
      return false;
  return true;
}

std::vector<bool> topology::skip_wires() const {
  std::map<std::string, const actor_plan*> by_name;
  for (const auto& a : actors)
    by_name.emplace(a.name, &a);
  auto layer_named = [&](const std::string& name) -> const actor_plan* {
    auto found = by_name.find(name);
    return found != by_name.end() && found->second->kind == actor_kind::layer ? found->second
                                                                              : nullptr;
  };
  std::vector<bool> out;
  for (const auto& w : wires) {
    const auto* from = w.kind == wire_kind::activations ? layer_named(w.from) : nullptr;
    const auto* to = from != nullptr ? layer_named(w.to) : nullptr;
    out.push_back(to != nullptr && to->layer != from->layer + 1);
  }
  return out;
}

std::string actor_plan::kind_name() const {
  return kind == actor_kind::custom ? custom_kind : to_string(kind);
}

stage_split balance_stages(const std::vector<double>& costs, std::int64_t stages) {
  const auto n = static_cast<std::int64_t>(costs.size());
  TROUPE_CHECK(stages >= 1 && stages <= n, stages << " stages for " << n << " layers");
  // best[k][i]: the smallest possible maximum stage cost of splitting layers [0, i) into k
  // stages; cut[k][i] the start of the last of them. O(P n^2), n is small.
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    prefix[static_cast<std::size_t>(i) + 1] = prefix[static_cast<std::size_t>(i)] + costs[static_cast<std::size_t>(i)];
  const double infinity = std::numeric_limits<double>::infinity();
  auto at = [n](std::int64_t k, std::int64_t i) { return static_cast<std::size_t>(k * (n + 1) + i); };
  std::vector<double> best(static_cast<std::size_t>((stages + 1) * (n + 1)), infinity);
  std::vector<std::int64_t> cut(best.size(), 0);
  best[at(0, 0)] = 0;
  for (std::int64_t k = 1; k <= stages; ++k)
    for (std::int64_t i = k; i <= n; ++i)
      for (std::int64_t j = k - 1; j < i; ++j) {
        double stage_cost = prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(j)];
        double value = std::max(best[at(k - 1, j)], stage_cost);
        if (value < best[at(k, i)]) {
          best[at(k, i)] = value;
          cut[at(k, i)] = j;
        }
      }
  stage_split split;
  split.first.resize(static_cast<std::size_t>(stages));
  split.last.resize(static_cast<std::size_t>(stages));
  for (std::int64_t k = stages, i = n; k >= 1; --k) {
    auto j = cut[at(k, i)];
    split.first[static_cast<std::size_t>(k - 1)] = j;
    split.last[static_cast<std::size_t>(k - 1)] = i - 1;
    i = j;
  }
  return split;
}

// The one place that says which devices a config may name. Whether a cuda:N is on the
// machine is known only where it runs (run_mode::make_devices in actors/session/run_modes.cpp);
// a plan needs no GPU.
std::vector<device_id> runnable_devices(const run_config& config) {
  std::vector<device_id> ids;
  for (const auto& device : config.parallel.devices) {
    if (device.id.node >= config.nodes()) {
      const auto& c = config.cluster;
      throw config_error(
          device.where,
          "device '" + device.name + "' is on node " + std::to_string(device.id.node) +
              ", and the run has " + std::to_string(config.nodes()) + " node" +
              (config.nodes() == 1 ? "" : "s") +
              (c.nodes > 0 ? " ([cluster] nodes at " + c.nodes_where.to_string() + ")"
                           : " (set [cluster] nodes, or start it with troupe launch -n N)") +
              "; nodes are numbered from node0");
    }
    ids.push_back(device.id);
  }
  if (ids.empty())
    ids.push_back(device_id{});
  return ids;
}

namespace {

// The model cut into P v stages (v = virtual_stages, 1 unless interleaved).
stage_split split_stages(const run_config& config, const std::vector<shape_t>& shapes) {
  const auto& p = config.parallel;
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  const auto stages = p.pipeline * p.virtual_stages;
  const auto stages_text =
      p.virtual_stages > 1 ? "pipeline x virtual_stages = " + std::to_string(p.pipeline) + " x " +
                                 std::to_string(p.virtual_stages) + " = " + std::to_string(stages)
                           : "pipeline = " + std::to_string(p.pipeline);
  if (!p.stage_ranges.empty()) {
    stage_split split;
    std::int64_t expected = 0;
    for (const auto& [first, last] : p.stage_ranges) {
      if (first != expected || last < first || last >= layers)
        throw config_error(p.stages_where,
                           "[parallel] stages must be contiguous [first, last] layer ranges "
                           "covering layers 0.." + std::to_string(layers - 1) +
                               " in order; stage " + std::to_string(split.first.size()) +
                               " should start at layer " + std::to_string(expected));
      split.first.push_back(first);
      split.last.push_back(last);
      expected = last + 1;
    }
    if (expected != layers)
      throw config_error(p.stages_where, "[parallel] stages end at layer " +
                                             std::to_string(expected - 1) + " but the model has " +
                                             std::to_string(layers) + " layers");
    const auto listed = static_cast<std::int64_t>(split.first.size());
    if (p.pipeline != 1 && stages != listed)
      throw config_error(p.stages_where, "[parallel] stages lists " + std::to_string(listed) +
                                             " stages but " + stages_text);
    if (listed % p.virtual_stages != 0)
      throw config_error(p.stages_where, "[parallel] stages lists " + std::to_string(listed) +
                                             " stages, not a multiple of virtual_stages = " +
                                             std::to_string(p.virtual_stages));
    return split;
  }
  if (stages > layers)
    throw config_error(p.where, "[parallel] " + stages_text + " stages, but the model has only " +
                                    std::to_string(layers) + " layers");
  if (stages == 1)
    return stage_split{{0}, {layers - 1}};
  // balance_stages is O(P n^2): refused, rather than run for hours, when that is too much
  // (Note [input limits] in runtime/base/limits.hpp).
  const double work = static_cast<double>(stages) * static_cast<double>(layers) *
                      static_cast<double>(layers) / 2;
  if (work > limits::max_stage_split_work)
    throw config_error(p.where, "[parallel] " + stages_text + " stages over " +
                                    std::to_string(layers) +
                                    " layers: balancing them would take " + shortest_text(work) +
                                    " steps, more than the limit of " +
                                    shortest_text(limits::max_stage_split_work) +
                                    "; give the split yourself with [parallel] stages = "
                                    "[[first, last], ...]");
  std::vector<double> costs;
  for (std::size_t i = 0; i < config.model.layers.size(); ++i)
    costs.push_back(create_layer(config.model.layers[i])->cost(shapes[i]));
  return balance_stages(costs, stages);
}

std::string replica_prefix(std::int64_t replicas, std::int64_t r) {
  return replicas > 1 ? "r" + std::to_string(r) + "." : "";
}

// Refuses a run its devices cannot hold or whose graph is over the limits, before any actor
// is planned; separate so that expand_shorthand reads as the building alone.
void check_expansion_fits(const run_config& config, const topology& t, std::int64_t P) {
  const auto& p = config.parallel;
  const auto R = t.replicas;
  const auto D = static_cast<std::int64_t>(t.devices.size());
  if (R * P > D && !p.share_devices)
    throw config_error(p.where, "data = " + std::to_string(R) + " replicas x " + std::to_string(P) +
                                    " pipeline stages need " + std::to_string(R * P) +
                                    " devices, but [parallel] devices lists " + std::to_string(D) +
                                    "; add devices or set share_devices = true");
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  // Each replica gets a layer actor, an averager and an optimizer per layer, plus a loss.
  const auto actors = 1 + R * (3 * layers + 1);
  if (actors > limits::max_actors)
    throw config_error(p.where, "data = " + std::to_string(R) + " replicas of " +
                                    std::to_string(layers) + " layers make about " +
                                    std::to_string(actors) + " actors, more than the limit of " +
                                    std::to_string(limits::max_actors));
  // ... and an activations wire per edge of the model's graph (Note [input limits]).
  std::int64_t edges = 0;
  for (const auto& reads : t.inputs)
    edges += static_cast<std::int64_t>(reads.size());
  if (R * edges > limits::max_actors)
    throw config_error(p.where, "data = " + std::to_string(R) + " replicas of a model with " +
                                    std::to_string(edges) + " inputs between its layers make " +
                                    std::to_string(R * edges) +
                                    " activations wires, more than the limit of " +
                                    std::to_string(limits::max_actors));
}

// For each model layer, the stage that holds it: the split turned around, for the wiring.
std::vector<std::int64_t> stages_of_layers(const stage_split& split, std::int64_t layers) {
  const auto S = static_cast<std::int64_t>(split.first.size());
  std::vector<std::int64_t> stage_of(static_cast<std::size_t>(layers));
  for (std::int64_t s = 0; s < S; ++s)
    for (auto i = split.first[static_cast<std::size_t>(s)];
         i <= split.last[static_cast<std::size_t>(s)]; ++i)
      stage_of[static_cast<std::size_t>(i)] = s;
  return stage_of;
}

// Adds the actors and wires of the shorthand to a topology whose fields are set: where an
// actor runs, the credits of a wire, and the two wirings (layers, then optimizers), a class
// so that each wiring is a function of its own that shares the placement and the credits.
class topology_builder {
 public:
  // P: devices a pipeline (S / v).
  topology_builder(topology& t, const parallel_section& p, std::vector<std::int64_t> stage_of,
                   std::int64_t P)
      : t_(t),
        p_(p),
        stage_of_(std::move(stage_of)),
        pipeline_(P),
        device_count_(static_cast<std::int64_t>(t.devices.size())) {}

  void add_layers(const run_config& config);
  void add_optimizers(const run_config& config, const std::vector<shape_t>& shapes);

 private:
  std::int64_t stage_of(std::int64_t layer) const {
    return stage_of_[static_cast<std::size_t>(layer)];
  }

  device_id device_of(std::int64_t r, std::int64_t s) const {
    return t_.devices[static_cast<std::size_t>((r * pipeline_ + s % pipeline_) % device_count_)];
  }

  // Credits of the activations wire into stage s (Note [credits] in credit_outbox.hpp).
  // Stages that wait for their turns (interleaved, and ZB-H1 when a replica's stages have
  // a device each: topology::takes_turns, which is P <= D here) get M each, and their device's
  // sequencer keeps the memory bound (Note [credits and turns] in
  // runtime/model/interleaved_schedule.hpp). ZB-H1 with shared devices has 1F1B's: a
  // credit comes back as the reader submits its backward (Note [credits back on arrival]
  // in actors/training/layer_actor.cpp), and the layers' stash limit keeps its bound, P
  // micro-batches per stage (weight gradients still to run keep theirs).
  std::int64_t capacity_into(std::int64_t s) const {
    const auto P = pipeline_, D = device_count_, M = t_.microbatches;
    const bool turns = t_.virtual_stages > 1 || (t_.schedule == pipeline_schedule::zb_h1 && P <= D);
    if (turns)
      return M;
    switch (t_.schedule) {
      case pipeline_schedule::gpipe:
        return M;
      case pipeline_schedule::one_f_one_b:
      case pipeline_schedule::zb_h1:
        return P - s;
    }
    return M;
  }

  // Note [a remote replica's batches]
  // A replica on another node than the loader gets each micro-batch's rows over the network
  // and sends the credit for the next one back over it. With the schedule's capacity (M
  // under GPipe: one batch a step at M = 1) every step waited for that round trip before it
  // could start: over an emulated 100 Mbit/s, 20 ms link (Note [an emulated link] in
  // runtime/net/link_model.cpp) DiLoCo's steps took 48 ms of which 10 were compute, and even
  // over loopback DP2's ring went from 1275 to 1766 samples/s with 4 batches on the wire
  // (docs/benchmarks.md). A replica of one stage reads these credits for nothing else: its
  // layers compute step k only with version k of their parameters, so batches that come
  // early wait as their rows. So the loader's wire to a single-stage replica on another
  // node holds the micro-batches of max(4, [data] prefetch) steps (4: what the measurement
  // above needed; [data] prefetch says more); a pipeline's first stage keeps its schedule's
  // credits (they are the schedule), and so does every replica on the loader's node.
  std::int64_t loader_capacity(const run_config& config, std::int64_t r, std::int64_t s) const {
    const auto capacity = capacity_into(s);
    if (t_.stages > 1 || device_of(r, s).node == device_of(0, 0).node)
      return capacity;
    return std::max(capacity, t_.microbatches * std::max<std::int64_t>(4, config.data.prefetch));
  }

  actor_plan& add_actor(std::string name, actor_kind kind, device_id device, std::int64_t replica,
                        std::int64_t stage, std::int64_t layer) {
    actor_plan a;
    a.name = std::move(name);
    a.kind = kind;
    a.device = device;
    a.replica = static_cast<std::int32_t>(replica);
    a.stage = static_cast<std::int32_t>(stage);
    a.layer = static_cast<std::int32_t>(layer);
    a.where = p_.where;
    t_.actors.push_back(std::move(a));
    return t_.actors.back();
  }

  void add_wire(const std::string& from, const std::string& to, wire_kind kind,
                std::int64_t capacity) {
    t_.wires.push_back(wire_plan{from, to, kind, capacity, p_.where});
  }

  topology& t_;
  const parallel_section& p_;
  std::vector<std::int64_t> stage_of_;  // stage_of_[i]: the stage of model layer i
  std::int64_t pipeline_;               // P
  std::int64_t device_count_;           // D: [parallel] devices, before the unused go
};

// The loader, then each replica's layers (a wire per input) and its loss: the forward path.
void topology_builder::add_layers(const run_config& config) {
  const auto R = t_.replicas, S = t_.stages;
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  add_actor("loader", actor_kind::data_loader, device_of(0, 0), -1, -1, -1);
  for (std::int64_t r = 0; r < R; ++r) {
    auto prefix = replica_prefix(R, r);
    auto layer_name = [&](std::int64_t i) { return prefix + "layer_" + std::to_string(i); };
    for (std::int64_t i = 0; i < layers; ++i) {
      auto s = stage_of(i);
      auto& a = add_actor(layer_name(i), actor_kind::layer, device_of(r, s), r, s, i);
      a.math = config.model.layers[static_cast<std::size_t>(i)];
      // One wire per input, in the order the layer names them.
      for (auto j : t_.inputs[static_cast<std::size_t>(i)]) {
        if (j == data_input) {
          add_wire("loader", layer_name(i), wire_kind::activations, loader_capacity(config, r, s));
          continue;
        }
        auto from = stage_of(j);
        add_wire(layer_name(j), layer_name(i), wire_kind::activations,
                 from != s ? capacity_into(from + 1) : 0);
      }
    }
    auto loss = prefix + "loss";
    add_actor(loss, actor_kind::loss, device_of(r, S - 1), r, S - 1, -1);
    add_wire(layer_name(layers - 1), loss, wire_kind::activations, 0);
    add_wire("loader", loss, wire_kind::labels, 0);
  }
}

// For each layer with parameters, its optimizer and averagers as [parallel] averaging
// wires them: the update path, after every layer exists.
void topology_builder::add_optimizers(const run_config& config,
                                      const std::vector<shape_t>& shapes) {
  const auto R = t_.replicas;
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  for (std::int64_t i = 0; i < layers; ++i) {
    auto math = create_layer(config.model.layers[static_cast<std::size_t>(i)]);
    if (math->parameters(shapes[static_cast<std::size_t>(i)]).empty())
      continue;
    auto s = stage_of(i);
    auto suffix = "_" + std::to_string(i);
    auto layer_name = [&](std::int64_t r) { return replica_prefix(R, r) + "layer" + suffix; };
    if (R == 1) {
      add_actor("optimizer" + suffix, actor_kind::optimizer, device_of(0, s), -1, s, i);
      add_wire(layer_name(0), "optimizer" + suffix, wire_kind::grads, 0);
      add_wire("optimizer" + suffix, layer_name(0), wire_kind::params, 0);
    } else if (t_.rule == averaging_rule::async) {
      // Note [asynchronous server] in actors/training/async_server.cpp: the optimizer is
      // the layer's server; each replica's gradients go to it as they are.
      add_actor("optimizer" + suffix, actor_kind::optimizer, device_of(0, s), -1, s, i);
      for (std::int64_t r = 0; r < R; ++r) {
        add_wire(layer_name(r), "optimizer" + suffix, wire_kind::grads, 0);
        add_wire("optimizer" + suffix, layer_name(r), wire_kind::params, 0);
      }
    } else if (t_.averaging == averaging_method::central) {
      auto& averager = add_actor("avg" + suffix, actor_kind::averager, device_of(0, s), -1, s, i);
      averager.method = averaging_method::central;
      averager.method_where = p_.where;
      add_actor("optimizer" + suffix, actor_kind::optimizer, device_of(0, s), -1, s, i);
      for (std::int64_t r = 0; r < R; ++r) {
        add_wire(layer_name(r), "avg" + suffix, wire_kind::grads, 0);
        add_wire("optimizer" + suffix, layer_name(r), wire_kind::params, 0);
      }
      add_wire("avg" + suffix, "optimizer" + suffix, wire_kind::grads, 0);
    } else {
      for (std::int64_t r = 0; r < R; ++r) {
        auto prefix = replica_prefix(R, r);
        auto& averager =
            add_actor(prefix + "avg" + suffix, actor_kind::averager, device_of(r, s), r, s, i);
        averager.method = t_.averaging;  // ring or gloo: the same actors, ring wires or none
        averager.method_where = p_.where;
        add_actor(prefix + "optimizer" + suffix, actor_kind::optimizer, device_of(r, s), r, s, i);
        add_wire(layer_name(r), prefix + "avg" + suffix, wire_kind::grads, 0);
        if (t_.averaging == averaging_method::ring)
          add_wire(prefix + "avg" + suffix, replica_prefix(R, (r + 1) % R) + "avg" + suffix,
                   wire_kind::ring, 0);
        add_wire(prefix + "avg" + suffix, prefix + "optimizer" + suffix, wire_kind::grads, 0);
        add_wire(prefix + "optimizer" + suffix, layer_name(r), wire_kind::params, 0);
      }
    }
  }
}

}  // namespace

topology expand_shorthand(const run_config& config, const std::vector<shape_t>& shapes) {
  const auto& p = config.parallel;
  topology t;
  t.devices = runnable_devices(config);
  t.nodes = config.nodes();
  t.replicas = p.data;
  t.microbatches = p.microbatches;
  t.schedule = p.schedule;
  t.averaging = p.averaging;
  t.rule = p.rule;
  t.sync_every = p.sync_every;
  t.max_staleness = p.max_staleness;
  if (p.rule == averaging_rule::async && p.max_staleness < p.data - 1)
    throw config_error(p.max_staleness_where,
                       "[parallel] max_staleness = " + std::to_string(p.max_staleness) +
                           " is below data - 1 = " + std::to_string(p.data - 1) +
                           ": a round of the " + std::to_string(p.data) +
                           " replicas' updates moves the server that many versions past the "
                           "last replica's, so it would wait forever; use at least " +
                           std::to_string(p.data - 1));
  t.shapes = shapes;
  t.inputs = resolve_inputs(config.model);
  t.outputs = outputs_along(t.inputs, shapes);
  auto split = split_stages(config, shapes);
  t.stages = static_cast<std::int64_t>(split.first.size());
  t.virtual_stages = p.virtual_stages;
  // P devices a pipeline, S = P v stages (Note [interleaved stages]).
  const auto P = t.stages / t.virtual_stages;
  check_expansion_fits(config, t, P);
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  topology_builder builder(t, p, stages_of_layers(split, layers), P);
  builder.add_layers(config);
  builder.add_optimizers(config, shapes);
  // Only the devices actors use are created.
  std::vector<device_id> used;
  for (const auto& a : t.actors)
    if (std::find(used.begin(), used.end(), a.device) == used.end())
      used.push_back(a.device);
  std::sort(used.begin(), used.end());
  t.devices = used;
  return t;
}

}  // namespace troupe
