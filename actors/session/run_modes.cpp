// run_modes.cpp: one process, simulated, coordinator and worker (see the header).
#include "actors/session/run_modes.hpp"

#include "actors/training/optimizer_actor.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "actors/base/device_scheduler.hpp"
#include "actors/session/cluster.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/simulation.hpp"
#include "runtime/data/text.hpp"
#include "runtime/graph/host_model.hpp"
#include "troupe/actor_kind.hpp"

namespace troupe {

namespace {

// How a language model's run draws its text after training (session_result::sample).
constexpr double sample_temperature = 0.8;

// This node's devices, of all the run's: the ones it creates.
std::vector<device_id> devices_of_node(const topology& graph, int rank) {
  std::vector<device_id> out;
  for (const auto& d : graph.devices)
    if (d.node == rank)
      out.push_back(d);
  return out;
}

// Note [more CPU devices than cores]
// A CPU device is one core (Note [CPU streams] in stream_worker.cpp): cpu:N runs on core
// (first + N) mod the cores this process may use. Listing more CPU devices than there are
// cores is allowed, since the math does not change (config/fashion_mlp_dp2_pp2.toml runs
// four devices, on a two-core machine too), but the devices then share cores and a step takes
// longer than the config suggests; so it is said once, on stderr, rather than refused or left
// silent.
void note_shared_cores(const std::vector<device_id>& devices, int first_core) {
  int highest = -1;
  for (const auto& d : devices)
    if (d.type == device_type::cpu)
      highest = std::max(highest, d.index);
  const int cores = allowed_core_count();
  if (highest < 0 || first_core + highest < cores)
    return;
  std::fprintf(stderr,
               "note: this process uses CPU devices up to cpu:%d (from core %d) but may run on "
               "only %d core%s, so some devices share a core (cpu:N runs on core (%d + N) mod "
               "%d) and steps are slower than with a core each\n",
               highest, first_core, cores, cores == 1 ? "" : "s", first_core, cores);
}

// The roster of this node's spawned actors.
roster roster_of(const std::map<std::string, caf::actor>& spawned) {
  roster r;
  for (const auto& [name, handle] : spawned) {
    r.names.push_back(name);
    r.handles.push_back(handle);
  }
  return r;
}

// A node the run has lost, if any (asked between the slices of a wait); none in one process.
using lost_node_check = std::function<std::optional<std::int32_t>()>;

// The parameters of each model layer at `version`, from its first optimizer (the
// replicas' optimizers are identical by construction). Waits until every optimizer has
// applied that step; `failure` says why not, if one will not (it ended, or its node was
// lost: with `lost`, a run over several nodes, the wait is in slices of a second, asking
// the watch between them, since a lost node's actors never answer and the trainer, which
// the watch tells, has finished).
std::vector<std::vector<std::vector<float>>> collect_parameters(
    caf::scoped_actor& self, const topology& graph,
    const std::map<std::string, caf::actor>& everyone, std::int64_t version,
    const lost_node_check& lost, std::string& failure) {
  std::vector<std::vector<std::vector<float>>> parameters(graph.shapes.size() - 1);
  std::vector<bool> done(parameters.size(), false);
  for (const auto& a : graph.actors) {
    if (a.kind != actor_kind::optimizer)
      continue;
    bool first = !done.at(static_cast<std::size_t>(a.layer));
    done[static_cast<std::size_t>(a.layer)] = true;
    const auto why_not = "node0 could not collect the parameters of layer " +
                         std::to_string(a.layer) + " after the last step (" +
                         std::to_string(version) + ") from " + a.name + ": ";
    for (bool answered = false; !answered;) {
      caf::error error;
      auto reply = lost ? self->request(everyone.at(a.name), std::chrono::seconds(1),
                                        caf::get_atom::value, version)
                        : self->request(everyone.at(a.name), caf::infinite,
                                        caf::get_atom::value, version);
      std::move(reply).receive(
          [&](std::vector<tensor>& params) {
            answered = true;
            if (first)
              for (const auto& p : params)
                parameters[static_cast<std::size_t>(a.layer)].push_back(p.to_vector());
          },
          [&](caf::error& e) { error = std::move(e); });
      if (answered)
        break;
      if (error != caf::sec::request_timeout) {
        failure = why_not + self->system().render(error);
        return parameters;
      }
      // Any node: an optimizer of node0 waits for its averager's peers on the others.
      if (const auto node = lost(); node) {
        failure = why_not + "node" + std::to_string(*node) + " was lost";
        return parameters;
      }
    }
  }
  return parameters;
}

// The async servers' staleness counts, summed (they have all applied the last step).
std::vector<std::int64_t> collect_staleness(caf::scoped_actor& self, const topology& graph,
                                            const std::map<std::string, caf::actor>& everyone) {
  std::vector<std::int64_t> total;
  for (const auto& a : graph.actors) {
    if (a.kind != actor_kind::optimizer)
      continue;
    self->request(everyone.at(a.name), std::chrono::seconds(10), staleness_atom::value)
        .receive(
            [&](const staleness_counts& counts) {
              if (total.size() < counts.size())
                total.resize(counts.size(), 0);
              for (std::size_t i = 0; i < counts.size(); ++i)
                total[i] += counts[i];
            },
            [](caf::error&) {});  // a report, not the run's result: left out
  }
  return total;
}

// ---- one process ----

class one_process_mode : public run_mode {
 public:
  void wire(session_state& s) override {
    s.everyone = s.spawned;
    join_workers(s);
    std::set<caf::actor> listed;  // a fused group's actor once, by its first member's name
    for (const auto& a : s.graph().actors) {
      const auto& handle = s.everyone.at(a.name);
      if (listed.insert(handle).second)
        s.trainer_config->actors.emplace_back(a.name, handle);
      if (a.kind == actor_kind::data_loader)
        s.trainer_config->loader = handle;
      if (a.kind == actor_kind::optimizer)
        s.trainer_config->optimizers.push_back(handle);
    }
    self_ = std::make_unique<caf::scoped_actor>(*s.system);
    // Wiring first: it is in every mailbox before anything the start sets off.
    s.wire_local(*self_);
    wire_workers(s);
  }

