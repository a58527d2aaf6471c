// session.cpp: checking, spawning, wiring, running and tearing down one run.
#include "actors/session.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/actor_kinds.hpp"
#include "actors/batch_assembler_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/device_scheduler.hpp"
#include "actors/failures.hpp"
#include "actors/layer_actor.hpp"
#include "actors/optimizer_actor.hpp"
#include "actors/shm_delivery.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/interchange.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/text.hpp"
#include "runtime/graph/host_model.hpp"
#include "runtime/graph/model_graph.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/net/shared_memory.hpp"
#include "runtime/plugin/plugin.hpp"
#include "runtime/trace_tools/merge.hpp"
#include "troupe/trace.hpp"

namespace troupe {

std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes, std::int64_t positions) {
  // A layer's output for the largest batch it sees must fit limits::max_tensor_elements,
  // or a config (a conv2d of 65536 channels) would be killed for memory mid-run.
  const auto batch = std::max(config.data.batch_size, config.data.eval_batch_size);
  const auto inputs = resolve_inputs(config.model);
  std::vector<const layer_config*> layers;
  std::vector<source_position> where;
  for (const auto& layer : config.model.layers) {
    layers.push_back(&layer);
    where.push_back(layer.where);
  }
  auto fits_limit = [&](std::size_t i, const shape_t& output) {
    std::int64_t values = batch;
    bool fits = true;
    for (auto d : output) {
      const auto product = checked_multiply(values, d);
      fits = fits && product && *product <= limits::max_tensor_elements;
      values = fits ? *product : 0;
    }
    if (!fits)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' outputs " + shape_to_string(output) +
                             " per sample, more than the limit of " +
                             std::to_string(limits::max_tensor_elements) +
                             " values for a batch of " + std::to_string(batch) +
                             "; use a smaller layer or batch");
  };
  const auto model = infer_shapes(layers, inputs, {input_features}, where, fits_limit);
  // A layer that reads token ids must know every id the data holds (a text's vocabulary).
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto ids = create_layer(*layers[i])->input_ids();
    // Images are values, not ids: found at step 0 it was exit 1 ("token id -0.17676").
    if (ids > 0 && inputs[i].front() == data_input && config.data.source != data_source::text)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' reads token ids, but [data] source = \"" +
                             to_string(config.data.source) +
                             "\" gives feature values; token ids come from source = \"text\"");
    if (ids > 0 && positions > 1 && inputs[i].front() == data_input && ids < classes)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' reads token ids below " +
                             std::to_string(ids) + ", and the text has " +
                             std::to_string(classes) + " distinct tokens (bytes); set its vocab "
                             "to " + std::to_string(classes));
  }
  auto shapes = model.input;
  shapes.push_back(model.output.back());
  const auto& out = shapes.back();
  const auto expected = loss_input_shape(classes, positions);
  if (out != expected) {
    const auto& last = config.model.layers.back();
    throw config_error(last.where,
                       "the model's output shape " + shape_to_string(out) + " must be " +
                           shape_to_string(expected) +
                           (positions > 1 ? ", one logit per token of the vocabulary at each "
                                            "of the sequence's positions"
                                          : ", one logit per class of the data set") +
                           "; change the last layer's 'out'");
  }
  return shapes;
}

namespace {

dataset_split load_data(const run_config& config) {
  const auto& d = config.data;
  if (d.source == data_source::synthetic)
    return make_synthetic(d.synthetic_train, d.synthetic_test, d.synthetic_features,
                          d.synthetic_classes, config.run.seed);
  if (d.source == data_source::text)
    return make_text_dataset(read_text_corpus(d.path, d.validation_every, d.context), d.context);
  return load_fashion_mnist(d.path);
}

/// [parallel] balance = [w0, w1, ...]: each replica's rows of a step (Note [balanced
/// replicas] in actors/data_loader_actor.cpp), one weight a replica and M rows at least.
std::vector<std::int64_t> weighted_rows(const run_config& config, const topology& graph) {
  const auto& parallel = config.parallel;
  const auto batch = config.data.batch_size;
  const auto& weights = parallel.balance_weights;
  const std::string key = "[parallel] balance: ";
  if (static_cast<std::int64_t>(weights.size()) != graph.replicas)
    throw config_error(parallel.balance_where, key + std::to_string(weights.size()) +
                                                   " weight(s), but the run has " +
                                                   std::to_string(graph.replicas) +
                                                   " replica(s); give one weight a replica");
  auto rows = apportion_rows(batch, weights);
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (rows[r] < graph.microbatches)
      throw config_error(parallel.balance_where,
                         key + "replica " + std::to_string(r) + "'s weight gives it " +
                             std::to_string(rows[r]) + " of the " + std::to_string(batch) +
                             " rows of a step, fewer than its " +
                             std::to_string(graph.microbatches) +
                             " micro-batch(es); raise its weight or the batch size");
  return rows;
}

run_plan make_plan(const run_config& config, const topology& graph, const dataset_split& data) {
  const auto& d = config.data;
  run_plan plan;
  plan.batch_size = d.batch_size;
  plan.replicas = graph.replicas;
  plan.microbatches = graph.microbatches;
  if (data.train.count < d.batch_size)
    throw config_error(d.where, "[data] batch_size " + std::to_string(d.batch_size) +
                                    " is larger than the training set (" +
                                    std::to_string(data.train.count) + " samples)");
  if (config.parallel.balance == replica_balance::weights)
    plan.replica_rows = weighted_rows(config, graph);
  else if (d.batch_size % (plan.replicas * plan.microbatches) != 0)
    throw config_error(config.parallel.where,
                       "[data] batch_size " + std::to_string(d.batch_size) +
                           " must split evenly into data (" + std::to_string(plan.replicas) +
                           ") x microbatches (" + std::to_string(plan.microbatches) +
                           ") parts; use a batch size that is a multiple of " +
                           std::to_string(plan.replicas * plan.microbatches));
  else
    plan.replica_rows.assign(static_cast<std::size_t>(plan.replicas), d.batch_size / plan.replicas);
  plan.steps_per_epoch = data.train.count / d.batch_size;
  // epochs x steps per epoch, overflow-checked and bounded: a step count past the limit is
  // refused here rather than wrapping (Note [input limits] in runtime/base/limits.hpp).
  const auto total = config.run.steps > 0
                         ? std::optional<std::int64_t>{config.run.steps}
                         : checked_multiply(config.run.epochs, plan.steps_per_epoch);
  if (!total || *total > limits::max_steps)
    throw config_error(
        config.run.where,
        (config.run.steps > 0 ? "[run] steps (or --steps) = " + std::to_string(config.run.steps)
                              : "[run] epochs = " + std::to_string(config.run.epochs) + " x " +
                                    std::to_string(plan.steps_per_epoch) + " steps per epoch") +
            " is more than the limit of " + std::to_string(limits::max_steps) + " steps in a run");
  plan.total_steps = *total;
  plan.epochs = (plan.total_steps + plan.steps_per_epoch - 1) / plan.steps_per_epoch;
  plan.evaluate = config.run.evaluate && data.test.count > 0;
  plan.eval_batch_size = d.eval_batch_size;
  plan.eval_batches = (data.test.count + d.eval_batch_size - 1) / d.eval_batch_size;
  plan.positions = data.train.positions;
  // The trainer counts every step and evaluation batch of the run (run_control): that
  // count must fit too.
  const auto eval_items = checked_multiply(plan.epochs + 1, plan.eval_batches);
  if (plan.evaluate && (!eval_items || !checked_add(*eval_items, plan.total_steps)))
    throw config_error(config.run.where,
                       "[run] " + std::to_string(plan.epochs) + " epochs of " +
                           std::to_string(plan.eval_batches) +
                           " evaluation batches each are too many to count; train fewer "
                           "epochs or set [run] evaluate = false");
  return plan;
}

lr_schedule make_schedule(const optimizer_section& o, std::int64_t total_steps) {
  lr_schedule s;
  s.type = o.schedule.type;
  s.base_lr = o.lr;
  s.warmup_steps = o.schedule.warmup_steps;
  s.step_size = o.schedule.step_size;
  s.gamma = o.schedule.gamma;
  s.min_lr = o.schedule.min_lr;
  s.total_steps = total_steps;
  return s;
}

// The parameters of each model layer at `version`, from its first optimizer (the
// replicas' optimizers are identical by construction). Waits until every optimizer has
// applied that step; `failure` says why not, if one will not (it ended, or its node was
// lost: with `gate`, a run over several nodes, the wait is in slices of a second, asking
// the watch between them, since a lost node's actors never answer and the trainer, which
// the watch tells, has finished).
std::vector<std::vector<std::vector<float>>> collect_parameters(
    caf::scoped_actor& self, const topology& graph,
    const std::map<std::string, caf::actor>& spawned, std::int64_t version, coordinator_gate* gate,
    std::string& failure) {
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
      auto reply =
          gate ? self->request(spawned.at(a.name), std::chrono::seconds(1), caf::get_atom::value,
                               version)
               : self->request(spawned.at(a.name), caf::infinite, caf::get_atom::value, version);
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
      if (const auto lost = gate->lost_nodes(); !lost.empty()) {
        failure = why_not + "node" + std::to_string(*lost.begin()) + " was lost";
        return parameters;
      }
    }
  }
  return parameters;
}

}  // namespace

namespace {

// What a trace needs to be read without the config: the wiring and how the run went.
std::string trace_metadata(const run_config& config, const topology& graph, const run_plan& plan,
                           const run_outcome& outcome) {
  nlohmann::json meta = {
      {"troupe_version", TROUPE_VERSION_STRING}, {"config", config.path},
      {"replicas", graph.replicas},              {"stages", graph.stages},
      {"microbatches", graph.microbatches},      {"schedule", to_string(graph.schedule)},
      {"virtual_stages", graph.virtual_stages},
      {"averaging", to_string(graph.averaging)}, {"batch_size", plan.batch_size},
      {"steps", outcome.steps},                  {"train_seconds", outcome.train_seconds},
  };
  auto wires = nlohmann::json::array();
  for (const auto& w : graph.wires)
    wires.push_back({{"from", w.from},
                     {"to", w.to},
                     {"kind", to_string(w.kind)},
                     {"capacity", w.capacity},
                     {"crosses_nodes", graph.crosses_nodes(w)}});
  meta["wires"] = wires;
  meta["nodes"] = graph.nodes;
  return meta.dump();
}

}  // namespace