  void run(session_state& s) override {
    auto& outcome = *s.outcome;
    auto& system = *s.system;
    (*self_)
        ->request(s.trainer, caf::infinite, start_atom::value)
        .receive([](int) {},
                 [&](caf::error& error) {
                   // A trainer that ended before its start (the watch lost a node
                   // first) said why; the bounced request only says it is gone.
                   if (!outcome.failure.empty())
                     return;
                   outcome.exit_code = exit_code::run_failed;
                   outcome.failure = system.render(error);
                 });
  }

  // The run is over when every optimizer has applied the last step (the last loss
  // report reaches the trainer before the last gradients reach the first layers).
  void collect(session_state& s) override {
    auto& outcome = *s.outcome;
    if (outcome.exit_code != exit_code::ok)
      return;
    std::string not_collected;
    auto parameters = collect_parameters(*self_, s.graph(), s.everyone, outcome.steps,
                                         lost_node(), not_collected);
    if (!not_collected.empty()) {
      outcome.exit_code = exit_code::run_failed;
      outcome.failure = not_collected;
      return;
    }
    if (s.config.parallel.rule == averaging_rule::async)
      s.result.staleness = collect_staleness(*self_, s.graph(), s.everyone);
    const auto& config = s.config;
    const auto& graph = s.graph();
    const auto& data = *s.prepared.data;
    if (!data.vocabulary.empty() && !config.is_explicit() && s.options.sample_length > 0)
      s.result.sample = sample_text(
          host_model(config.model.layers, graph.inputs, graph.shapes, parameters),
          data.vocabulary, config.data.context, "\n", s.options.sample_length, config.run.seed,
          sample_temperature);
    if (s.options.keep_parameters) {
      s.result.parameters = std::move(parameters);
      s.result.model = s.prepared.model;
    }
  }

  void finish(session_state& s) override {
    s.devices->synchronize();
    for (const auto& [name, handle] : s.everyone)
      (*self_)->send(handle, finish_atom::value);
    if (s.checkpoints.enabled())
      (*self_)->send(s.checkpoints.writer, finish_atom::value);  // after the shards it was sent
    finish_workers(s);
  }