namespace {

// The model's parameterised layers, from the first replica's layer actors.
std::vector<model_layer> model_layers(const topology& graph) {
  std::map<std::int64_t, model_layer> found;
  for (const auto& a : graph.actors) {
    if (a.kind != actor_kind::layer || found.count(a.layer))
      continue;
    auto params = create_layer(a.math)->parameters(graph.shapes.at(static_cast<std::size_t>(a.layer)));
    if (!params.empty())
      found[a.layer] = model_layer{a.layer, a.math.type, std::move(params)};
  }
  std::vector<model_layer> out;
  for (auto& [index, layer] : found)
    out.push_back(std::move(layer));
  return out;
}

// A fingerprint of what decides a run's numbers apart from its wiring (the model, the
// optimizer, the batch, the seed): FNV-1a over their text. A checkpoint records it, so
// that a resume with other settings can say so; the wiring is left out on purpose.
std::string config_fingerprint(const run_config& config) {
  std::string text = "seed=" + std::to_string(config.run.seed) +
                     ";batch=" + std::to_string(config.data.batch_size) + ";";
  for (const auto& layer : config.model.layers) {
    text += layer.type + "(";
    for (const auto& [key, value] : layer.settings)
      text += key + "=" +
              std::visit(
                  [](const auto& v) {
                    std::ostringstream out;
                    out << std::boolalpha << v;
                    return out.str();
                  },
                  value.value) +
              ",";
    text += ")";
  }
  const auto& o = config.optimizer;
  std::ostringstream optimizer;
  optimizer << std::setprecision(17) << to_string(o.type) << ",lr=" << o.lr << ",m=" << o.momentum
            << ",d=" << o.dampening << ",wd=" << o.weight_decay << ",n=" << o.nesterov
            << ",b1=" << o.beta1 << ",b2=" << o.beta2 << ",eps=" << o.eps
            << ",schedule=" << to_string(o.schedule.type);
  text += optimizer.str();
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text)
    hash = (hash ^ c) * 1099511628211ull;
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << hash;
  return out.str();
}

}  // namespace

session_prepared prepare_session(const run_config& config, const std::string& resume) {
  // A no-op for those the command line loaded already; run_session() callers (tests,
  // programs using the library) get the config's plugins too.
  load_config_plugins(config);
  return prepare_session(config, std::make_shared<const dataset_split>(load_data(config)), resume);
}

session_prepared prepare_session(const run_config& config,
                                 std::shared_ptr<const dataset_split> data,
                                 const std::string& resume) {
  session_prepared p;
  p.data = std::move(data);
  if (config.is_explicit()) {
    p.graph = topology_from_explicit(config, p.data->train.features);
  } else {
    auto shapes = check_model(config, p.data->train.features, p.data->train.classes,
                              p.data->train.positions);
    p.graph = expand_shorthand(config, shapes);
  }
  validate_topology(p.graph, config, p.data->train.classes, p.data->train.positions);
  p.plan = make_plan(config, p.graph, *p.data);
  p.schedule = make_schedule(config.optimizer, p.plan.total_steps);
  p.model = model_layers(p.graph);
  // init_from is where a run starts; a resumed run continues from its checkpoint instead
  // (which holds the weights it trained from them), so the same config does both.
  if (!config.model.init_from.empty() && resume.empty()) {  // interchange.hpp
    try {
      p.start = weights_from(config.model.init_from, p.model);
    } catch (const data_error& e) {  // where the config asked for that file
      throw data_error(config.model.init_from_where.to_string() + ": " + e.what());
    }
  }
  if (!resume.empty()) {
    const auto checkpoint = resolve_resume_path(resume);
    const auto manifest = verify_checkpoint(checkpoint.path);
    // Another optimizer's state would be dropped or misread; Adam's and AdamW's are the
    // same moments. Weights alone go over with troupe export and [model] init_from.
    const std::string optimizer = to_string(config.optimizer.type);
    auto adam = [](const std::string& o) { return o == "adam" || o == "adamw"; };
    if (manifest.optimizer != optimizer && !(adam(manifest.optimizer) && adam(optimizer)))
      throw data_error("checkpoint '" + checkpoint.path + "' (step " +
                       std::to_string(manifest.step) + ") holds the " + manifest.optimizer +
                       " optimizer's state, and the config trains with " + optimizer +
                       "; resume with " + manifest.optimizer +
                       ", or start from its weights alone: troupe export " + checkpoint.path +
                       " -o weights.safetensors, then [model] init_from");
    // Other settings may be meant (a lower learning rate), or not (an older run's
    // checkpoint): said, not refused. The wiring is not in the fingerprint.
    if (manifest.config_hash != config_fingerprint(config))
      std::fprintf(stderr,
                   "note: resuming from %s (step %lld), written with other settings than %s "
                   "has (model settings, optimizer, batch or seed: fingerprint %s, here %s)\n",
                   checkpoint.path.c_str(), static_cast<long long>(manifest.step),
                   config.path.c_str(), manifest.config_hash.c_str(),
                   config_fingerprint(config).c_str());
    p.start = resume_from(checkpoint.path, manifest, p.model,
                          optimizer_state_names(config.optimizer.type, config.optimizer.momentum));
    if (p.start.step >= p.plan.total_steps)
      throw data_error("checkpoint '" + checkpoint.path + "' is at step " +
                       std::to_string(p.start.step) + ", and the run has " +
                       std::to_string(p.plan.total_steps) +
                       " steps in all: nothing is left to train (--steps and [run] epochs "
                       "count from the start of the run, not from the checkpoint)");
    p.plan.first_step = p.start.step;
  }
  return p;
}

namespace {

// Note [more CPU devices than cores]
// A CPU device is one core (Note [CPU streams] in device.cpp): cpu:N runs on core
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

// Binds every thread of an actor system to the session's recorder as the thread starts.
class bind_recorder_hook : public caf::thread_hook {
 public:
  explicit bind_recorder_hook(std::shared_ptr<trace::recorder> recorder)
      : recorder_(std::move(recorder)) {}
  void init(caf::actor_system&) override {}
  void thread_started() override { trace::bind_this_thread(recorder_); }
  void thread_terminates() override { trace::bind_this_thread(nullptr); }

 private:
  std::shared_ptr<trace::recorder> recorder_;
};

// Binds each device stream's thread to the session's recorder for the session's life: a
// task posted now runs before any job (stream::post), so every job and every handler on
// that thread records into this session's trace.
class stream_bindings {
 public:
  stream_bindings(device_set& devices, const std::shared_ptr<trace::recorder>& recorder)
      : devices_(devices) {
    for (auto& d : devices_.all())
      d->work().post([recorder] { trace::bind_this_thread(recorder); });
  }
  ~stream_bindings() { release(); }
  stream_bindings(const stream_bindings&) = delete;
  stream_bindings& operator=(const stream_bindings&) = delete;

  /// Unbinds the streams' threads and waits until they are.
  void release() {
    if (released_)
      return;
    released_ = true;
    for (auto& d : devices_.all())
      d->work().post([] { trace::bind_this_thread(nullptr); });
    for (auto& d : devices_.all())
      d->work().drain_posted();
  }