  void close() override { self_.reset(); }

 protected:
  /// Adds the workers' actors to s.everyone (node0 of several).
  virtual void join_workers(session_state& s) { (void)s; }
  /// Wires the workers' actors, once node0's are (node0 of several).
  virtual void wire_workers(session_state& s) { (void)s; }
  /// What the waits for the final parameters ask between their slices; none: no slices.
  virtual lost_node_check lost_node() const { return {}; }
  /// Collects the workers' traces and tells them how the run ended (node0 of several).
  virtual void finish_workers(session_state& s) { (void)s; }

  std::unique_ptr<caf::scoped_actor> self_;  // the session's hand in the actor system
};

// ---- simulated: one process in virtual time ----

class simulated_mode final : public one_process_mode {
 public:
  explicit simulated_mode(simulation& world) : world_(world) {}

  bool plays_every_node() const override { return true; }
  void set_clock(trace::recorder_settings& settings) const override {
    settings.record = true;
    settings.virtual_clock = &world_.clock();
  }
  std::unique_ptr<device_set> make_devices(const session_state& s) const override {
    return std::make_unique<device_set>(s.graph().devices, world_);
  }
  void tracks_registered(const std::map<std::string, std::uint32_t>& tracks) const override {
    world_.name_tracks(tracks);
  }
  bool writer_on_own_thread() const override { return false; }
  void started(caf::actor_system& system) const override {
    device_scheduler::simulate(system, world_);
  }
  bool returns_trace() const override { return true; }

 private:
  simulation& world_;
};

// ---- several nodes ----

// What node0 and the workers share: the node, CAF's network and the shared-memory links.
struct node_setup {
  cluster_node node;

  void configure(caf::actor_system_config& config, process_links& links,
                 const session_state& s) const {
    configure_cluster_system(config, node);
    if (!s.config.cluster.shared_memory)
      return;
    // An inbox for each other node at most: a peer that asks under more names gets none.
    links.links.emplace(net::shm_links::default_capacity,
                        static_cast<std::size_t>(std::max<std::int64_t>(1, s.graph().nodes - 1)));
    links.in_use.emplace(*links.links);
  }

  gloo_rendezvous gloo(const session_state& s, gloo_rendezvous given,
                       const caf::actor& store) const {
    if (!given.store) {
      given.store = cluster_store(*s.system, store, s.config.parallel.gloo_timeout);
      given.prefix = "troupe.run/";
      given.hostname = gloo_address(node);
    }
    return given;
  }
};

class coordinator_mode final : public one_process_mode {
 public:
  explicit coordinator_mode(cluster_node node) : setup_{std::move(node)} {}

  void configure(caf::actor_system_config& config, process_links& links,
                 const session_state& s) const override {
    setup_.configure(config, links, s);
  }
  void join(session_state& s) override {
    gate_ = std::make_unique<coordinator_gate>(*s.system, setup_.node, s.trainer,
                                               s.checkpoints.writer);
  }
  gloo_rendezvous gloo(const session_state& s, gloo_rendezvous given) const override {
    return run_mode::gloo(s, setup_.gloo(s, std::move(given), gate_->gloo_store()));
  }
  void close() override {
    one_process_mode::close();
    gate_.reset();
  }

 protected:
  void join_workers(session_state& s) override {
    try {
      joined_ = gate_->wait_for_workers(roster_of(s.spawned));
    } catch (...) {
      s.stop_spawned();
      throw;
    }
    // What the workers joined with is a peer's word: a roster that does not name each
    // of their actors once, with a handle, ends the run here (telling the workers),
    // not in a lookup that would leave every actor running.
    const auto wrong = check_roster(s);
    if (!wrong.empty()) {
      gate_->finish(*joined_, exit_status(exit_code::run_failed), "node0: " + wrong);
      s.stop_spawned();
      throw user_error("node0: " + wrong, exit_code::run_failed);
    }
  }

  void wire_workers(session_state& s) override {
    gate_->watch(*joined_);  // first: a node lost while it is wired is told from one slow
    try {
      gate_->wire_workers(*joined_);
    } catch (...) {
      gate_->finish(*joined_, exit_status(exit_code::run_failed),
                    "node0 could not wire the workers' actors");
      s.stop_spawned();
      throw;
    }
  }