 private:
  device_set& devices_;
  bool released_ = false;
};

// The wiring message of one actor: every wire that starts or ends at it.
wiring_msg wiring_of(const actor_plan& a, const topology& graph,
                     const std::map<std::string, caf::actor>& spawned,
                     const std::map<std::string, std::uint32_t>& tracks, const caf::actor& trainer) {
  wiring_msg w;
  w.trainer = trainer;
  auto track_of = [&](const std::string& name) {
    auto it = tracks.find(name);
    return it == tracks.end() ? 0u : it->second;
  };
  w.track = track_of(a.name);
  for (const auto& wire : graph.wires) {
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

}  // namespace

namespace {

// This node's devices, of all the run's: the ones it creates.
std::vector<device_id> devices_of_node(const topology& graph, int rank) {
  std::vector<device_id> out;
  for (const auto& d : graph.devices)
    if (d.node == rank)
      out.push_back(d);
  return out;
}

// Whether the loader sends batches to a first layer on node `rank` from another node: then
// this node assembles them from their rows (batch_assembler_actor.hpp).
bool needs_batch_assembler(const topology& graph, int rank) {
  for (const auto& wire : graph.wires) {
    const auto* from = graph.find(wire.from);
    const auto* to = graph.find(wire.to);
    if (wire.kind == wire_kind::activations && from->kind == actor_kind::data_loader &&
        to->device.node == rank && from->device.node != rank)
      return true;
  }
  return false;
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

// Where a node's trace goes: the coordinator's at `path`, node k's beside it as
// "NAME.nodeK.EXT" (until the coordinator collects them into one).
std::string trace_path_of_node(const std::string& path, int rank) {
  if (path.empty() || rank == 0)
    return path;
  std::filesystem::path p = path;
  return (p.parent_path() /
          (p.stem().string() + ".node" + std::to_string(rank) + p.extension().string()))
      .string();
}

}  // namespace

// How a language model's run draws its text after training (session_result::sample).
constexpr double sample_temperature = 0.8;

session_result run_session(const run_config& config, const session_options& options) {
  // ---- everything that can fail on bad input, before any actor exists ----
  // Note [output checked up front]
  // A metrics or trace path that cannot be written is bad input like a bad config: it is
  // refused (exit 2, the path and the reason) before the data loads and before anything
  // is spawned, not found out after the run as "internal error" or a lost trace. The
  // names are those of this process's node (a launcher's rank; the coordinator is 0).
  const int rank = options.cluster ? options.cluster->rank : 0;
  std::string metrics_path =
      options.metrics_path.empty() ? config.run.metrics : options.metrics_path;
  if (rank != 0)
    metrics_path.clear();  // only the coordinator reports
  const std::string trace_path =
      trace_path_of_node(options.trace_path.empty() ? config.run.trace : options.trace_path, rank);
  if (!metrics_path.empty())
    check_output_file(metrics_path, "the metrics file");
  if (!trace_path.empty())
    check_output_file(trace_path, "the trace file");
  // The checkpoints' directory too (it was found at the first checkpoint, with
  // checkpoint_every = 0 after the whole run): a file there made and removed again.
  if (rank == 0 && !config.run.checkpoint.empty())
    check_output_file(
        (std::filesystem::path{config.run.checkpoint} / ".troupe-write-check").string(),
        "a file in the checkpoint directory");
  // A restart loop says --resume DIR --checkpoint DIR from the first start on: until the
  // first checkpoint is in, there is nothing to resume, and the run starts at step 0. In
  // one process only: a node of several cannot know that node0 finds none either.
  std::string resume = options.resume;
  if (!resume.empty() && !config.run.checkpoint.empty() && !options.cluster) {
    std::error_code error;
    const bool same = std::filesystem::weakly_canonical(resume, error) ==
                      std::filesystem::weakly_canonical(config.run.checkpoint, error);
    // Nothing yet: no manifest anywhere. A manifest that cannot be read (a newer format, a
    // damaged one) is refused by the resume as before, not restarted over.
    auto nothing_yet = [&] {
      if (!std::filesystem::exists(resume, error))
        return true;
      const auto scan = scan_checkpoints(resume);
      return scan.complete.empty() &&
             std::all_of(scan.incomplete.begin(), scan.incomplete.end(),
                         [](const auto& c) { return c.reason.rfind("no manifest.json", 0) == 0; });
    };
    if (same && !error && nothing_yet()) {
      std::fprintf(stderr,
                   "note: %s, the checkpoint directory, holds no complete checkpoint yet: "
                   "starting at step 0\n",
                   resume.c_str());
      resume.clear();
    }
  }
  auto prepared = options.data != nullptr ? prepare_session(config, options.data, resume)
                                          : prepare_session(config, resume);
  const auto& graph = prepared.graph;
  // A text source's vocabulary goes with the run: token ids mean nothing without it. Next
  // to a metrics file, not a device (--metrics /dev/null).
  std::error_code no_file;
  if (!metrics_path.empty() && !prepared.data->vocabulary.empty() &&
      (std::filesystem::is_regular_file(metrics_path, no_file) ||
       !std::filesystem::exists(metrics_path, no_file))) {
    const auto path =
        std::filesystem::path(metrics_path).replace_extension(".vocab.json").string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << vocabulary_json(prepared.data->vocabulary);
    if (!out)
      throw user_error("cannot write the vocabulary to " + quote_user_text(path));
  }
  // One process is one node (Note [joining a run] in cluster.cpp); a simulation plays every
  // node in this process.
  auto* const world = options.world;
  const bool several_nodes = graph.nodes > 1 && world == nullptr;
  if (several_nodes && (!options.cluster || options.cluster->nodes != graph.nodes))
    throw user_error("this config runs on " + std::to_string(graph.nodes) +
                     " nodes ([cluster] nodes): start it with troupe launch -n " +
                     std::to_string(graph.nodes) + " " + config.path +
                     ", or one troupe run per node under torchrun, Slurm or mpirun");
  const cluster_node node = several_nodes ? *options.cluster : cluster_node{};
  // Note [TLS between nodes] in cluster.cpp: gloo's transport is not inside TLS.
  if (node.tls)
    for (const auto& a : graph.actors)
      if (a.kind == actor_kind::averager && a.method == averaging_method::gloo)
        throw config_error(a.method_where,
                           "averaging = \"gloo\" sends the gradients over gloo's own TCP "
                           "connections, which [cluster] tls (at " +
                               config.cluster.tls_where.to_string() +
                               ") does not cover: they would cross the network unencrypted; "
                               "use averaging = \"ring\" or \"central\" with TLS, or turn tls "
                               "off");
  const bool coordinator = node.coordinator();
  set_this_node(node.rank);

  session_result result;
  auto outcome = std::make_shared<run_outcome>();
  std::vector<trace::node_trace> node_traces;  // the workers', collected by node0
  bool trace_sent = false;                     // a worker's, to node0
  // Tracing and the message log: this session's recorder, bound to every thread that runs
  // its code (Note [recorders and threads] in runtime/trace/recorder.cpp), with tracks for
  // every device stream and actor (and the trainer), registered before anything runs.
  trace::recorder_settings trace_settings;
  trace_settings.record = !trace_path.empty() || world != nullptr;
  if (world != nullptr)
    trace_settings.virtual_clock = &world->clock();
  trace_settings.capacity = static_cast<std::size_t>(config.run.trace_capacity);
  trace_settings.log_messages = options.log_messages;
  trace_settings.log_filter = options.log_filter;
  trace_settings.flow_base = static_cast<std::uint64_t>(node.rank) << 48;  // merge.hpp
  auto recorder = std::make_shared<trace::recorder>(trace_settings);
  trace::thread_binding bound_here{recorder};
  // Several nodes on one machine take turns at its cores: node k's cpu:N is a core after
  // those of the nodes before it (Note [CPU streams] in device.cpp).
  const auto local_devices = world != nullptr ? graph.devices : devices_of_node(graph, node.rank);
  // A cuda:N this machine lacks is the config's error, at the place that names it.
  if (world == nullptr)
    for (const auto& d : config.parallel.devices)
      if (d.id.type == device_type::cuda && d.id.node == node.rank) {
        try {
          gpu::require_device(d.id.index);
        } catch (const user_error& e) {
          throw config_error(d.where, "device '" + d.name + "': " + e.what());
        }
      }
  auto device_storage =
      world != nullptr
          ? std::make_unique<device_set>(local_devices, *world)
          : std::make_unique<device_set>(local_devices,
                                         node.local_rank * static_cast<int>(local_devices.size()),
                                         device_options{config.run.tf32});
  if (world == nullptr)
    note_shared_cores(local_devices, node.local_rank * static_cast<int>(local_devices.size()));
  device_set& devices = *device_storage;
  for (const auto& d : local_devices)
    reset_storage_peak(d);  // the run summary's peak memory is this run's
  stream_bindings bound_streams{devices, recorder};
  auto on_this_node = [&](const actor_plan& a) {
    return world != nullptr || a.device.node == node.rank;
  };
  std::map<std::string, std::uint32_t> tracks;
  std::uint32_t trainer_track = 0;
  if (recorder->recording() || recorder->logging()) {
    for (auto& d : devices.all())
      d->work().set_trace_track(recorder->register_track(
          {d->id().to_string() + " stream", "stream", d->id().to_string(), -1, -1, -1}));
    for (const auto& a : graph.actors)
      if (on_this_node(a))
        tracks[a.name] = recorder->register_track(
            {a.name, a.kind_name(), a.device.to_string(), a.replica, a.stage, a.layer});
    if (needs_batch_assembler(graph, node.rank))
      tracks[batch_assembler_name(node.rank)] = recorder->register_track(
          {batch_assembler_name(node.rank), "batch_assembler", "host", -1, -1, -1});
    if (coordinator)
      trainer_track = recorder->register_track({"trainer", "trainer", "host", -1, -1, -1});
  }
  if (world != nullptr)
    world->name_tracks(tracks);
  // Note [the trace on every path]: whatever ends the run, an exception from the code
  // below included, the trace of what was recorded is written before it propagates.
  std::exception_ptr escaped;
  // The checkpoint writer's thread (Note [the writer's own thread] in
  // actors/checkpoint_writer.cpp): made before the actor system, gone after it.
  std::unique_ptr<stream> writer_home;
  if (coordinator && !config.run.checkpoint.empty() && world == nullptr) {
    writer_home = std::make_unique<stream>(device_id{}, -1);
    writer_home->post([] { pthread_setname_np(pthread_self(), "troupe writer"); });
  }
  try {
    caf::actor_system_config system_config;
    add_message_types(system_config);
    if (several_nodes)
      configure_cluster_system(system_config, node);
    system_config.add_thread_hook<bind_recorder_hook>(recorder);
    // Actors handle their messages on their devices' threads, the trainer and the loader
    // on one host thread (Note [actors on device threads] in device_scheduler.cpp).
    system_config.load<device_scheduler>();
    // Tensors to the other nodes of this machine go through shared memory (Note [tensors
    // through shared memory] in runtime/net/shared_memory.cpp): the links are made before
    // the actor system and gone after it.
    std::optional<net::shm_links> links;
    std::optional<net::shm_links::scope> links_in_use;
    if (several_nodes && config.cluster.shared_memory) {
      // An inbox for each other node at most: a peer that asks under more names gets none.
      links.emplace(net::shm_links::default_capacity,
                    static_cast<std::size_t>(std::max<std::int64_t>(1, graph.nodes - 1)));
      links_in_use.emplace(*links);
    }
    caf::actor_system system{system_config};
    // Messages that other processes of this machine leave in shared memory: each stream
    // thread takes them between its jobs (Note [messages through shared memory] in
    // runtime/net/shared_memory.cpp), handing each to its actor as CAF's network thread
    // would. Unset before the actor system goes.
    std::unique_ptr<stream_poller> poller;
    if (links)
      poller = deliver_shared_memory(system, *links);
    if (world != nullptr)
      device_scheduler::simulate(system, *world);

    auto trainer_config = std::make_shared<trainer_settings>();
    caf::actor trainer;
    checkpoint_plan checkpoints;
    std::unique_ptr<worker_link> link;
    if (coordinator) {
      trainer_config->plan = prepared.plan;
      trainer_config->schedule = prepared.schedule;
      trainer_config->metrics_path = metrics_path;
      trainer_config->log_every = config.run.log_every;
      trainer_config->progress_bar = options.progress_bar;
      trainer_config->quiet = options.quiet;
      trainer_config->title = std::filesystem::path(config.path).stem().string();
      trainer_config->outcome = outcome;
      trainer_config->devices = &devices;
      trainer_config->track = trainer_track;
      trainer_config->watchdog_seconds =
          options.watchdog >= 0 ? options.watchdog : config.run.watchdog;
      trainer = system.spawn<trainer_actor>(trainer_config);
    }
    if (!config.run.checkpoint.empty()) {
      checkpoints.every = config.run.checkpoint_every;
      checkpoints.at_evaluations = config.run.checkpoint_keep_best;
      checkpoints.total_steps = prepared.plan.total_steps;
      checkpoints.steps_per_epoch = prepared.plan.steps_per_epoch;
      checkpoints.evaluate = prepared.plan.evaluate;
    }
    // Checkpoints: a writer on its own thread, on the coordinator; the optimizers of every
    // node send it their copies.
    if (coordinator && !config.run.checkpoint.empty()) {
      // A run writes the steps after its start: checkpoints in its root newer than that are
      // another run's (a fresh start's root was used before), or an abandoned future (a
      // resume from an older one), which a restart must not take for this run's (it did,
      // and pruning counted them, deleting the checkpoints this run wrote).
      for (const auto& path :
           set_aside_newer_checkpoints(config.run.checkpoint, prepared.plan.first_step))
        std::fprintf(stderr,
                     "note: set aside %s: it is newer than step %lld, where this run starts\n",
                     path.c_str(), static_cast<long long>(prepared.plan.first_step));
      checkpoint_writer_settings w;
      w.root = config.run.checkpoint;
      w.shards_per_checkpoint = std::count_if(
          graph.actors.begin(), graph.actors.end(),
          [&](const actor_plan& a) { return optimizer_writes_checkpoints(a, graph, config); });
      w.keep = static_cast<std::size_t>(config.run.checkpoint_keep);
      w.keep_best = config.run.checkpoint_keep_best;
      w.steps_per_epoch = prepared.plan.steps_per_epoch;
      w.base.config_hash = config_fingerprint(config);
      w.base.seed = config.run.seed;
      w.base.optimizer = to_string(config.optimizer.type);
      w.base.layers = describe_model(prepared.model);
      w.trainer = trainer;
      checkpoints.writer = spawn_checkpoint_writer(system, std::move(w), writer_home.get());
    }
    std::unique_ptr<coordinator_gate> gate;
    if (several_nodes && coordinator)
      gate = std::make_unique<coordinator_gate>(system, node, trainer, checkpoints.writer);
    if (several_nodes && !coordinator) {
      link = std::make_unique<worker_link>(system, node);  // throws: nothing spawned yet
      trainer = link->welcome().trainer;
      checkpoints.writer = link->welcome().checkpoint_writer;
    }
    trainer_config->checkpoints = checkpoints;
    trainer_config->watch_interrupts = options.watch_interrupts;

    for (auto& d : devices.all())
      d->work().set_error_handler([trainer, name = d->id().to_string()](std::exception_ptr e) {
        caf::anon_send(trainer, failure_msg{name, describe_exception(e)});
      });

    // gloo averagers: one store and prefix for the whole session (injected, or this
    // process's own), so its contexts meet each other and no other session's.
    // Over several nodes, the coordinator serves the store and the prefix is the run's.
    gloo_rendezvous gloo = options.gloo;
    if (several_nodes && !gloo.store) {
      gloo.store =
          cluster_gloo_store(system, coordinator ? gate->gloo_store() : link->welcome().gloo_store,
                             config.parallel.gloo_timeout);
      gloo.prefix = "troupe.run/";
      gloo.hostname = gloo_address(node);
    }
    if (!gloo.store)
      gloo.store = make_in_process_gloo_store();
    if (gloo.prefix.empty())
      gloo.prefix = unique_gloo_prefix();
    auto sequencers = make_stage_sequencers(graph);
    spawn_context context{
        system,        devices,        config,      graph, prepared.plan, prepared.schedule,
        prepared.data, prepared.start, checkpoints, gloo, sequencers};
    std::map<std::string, caf::actor> spawned;  // this node's
    auto stop_spawned = [&] {
      for (const auto& [name, handle] : spawned)
        caf::anon_send_exit(handle, caf::exit_reason::kill);
      if (coordinator) {
        caf::anon_send_exit(trainer, caf::exit_reason::kill);
        if (checkpoints.enabled())
          caf::anon_send_exit(checkpoints.writer, caf::exit_reason::kill);
      }
    };
    try {
      for (const auto& a : graph.actors)
        if (on_this_node(a))
          spawned[a.name] = spawn_actor(a, context);
      if (needs_batch_assembler(graph, node.rank)) {
        spawned[batch_assembler_name(node.rank)] =
            system.spawn<batch_assembler_actor>(node.rank, prepared.data, &devices);
      }
    } catch (...) {
      // A factory refused its actor's settings (a plugin's kind reads them only here).
      // Nothing has started; stop what exists, or the actor system would wait for it
      // forever on the way out, then report.
      stop_spawned();
      throw;
    }
    // Every actor handles its messages on its device's thread, the loader too (Note
    // [the loader on its device] in actors/device_scheduler.cpp).
    for (const auto& a : graph.actors)
      if (on_this_node(a))
        device_scheduler::place(system, spawned[a.name], devices.at(a.device).work());
    // Wiring first: it is in every mailbox before anything the start sets off.
    auto wire_local = [&](caf::scoped_actor& self, const std::map<std::string, caf::actor>& all) {
      for (const auto& a : graph.actors)
        if (on_this_node(a))
          self->send(spawned[a.name], wiring_of(a, graph, all, tracks, trainer));
      // The batch assembler has no wires: its wiring brings the trainer and its track.
      auto assembler = spawned.find(batch_assembler_name(node.rank));
      if (assembler != spawned.end()) {
        wiring_msg w;
        w.trainer = trainer;
        w.track = tracks.count(assembler->first) ? tracks.at(assembler->first) : 0;
        self->send(assembler->second, w);
      }
    };

    if (several_nodes && !coordinator) {
      // ---- a worker: serve the coordinator until it says the run is over ----
      int code = 1;
      try {
        code = link->serve(
            roster_of(spawned),
            [&](const roster& all) {
              std::map<std::string, caf::actor> everyone;
              for (std::size_t i = 0; i < all.names.size(); ++i)
                everyone[all.names[i]] = all.handles[i];
              caf::scoped_actor self{system};
              wire_local(self, everyone);
            },
            [&] {
              // The run is over: what this node recorded goes into node0's trace.
              recorder->freeze();
              trace_sent = true;
              return trace_path.empty()
                         ? std::string{}
                         : recorder->json(trace_metadata(config, graph, prepared.plan, *outcome));
            });
      } catch (const user_error& e) {
        outcome->exit_code = e.exit_code();
        outcome->failure = e.what();
        stop_spawned();
      } catch (const std::exception& e) {
        // Anything else (a wiring that cannot be sent) fails the run, never hangs it: the
        // actor system would wait for the actors left running.
        outcome->exit_code = exit_code::run_failed;
        outcome->failure = e.what();
        stop_spawned();
      }
      if (outcome->failure.empty())
        outcome->exit_code = static_cast<troupe::exit_code>(code);
      devices.synchronize();
    } else {
      // ---- one process, or the coordinator ----
      std::map<std::string, caf::actor> everyone = spawned;
      std::optional<joined_cluster> joined;
      if (gate) {
        try {
          joined = gate->wait_for_workers(roster_of(spawned));
        } catch (...) {
          stop_spawned();
          throw;
        }
        // What the workers joined with is a peer's word: a roster that does not name each
        // of their actors once, with a handle, ends the run here (telling the workers),
        // not in a lookup that would leave every actor running.
        std::string wrong;
        const auto& names = joined->actors.names;
        const auto& handles = joined->actors.handles;
        if (names.size() != handles.size())
          wrong = "the workers' rosters have " + std::to_string(names.size()) + " names and " +
                  std::to_string(handles.size()) + " actors";
        for (std::size_t i = 0; wrong.empty() && i < names.size(); ++i) {
          // (node0's own actors are in the roster too, as themselves)
          auto [at, added] = everyone.emplace(names[i], handles[i]);
          if (!handles[i] || (!added && at->second != handles[i]))
            wrong = "the workers' rosters name " + names[i] +
                    (handles[i] ? " twice (or as one of node0's)" : " without its actor");
        }
        for (const auto& a : graph.actors)
          if (wrong.empty() && everyone.count(a.name) == 0)
            wrong = "no node joined with " + a.name + " (node" + std::to_string(a.device.node) +
                    " runs another build of troupe?)";
        if (!wrong.empty()) {
          gate->finish(*joined, exit_status(exit_code::run_failed), "node0: " + wrong);
          stop_spawned();
          throw user_error("node0: " + wrong, exit_code::run_failed);
        }
      }
      for (const auto& a : graph.actors) {
        const auto& handle = everyone.at(a.name);
        trainer_config->actors.emplace_back(a.name, handle);
        if (a.kind == actor_kind::data_loader)
          trainer_config->loader = handle;
        if (a.kind == actor_kind::optimizer)
          trainer_config->optimizers.push_back(handle);
      }
      caf::scoped_actor self{system};
      wire_local(self, everyone);
      if (gate) {
        gate->watch(*joined);  // first: a node lost while it is wired is told from one slow
        try {
          gate->wire_workers(*joined);
        } catch (...) {
          gate->finish(*joined, exit_status(exit_code::run_failed),
                       "node0 could not wire the workers' actors");
          stop_spawned();
          throw;
        }
      }
      // ---- run ----
      self->request(trainer, caf::infinite, start_atom::value)
          .receive([](int) {},
                   [&](caf::error& error) {
                     // A trainer that ended before its start (the watch lost a node
                     // first) said why; the bounced request only says it is gone.
                     if (!outcome->failure.empty())
                       return;
                     outcome->exit_code = exit_code::run_failed;
                     outcome->failure = system.render(error);
                   });
      // The run is over when every optimizer has applied the last step (the last loss
      // report reaches the trainer before the last gradients reach the first layers).
      std::string not_collected;
      auto parameters =
          outcome->exit_code == exit_code::ok
              ? collect_parameters(self, graph, everyone, outcome->steps, gate.get(), not_collected)
              : std::vector<std::vector<std::vector<float>>>{};
      if (!not_collected.empty()) {
        outcome->exit_code = exit_code::run_failed;
        outcome->failure = not_collected;
      }
      if (outcome->exit_code == exit_code::ok) {
        if (!prepared.data->vocabulary.empty() && !config.is_explicit() &&
            options.sample_length > 0)
          result.sample = sample_text(
              host_model(config.model.layers, graph.inputs, graph.shapes, parameters),
              prepared.data->vocabulary, config.data.context, "\n", options.sample_length,
              config.run.seed, sample_temperature);
        if (options.keep_parameters)
          result.parameters = std::move(parameters);
      }
      devices.synchronize();
      for (const auto& [name, handle] : everyone)
        self->send(handle, finish_atom::value);
      if (checkpoints.enabled())
        self->send(checkpoints.writer, finish_atom::value);  // after the shards it was sent
      if (gate && !trace_path.empty())
        node_traces = gate->collect_traces(*joined);
      if (gate)
        gate->finish(*joined, exit_status(outcome->exit_code), outcome->failure);
    }
    devices.synchronize();
  } catch (...) {
    escaped = std::current_exception();  // the actor system has shut down on the way here
  }
  // The actor system has shut down; the streams drain and stop when `devices` goes.
  result.outcome = *outcome;
  devices.synchronize();
  bound_streams.release();
  recorder->freeze();
  // A worker's trace went to node0 (unless the run ended before node0 asked for it).
  std::string trace_error;
  if (world != nullptr)
    result.trace_json = recorder->json(trace_metadata(config, graph, prepared.plan, result.outcome));
  if (!trace_path.empty() && !trace_sent) {
    try {
      auto text = world != nullptr ? result.trace_json
                                   : recorder->json(trace_metadata(config, graph, prepared.plan,
                                                                   result.outcome));
      if (!node_traces.empty())
        text = trace::merge_node_traces(text, node_traces);
      text += '\n';
      write_whole_file(trace_path, text, "the trace file");
      result.trace_written = trace_path;
    } catch (const std::exception& e) {
      trace_error = e.what();
    }
  }
  if (escaped) {
    if (trace_error.empty())
      std::rethrow_exception(escaped);
    // Both: the run's own failure (its exit code stays) and the lost trace.
    try {
      std::rethrow_exception(escaped);
    } catch (const user_error& e) {
      throw user_error(std::string{e.what()} + "; and " + trace_error, e.exit_code());
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string{e.what()} + "; and " + trace_error);
    }
  }
  if (!trace_error.empty()) {
    // Note [lost output] in trainer_actor.cpp: a run whose trace is lost did not succeed.
    auto& outcome_now = result.outcome;
    if (outcome_now.exit_code == exit_code::ok) {
      outcome_now.exit_code = exit_code::run_failed;
      outcome_now.failure = trace_error;
    } else {
      outcome_now.failure += "; and " + trace_error;
    }
  }
  return result;
}

}  // namespace troupe