  lost_node_check lost_node() const override {
    auto* gate = gate_.get();
    return [gate]() -> std::optional<std::int32_t> {
      const auto lost = gate->lost_nodes();
      if (lost.empty())
        return std::nullopt;
      return *lost.begin();
    };
  }

  void finish_workers(session_state& s) override {
    if (!s.trace_path.empty())
      s.node_traces = gate_->collect_traces(*joined_);
    gate_->finish(*joined_, exit_status(s.outcome->exit_code), s.outcome->failure);
  }

 private:
  // Adds the workers' actors to s.everyone; what is wrong with their rosters, if anything.
  std::string check_roster(session_state& s) const {
    const auto& names = joined_->actors.names;
    const auto& handles = joined_->actors.handles;
    if (names.size() != handles.size())
      return "the workers' rosters have " + std::to_string(names.size()) + " names and " +
             std::to_string(handles.size()) + " actors";
    for (std::size_t i = 0; i < names.size(); ++i) {
      // (node0's own actors are in the roster too, as themselves)
      auto [at, added] = s.everyone.emplace(names[i], handles[i]);
      if (!handles[i] || (!added && at->second != handles[i]))
        return "the workers' rosters name " + names[i] +
               (handles[i] ? " twice (or as one of node0's)" : " without its actor");
    }
    for (const auto& a : s.graph().actors)
      if (s.everyone.count(a.name) == 0)
        return "no node joined with " + a.name + " (node" + std::to_string(a.device.node) +
               " runs another build of troupe?)";
    return {};
  }

  node_setup setup_;
  std::unique_ptr<coordinator_gate> gate_;
  std::optional<joined_cluster> joined_;
};

class worker_mode final : public run_mode {
 public:
  explicit worker_mode(cluster_node node) : setup_{std::move(node)} {}

  int rank() const override { return setup_.node.rank; }
  bool drives() const override { return false; }
  void configure(caf::actor_system_config& config, process_links& links,
                 const session_state& s) const override {
    setup_.configure(config, links, s);
  }
  void join(session_state& s) override {
    link_ = std::make_unique<worker_link>(*s.system, setup_.node);  // throws: nothing spawned yet
    s.trainer = link_->welcome().trainer;
    s.checkpoints.writer = link_->welcome().checkpoint_writer;
  }
  gloo_rendezvous gloo(const session_state& s, gloo_rendezvous given) const override {
    return run_mode::gloo(s, setup_.gloo(s, std::move(given), link_->welcome().gloo_store));
  }

  // A worker is wired when node0 sends the roster, while it serves (run).
  void wire(session_state& s) override { (void)s; }

  // Serves node0 until it says the run is over.
  void run(session_state& s) override {
    auto& outcome = *s.outcome;
    int code = 1;
    try {
      code = link_->serve(
          roster_of(s.spawned),
          [&](const roster& all) {
            s.everyone.clear();
            for (std::size_t i = 0; i < all.names.size(); ++i)
              s.everyone[all.names[i]] = all.handles[i];
            caf::scoped_actor self{*s.system};
            s.wire_local(self);
          },
          [&] {
            // The run is over: what this node recorded goes into node0's trace.
            s.recorder->freeze();
            s.trace_sent = true;
            return s.trace_path.empty() ? std::string{} : s.trace_json(outcome);
          });
    } catch (const user_error& e) {
      outcome.exit_code = e.exit_code();
      outcome.failure = e.what();
      s.stop_spawned();
    } catch (const std::exception& e) {
      // Anything else (a wiring that cannot be sent) fails the run, never hangs it: the
      // actor system would wait for the actors left running.
      outcome.exit_code = exit_code::run_failed;
      outcome.failure = e.what();
      s.stop_spawned();
    }
    if (outcome.failure.empty())
      outcome.exit_code = static_cast<troupe::exit_code>(code);
  }

  // node0 collects the parameters; this node's trace went with the end of serve.
  void collect(session_state& s) override { (void)s; }
  void finish(session_state& s) override { s.devices->synchronize(); }
  void close() override { link_.reset(); }

 private:
  node_setup setup_;
  std::unique_ptr<worker_link> link_;
};

}  // namespace

std::unique_ptr<device_set> run_mode::make_devices(const session_state& s) const {
  const auto local = devices_of_node(s.graph(), rank());
  for (const auto& d : s.config.parallel.devices)
    if (d.id.type == device_type::cuda && d.id.node == rank()) {
      try {
        gpu::require_device(d.id.index);
      } catch (const user_error& e) {
        throw config_error(d.where, "device '" + d.name + "': " + e.what());
      }
    }
  // Several nodes on one machine take turns at its cores: node k's cpu:N is a core after
  // those of the nodes before it (Note [CPU streams] in stream_worker.cpp).
  const int local_rank = s.options.cluster && s.graph().nodes > 1 ? s.options.cluster->local_rank : 0;
  const int first_core = local_rank * static_cast<int>(local.size());
  const device_options options{s.config.run.tf32, s.config.run.cpu_gemm};
  auto devices = std::make_unique<device_set>(local, first_core, options);
  note_shared_cores(local, first_core);
  return devices;
}

gloo_rendezvous run_mode::gloo(const session_state& s, gloo_rendezvous given) const {
  (void)s;
  // One store and prefix for the whole session, so its contexts meet each other and no
  // other session's.
  if (!given.store)
    given.store = make_in_process_store();
  if (given.prefix.empty())
    given.prefix = unique_gloo_prefix();
  return given;
}

namespace {

// Note [gloo outside the door]
// gloo's transport (averaging = "gloo") opens TCP connections of its own between the
// nodes, outside CAF, so outside the front door (Note [the front door] in
// runtime/net/front_door.cpp) and outside TLS: gloo reads whatever a peer that reaches
// those ports sends, and no secret or certificate is asked for. Across nodes it is refused
// unless [cluster] unauthenticated_gloo = true says that every host that can reach them is
// trusted; with tls it is refused outright, since the gradients would cross unencrypted
// where TLS was asked for.
void refuse_gloo_across_nodes(const cluster_section& cluster, const source_position& where,
                              bool tls) {
  if (tls)
    throw config_error(where,
                       "averaging = \"gloo\" sends the gradients over gloo's own TCP "
                       "connections, which [cluster] tls (at " +
                           cluster.tls_where.to_string() +
                           ") does not cover: they would cross the network unencrypted; use "
                           "averaging = \"ring\" or \"central\" with TLS, or turn tls off");
  if (!cluster.unauthenticated_gloo)
    throw config_error(where,
                       "averaging = \"gloo\" across nodes sends the gradients over gloo's own "
                       "TCP connections, which take any peer that reaches their ports: the "
                       "shared secret guards only troupe's own links; use averaging = \"ring\" "
                       "or \"central\", or set [cluster] unauthenticated_gloo = true where "
                       "every host that can reach this machine's ports is trusted");
}

}  // namespace

std::unique_ptr<run_mode> make_run_mode(const session_state& s) {
  const auto& options = s.options;
  const auto& graph = s.graph();
  if (options.world != nullptr)
    return std::make_unique<simulated_mode>(*options.world);
  if (graph.nodes <= 1)
    return std::make_unique<one_process_mode>();
  // One process is one node (Note [joining a run] in cluster.cpp).
  if (!options.cluster || options.cluster->nodes != graph.nodes)
    throw user_error("this config runs on " + std::to_string(graph.nodes) +
                     " nodes ([cluster] nodes): start it with troupe launch -n " +
                     std::to_string(graph.nodes) + " " + s.config.path +
                     ", or one troupe run per node under torchrun, Slurm or mpirun");
  const auto& node = *options.cluster;
  for (const auto& a : graph.actors)
    if (a.kind == actor_kind::averager && a.method == averaging_method::gloo)
      refuse_gloo_across_nodes(s.config.cluster, a.method_where, node.tls.has_value());
  if (node.coordinator())
    return std::make_unique<coordinator_mode>(node);
  return std::make_unique<worker_mode>(node);
}

}  // namespace troupe
