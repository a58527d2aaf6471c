// simulate.cpp: a config's run on simulated devices, and what it predicts.
//
// Note [what a job costs]
// The simulation (runtime/core/simulation.hpp) asks what each job costs; the answer comes
// from the job's label, the actor that submitted it and the calibration of this machine:
// - a layer's forward, backward, backward_weight: the calibrated time of that layer's
//   pass; "backward" of a layer that splits its backward under ZB-H1 is its input part.
//   Times scale linearly with the micro-batch rows when the simulated config's differ
//   from the calibration's (a --set of the batch or of the wiring): an approximation, as
//   small GEMMs are slower per row than large ones. Layers that run fused (Note [fused
//   layers] in runtime/graph/fusion.hpp), as they do in `troupe run`, pass in one job
//   that costs their passes' sum: what fusion saves is the members' messages and
//   hand-overs, which the simulation prices as it does any. (Its trace has no parts: a
//   simulated job's work runs at one instant of the virtual clock.)
// - the loss: the calibrated loss of a micro-batch, scaled the same way;
// - an optimizer's update: its parameters times the calibrated time per parameter; in a
//   bf16 run, its rounding of the version (convert) likewise; an activation's or a
//   gradient's conversion on arrival (convert with bytes) as a copy of its bytes;
// - a copy: its bytes at the calibrated copy bandwidth; from another node, its bytes at
//   the bandwidth between the nodes (Note [nodes of one machine]: the link's, shared
//   memory's or the loopback socket's; its latency delays the message,
//   runtime/core/simulation.hpp). The copy occupies the receiving device, as a copy on
//   arrival does: a network that overlaps compute is not modelled. With --cores, the
//   sender's network thread (or its copy into shared memory) takes the same bytes at the
//   same bandwidth of the sending device's core (Note [what shares a core] in
//   simulation.cpp);
// - a loader's batch (load): its bytes at the calibrated gather bandwidth (random rows of
//   the data set); an averager's sums and copies (reduce): their bytes at the calibrated
//   sum bandwidth;
// - anything else (a checkpoint, a plugin's own job): nothing, and counted.
// Each message handled keeps its device handler_us (the calibration's measure of the
// model's handlers, Note [what a handler costs] in calibrate.cpp, unless --handler-us
// says). A job that starts while another device of its node computes takes the
// calibration's contention factor times as long (two threads running the model's passes at
// once against one; simulation::settings::contention).
#include "actors/tools/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/core/simulation.hpp"
#include "runtime/trace_tools/steps.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// Note [what a job costs].
class job_prices {
 public:
  job_prices(const topology& graph, const run_plan& plan, const std::vector<fusion_group>& fusion,
             const calibration& costs, const link_cost& link)
      : costs_(costs), link_(link), zb_h1_(graph.schedule == pipeline_schedule::zb_h1) {
    for (const auto& l : costs.layers)
      layers_[l.layer] = &l;
    for (const auto& a : graph.actors)
      actors_[a.name] = {&a, timing_of(a), {}};
    for (const auto& g : fusion) {  // a fused actor's pass is its members' (Note [fused layers])
      priced group{graph.find(g.members.front()), nullptr, {}};
      for (const auto& m : g.members)
        group.members.push_back(actors_.at(m).timing);
      actors_[g.name()] = std::move(group);
    }
    const auto rows = plan.batch_size / std::max<std::int64_t>(1, plan.replicas * plan.microbatches);
    const auto calibrated = static_cast<double>(std::max<std::int64_t>(1, costs.rows));
    row_scale_ = static_cast<double>(rows) / calibrated;
    // A replica's own rows where [parallel] balance splits the batch unevenly.
    for (auto replica_rows : plan.replica_rows)
      replica_scale_.push_back(static_cast<double>(replica_rows) /
                               static_cast<double>(std::max<std::int64_t>(1, plan.microbatches)) /
                               calibrated);
  }

  std::int64_t operator()(const job_label& label, const device_id& device,
                          const std::string& actor_name) const {
    const auto kind = job_kind_of(label.name);
    const actor_plan* actor = nullptr;
    const layer_timing* layer = nullptr;
    const std::vector<const layer_timing*>* members = nullptr;
    auto found = actors_.find(actor_name);
    if (found != actors_.end()) {
      actor = found->second.plan;
      layer = found->second.timing;
      if (!found->second.members.empty())
        members = &found->second.members;
    }
    auto us = [](double v) { return static_cast<std::int64_t>(std::llround(v * 1000)); };
    const double row_scale = label.phase == 0 && label.replica >= 0 &&
                                     static_cast<std::size_t>(label.replica) < replica_scale_.size()
                                 ? replica_scale_[static_cast<std::size_t>(label.replica)]
                                 : row_scale_;
    auto bytes_at = [](std::int64_t bytes, double gb_per_s) {
      return gb_per_s > 0 ? static_cast<std::int64_t>(static_cast<double>(bytes) / gb_per_s) : 0;
    };
    if (members != nullptr && (kind == job_kind::forward || kind == job_kind::backward)) {
      double sum = 0;
      for (const auto* m : *members)
        sum += m == nullptr ? 0 : kind == job_kind::forward ? m->forward_us : m->backward_us;
      return us(sum * row_scale);
    }
    if (layer != nullptr && actor->kind == actor_kind::layer) {
      if (kind == job_kind::forward)
        return us(layer->forward_us * row_scale);
      if (kind == job_kind::backward)
        return us((zb_h1_ && layer->backward_input_us >= 0 ? layer->backward_input_us
                                                           : layer->backward_us) *
                  row_scale);
      if (kind == job_kind::backward_weight)
        return us(std::max(0.0, layer->backward_weight_us) * row_scale);
    }
    if (kind == job_kind::loss)
      return us(costs_.loss_us * row_scale);
    if (kind == job_kind::update && layer != nullptr)
      return static_cast<std::int64_t>(costs_.update_ns_per_parameter *
                                       static_cast<double>(layer->parameters));
    // An activation or gradient rounded or widened on arrival (its bytes given): a pass
    // over them, priced as a copy of them.
    if (kind == job_kind::convert && label.bytes > 0)
      return bytes_at(label.bytes, costs_.copy_gb_per_s);
    // A version rounded to bf16: priced for all of the layer's parameters (its fp32 biases,
    // not rounded, are a small share of them).
    if (kind == job_kind::convert && layer != nullptr && costs_.convert_ns_per_parameter >= 0)
      return static_cast<std::int64_t>(costs_.convert_ns_per_parameter *
                                       static_cast<double>(layer->parameters));
    if (kind == job_kind::copy) {
      if (link_.given && link_.bytes_per_ns > 0 && label.from_node >= 0 &&
          label.from_node != device.node)
        return static_cast<std::int64_t>(static_cast<double>(label.bytes) / link_.bytes_per_ns);
      return bytes_at(label.bytes, costs_.copy_gb_per_s);
    }
    if (kind == job_kind::load)
      return bytes_at(label.bytes, costs_.load_gb_per_s);
    if (kind == job_kind::reduce)
      return bytes_at(label.bytes, costs_.reduce_gb_per_s);
    ++unpriced_;
    return 0;
  }

  std::uint64_t unpriced() const { return unpriced_; }

 private:
  const calibration& costs_;
  link_cost link_;
  bool zb_h1_;
  double row_scale_ = 1;
  std::vector<double> replica_scale_;  // train jobs of replica r: its rows a micro-batch
  // An actor's plan and its layer's calibrated times; a fused actor's plan is its first
  // member's, and its members' times are summed.
  struct priced {
    const actor_plan* plan = nullptr;
    const layer_timing* timing = nullptr;
    std::vector<const layer_timing*> members;
  };
  const layer_timing* timing_of(const actor_plan& a) const {
    if (a.layer < 0)
      return nullptr;
    auto l = layers_.find(a.layer);
    return l == layers_.end() ? nullptr : l->second;
  }
  std::map<std::string, priced> actors_;
  std::map<std::int64_t, const layer_timing*> layers_;
  mutable std::uint64_t unpriced_ = 0;  // the simulation's thread only
};

// Note [what a device holds]
// Per device, the most micro-batches its stages held at once, and the most bytes. A layer
// holds a micro-batch's activations from the start of its forward to the end of the job
// that frees them: its backward, or with a split backward its weight-gradient job (the
// streams' order, as the memory tests' probes count). A stage holds the most any of its
// layers holds; a device what its stages (several, when interleaved) hold.
// The bytes are not a formula: a simulated run's jobs run their real kernels on real
// tensors, in the order and at the moments of the simulated schedule, so the storage
// pool's count of each device's bytes (storage_bytes_peak, include/troupe/tensor.hpp)
// is the simulated run's peak: weights, gradients, optimizer state, the activations its
// schedule keeps, the messages on their way and the averagers' buffers, as `troupe run`
// counts them for its summary (without evaluation, which a simulation does not run).
std::vector<device_memory> device_memories(const trace_file& trace, const topology& graph) {
  std::set<std::string> split;  // layers with weight-gradient jobs
  for (const auto& j : trace.jobs)
    if (j.kind == job_kind::backward_weight)
      split.insert(j.actor);
  struct change {
    double time;
    int delta;
    std::string layer;
  };
  std::map<std::string, std::vector<change>> changes;  // by device
  std::map<std::string, std::int32_t> stage_of;
  for (const auto& j : trace.jobs) {
    const auto* track = trace.find_track(j.actor);
    if (track == nullptr || track->kind != "layer")
      continue;
    stage_of[j.actor] = track->stage;
    if (j.kind == job_kind::forward)
      changes[track->device].push_back({j.start_us, +1, j.actor});
    else if (j.kind == (split.count(j.actor) > 0 ? job_kind::backward_weight : job_kind::backward))
      changes[track->device].push_back({j.end_us(), -1, j.actor});
  }
  std::vector<device_memory> out;
  for (const auto& device : graph.devices) {
    device_memory m;
    m.device = device.to_string();
    m.peak_bytes = storage_bytes_peak(device);
    auto& list = changes[m.device];
    // At one time, what is freed goes before what is taken: a job that ends as the next starts.
    std::stable_sort(list.begin(), list.end(), [](const change& a, const change& b) {
      return a.time != b.time ? a.time < b.time : a.delta < b.delta;
    });
    std::map<std::string, std::int64_t> now;  // each layer's
    for (const auto& c : list) {
      now[c.layer] += c.delta;
      std::map<std::int32_t, std::int64_t> stages;
      for (const auto& [layer, held] : now)
        stages[stage_of[layer]] = std::max(stages[stage_of[layer]], held);
      std::int64_t held = 0;
      for (const auto& [stage, n] : stages)
        held += n;
      m.held = std::max(m.held, held);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Note [nodes of one machine]
// A message between two nodes is priced by where the nodes are. With --link they are
// machines apart: each message is handled the link's latency after its hand-over, its
// tensors' bytes cross at the link's bandwidth (the sender's core serialises them, the
// receiver's copy job takes them in), and it costs the sender's core the CPU time of a
// message through CAF (the calibration's, over loopback; a network card's own work is not
// modelled). Without --link the nodes are processes of this machine, as `troupe launch`
// runs them (Note [between processes of one machine] in process_link.cpp). With [cluster]
// shared_memory (the default), a message of a kind left in the reader's queue is seen a
// hand-over later, as a message between two threads is, its tensors copied in by the
// sender and out by the receiver at the calibrated copy bandwidth; every other message
// goes through CAF, handled the calibrated latency of a message between two processes
// later and costing the sender's core its CPU time, its tensors still through shared
// memory. Without shared memory every message goes through CAF, its tensors at the
// socket's calibrated bandwidth. A calibration without these measures (no loopback, a
// file from before them) prices two processes as two threads of one. The sender says which
// way a message goes (node_send_scope in include/troupe/device.hpp: send_written knows its
// kind; a loss report to the trainer is posted); one it does not say goes through CAF. As
// in a run, a replica on another node than the loader gets its batches' rows posted to a
// batch assembler of its node, which gathers them there (every node's assembler is one of
// the simulated run's host actors, its batch to its own node's layer not a crossing).
struct node_routes {
  link_cost link;  // the receiver's copy of another node's tensors (job_prices)
  simulation::settings::route network;
  simulation::settings::route posted;
  std::string text;  // said in the prediction
};

node_routes nodes_apart(const simulate_options& options, const calibration& costs,
                        bool shared_memory) {
  node_routes out;
  const auto message_ns = static_cast<std::int64_t>(std::max(0.0, costs.message_cpu_us) * 1000);
  auto per_byte = [](double gb_per_s) { return gb_per_s > 0 ? 1 / gb_per_s : 0.0; };
  if (options.link.given) {
    out.link = options.link;
    out.network = {static_cast<std::int64_t>(options.link.latency_ns),
                   per_byte(options.link.bytes_per_ns), message_ns};
    out.posted = out.network;
    out.text = string_printf(
        "machines apart: a message %.1f us and %.1f us of the sender's CPU, tensors at %.2f GB/s",
        options.link.latency_ns / 1000, static_cast<double>(message_ns) / 1000,
        options.link.bytes_per_ns);
    return out;
  }
  const bool measured = costs.process_latency_us >= 0;
  const double socket = measured && costs.process_gb_per_s > 0 ? costs.process_gb_per_s
                                                               : costs.copy_gb_per_s;
  const double tensors = shared_memory ? costs.copy_gb_per_s : socket;
  const double latency_ns = measured ? costs.process_latency_us * 1000 : 0;
  out.link.given = tensors > 0;
  out.link.bytes_per_ns = tensors;
  out.link.latency_ns = latency_ns;
  out.network = {static_cast<std::int64_t>(latency_ns), per_byte(tensors), message_ns};
  out.posted = out.network;
  if (shared_memory)
    out.posted = {0, per_byte(tensors), 0};
  out.text = string_printf(
      "processes of this machine: through CAF a message %.1f us and %.1f us of the sender's "
      "CPU%s, tensors at %.2f GB/s%s",
      latency_ns / 1000, static_cast<double>(message_ns) / 1000,
      shared_memory ? ", through shared memory's queue a hand-over" : "", tensors,
      shared_memory ? " through shared memory" : " through the socket");
  if (!measured)
    out.text += " (the calibration did not measure two processes: priced as two threads)";
  return out;
}

}  // namespace

// Every layer of the model has a timing in `costs`, taken in the precision the run computes
// it in (a bf16 layer takes a third of an fp32 one's time on a CPU with AMX).
void check_layers_timed(const session_prepared& prepared, const calibration& costs,
                        const run_config& config) {
  for (const auto& a : prepared.graph.actors) {
    if (a.kind != actor_kind::layer || a.replica != 0)
      continue;
    const auto timed = std::find_if(costs.layers.begin(), costs.layers.end(),
                                    [&](const layer_timing& l) { return l.layer == a.layer; });
    if (timed == costs.layers.end())
      throw user_error("the calibration (of " + quote_user_text(costs.config) +
                       ") has no timing of layer " + std::to_string(a.layer) +
                       ": calibrate this model (troupe calibrate CONFIG --json -o FILE)");
    const auto math = create_layer(a.math);
    const auto& input = prepared.graph.shapes.at(static_cast<std::size_t>(a.layer));
    const auto runs_in = run_precision_of(*math, a.math, input, config);
    if (timed->precision != runs_in)
      throw user_error("the calibration (of " + quote_user_text(costs.config) + ") timed layer " +
                       std::to_string(a.layer) + " in " + timed->precision +
                       ", and this config computes it in " + runs_in +
                       " ([run] precision or the layer's own): calibrate this config (troupe "
                       "calibrate CONFIG --json -o FILE)");
  }
}

prediction simulate_run(const run_config& original, const calibration& costs,
                        const simulate_options& options) {
  if (options.steps < 2 || options.steps > 100000)
    throw user_error("troupe simulate: --steps should be between 2 and 100000, not " +
                     std::to_string(options.steps));
  if (std::isnan(options.handler_us) || options.handler_us > 1e6)
    throw user_error("troupe simulate: --handler-us should be between 0 and 1e6");
  if (options.handover_us > 1e6 || std::isnan(options.handover_us))
    throw user_error("troupe simulate: --handover-us should be at most 1e6");
  if (options.contention > 100 || (options.contention >= 0 && options.contention < 1) ||
      std::isnan(options.contention))
    throw user_error("troupe simulate: --contention should be a factor between 1 and 100");
  if (std::isnan(options.host_us) || options.host_us > 1e6)
    throw user_error("troupe simulate: --host-us should be between 0 and 1e6");
  if (options.cores < 0 || options.cores > 1 << 20)
    throw user_error("troupe simulate: --cores should be between 0 and 1048576");
  run_config config = original;
  config.run.steps = options.steps;
  config.run.evaluate = false;
  config.run.metrics.clear();
  config.run.trace.clear();
  config.run.checkpoint.clear();
  // The prediction is read from the trace, which one thread records whole: a ring over
  // hundreds of replicas is millions of events a step.
  config.run.trace_capacity = std::int64_t{1} << 30;
  const auto prepared = prepare_session(config);
  check_layers_timed(prepared, costs, config);
  // A config that emulates a link ([cluster] link) is predicted over that link, unless
  // --link says otherwise.
  auto over = options;
  if (!over.link.given && config.cluster.link.given)
    over.link = config.cluster.link;
  const auto nodes = nodes_apart(over, costs, config.cluster.shared_memory);
  job_prices prices{prepared.graph, prepared.plan, prepared.fusion, costs, nodes.link};
  simulation::settings world_settings;
  world_settings.cost = [&prices](const job_label& label, const device_id& device,
                                  const std::string& actor) { return prices(label, device, actor); };
  const double handler_us = options.handler_us >= 0 ? options.handler_us
                            : costs.handler_us >= 0 ? costs.handler_us
                                                    : default_handler_us;
  world_settings.handler_ns = static_cast<std::int64_t>(handler_us * 1000);
  world_settings.handover_ns = static_cast<std::int64_t>(
      (options.handover_us >= 0 ? options.handover_us : costs.handover_us) * 1000);
  world_settings.cores = options.cores;
  const double host_us = options.host_us >= 0 ? options.host_us : std::max(0.0, costs.host_us);
  world_settings.host_ns = static_cast<std::int64_t>(host_us * 1000);
  world_settings.contention = options.contention >= 0 ? options.contention : costs.contention;
  world_settings.network = nodes.network;
  world_settings.posted = nodes.posted;
  const auto wall_start = std::chrono::steady_clock::now();
  session_result result;
  std::uint64_t jobs = 0;
  {
    simulation world{world_settings};
    session_options session;
    session.quiet = true;
    session.sample_length = 0;
    session.world = &world;
    session.data = prepared.data;  // loaded once (Fashion-MNIST: 220 MB)
    result = run_session(config, session);
    jobs = world.jobs_run();
  }
  if (result.outcome.exit_code != exit_code::ok)
    throw user_error("the simulated run failed: " + result.outcome.failure,
                     result.outcome.exit_code);

  prediction p;
  p.config = original.path;
  p.steps = options.steps;
  p.devices = static_cast<std::int64_t>(prepared.graph.devices.size());
  p.nodes = prepared.graph.nodes;
  p.replicas = prepared.plan.replicas;
  p.microbatches = prepared.plan.microbatches;
  p.batch_size = prepared.plan.batch_size;
  p.jobs = jobs;
  p.handover_us = static_cast<double>(world_settings.handover_ns) / 1000;
  p.handler_us = handler_us;
  p.host_us = host_us;
  p.contention = world_settings.contention;
  if (prepared.graph.nodes > 1)
    p.between_nodes = nodes.text;
  p.unpriced_jobs = prices.unpriced();
  const auto trace = parse_trace(result.trace_json, "(simulated)");
  p.trace_json = std::move(result.trace_json);  // gigabytes, for a ring over 512 replicas
  if (trace.dropped_events > 0)
    throw user_error("the simulated run's trace dropped " + std::to_string(trace.dropped_events) +
                     " events: the prediction would be wrong; simulate fewer --steps");
  p.explanation = explain_trace(trace);
  p.explanation.path = "simulated " + original.path;
  const auto steps = step_windows(trace);  // Note [step time]
  p.step_us = run_step_time_us(steps);
  p.first_step_us = steps.empty() ? 0 : steps.front().time_us();
  p.samples_per_second =
      p.step_us > 0 ? static_cast<double>(p.batch_size) / (p.step_us * 1e-6) : 0;
  p.step_low_us = p.step_us * std::min(1.0, costs.rounds_low);
  p.step_high_us = p.step_us * std::max(1.0, costs.rounds_high);
  const auto summary = summarize_trace(trace);
  p.stages = summary.stages;
  p.schedule = summary.schedule;
  p.theory_bubble = summary.theory_bubble;
  for (const auto& s : summary.pipeline)
    p.pipeline.push_back({s.stage, s.devices, s.bubble, s.theory});
  p.memory = device_memories(trace, prepared.graph);
  p.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return p;
}

std::string format_prediction_text(const prediction& p) {
  std::string text = string_printf(
      "%s, simulated: %lld devices on %lld node(s), %lld replica(s) x %lld stage(s), %lld "
      "micro-batch(es)%s%s, batch %lld\n",
      p.config.c_str(), static_cast<long long>(p.devices), static_cast<long long>(p.nodes),
      static_cast<long long>(p.replicas), static_cast<long long>(p.stages),
      static_cast<long long>(p.microbatches), p.schedule.empty() ? "" : ", schedule ",
      p.schedule.c_str(), static_cast<long long>(p.batch_size));
  text += string_printf(
      "predicted step: %.3f ms (the mean of steps 1-%lld; step 0 %.3f ms), %.0f samples/s\n",
      p.step_us / 1000, static_cast<long long>(p.steps - 1), p.first_step_us / 1000,
      p.samples_per_second);
  text += string_printf(
      "range: %.3f-%.3f ms (as slow or fast as a tenth of the calibration's rounds were)\n",
      p.step_low_us / 1000, p.step_high_us / 1000);
  if (!p.between_nodes.empty())
    text += "between nodes: " + p.between_nodes + "\n";
  if (!p.pipeline.empty()) {
    text += string_printf("pipeline bubble (theory %.3f for equal stages):\n", p.theory_bubble);
    for (const auto& s : p.pipeline) {
      std::string devices;
      for (const auto& d : s.devices)
        devices += (devices.empty() ? "" : ",") + d;
      text += string_printf("  stage %lld on %s: %.3f (theory for its costs %.3f)\n",
                            static_cast<long long>(s.stage), devices.c_str(), s.bubble, s.theory);
    }
  }
  if (!p.memory.empty()) {
    // The devices holding the most first (a pipeline's first stage, under 1F1B).
    auto memory = p.memory;
    std::stable_sort(memory.begin(), memory.end(), [](const device_memory& a, const device_memory& b) {
      return a.peak_bytes > b.peak_bytes;
    });
    text += "peak memory per device (tensors held at once):";
    for (std::size_t i = 0; i < memory.size() && i < 8; ++i)
      text += string_printf("%s %s %s (%lld micro-batch(es) held)", i == 0 ? "" : ",",
                            memory[i].device.c_str(), human_bytes(memory[i].peak_bytes).c_str(),
                            static_cast<long long>(memory[i].held));
    if (memory.size() > 8)
      text += string_printf(" ... (%zu devices)", memory.size());
    text += "\n";
  }
  text += string_printf(
      "simulated %llu jobs in %.2f s here (a handler %.1f us, a hand-over "
      "between threads %.1f us, two devices at once %.2fx as long, a host "
      "turn %.1f us of a core)",
      static_cast<unsigned long long>(p.jobs), p.wall_seconds, p.handler_us, p.handover_us,
      p.contention, p.host_us);
  if (p.unpriced_jobs > 0)
    text += string_printf(" (%llu with no calibrated cost, taken as 0)",
                          static_cast<unsigned long long>(p.unpriced_jobs));
  text += "\n\n" + format_explanation_text(p.explanation, 1);
  return text;
}

std::string format_prediction_json(const prediction& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : p.pipeline)
    stages.push_back(
        {{"stage", s.stage}, {"devices", s.devices}, {"bubble", s.bubble}, {"theory", s.theory}});
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& m : p.memory) {
    memory.push_back({{"device", m.device}, {"peak_held", m.held}, {"peak_bytes", m.peak_bytes}});
  }
  nlohmann::json out = {
      {"config", p.config},
      {"steps", p.steps},
      {"devices", p.devices},
      {"nodes", p.nodes},
      {"replicas", p.replicas},
      {"stages", p.stages},
      {"microbatches", p.microbatches},
      {"batch_size", p.batch_size},
      {"schedule", p.schedule},
      {"step_us", p.step_us},
      {"step_range_us", {p.step_low_us, p.step_high_us}},
      {"first_step_us", p.first_step_us},
      {"samples_per_s", p.samples_per_second},
      {"theory_bubble", p.theory_bubble},
      {"pipeline", std::move(stages)},
      {"memory", std::move(memory)},
      {"jobs", p.jobs},
      {"unpriced_jobs", p.unpriced_jobs},
      {"wall_s", p.wall_seconds},
      {"handler_us", p.handler_us},
      {"handover_us", p.handover_us},
      {"host_us", p.host_us},
      {"contention", p.contention},
      {"between_nodes", p.between_nodes},
      {"critical_path", nlohmann::json::parse(format_explanation_json(p.explanation))}};
  return out.dump(2) + "\n";
}

std::vector<wiring_candidate> search_wirings(const run_config& config, const calibration& costs,
                                             const simulate_options& options,
                                             std::int64_t devices) {
  if (devices < 1 || devices > 4096)
    throw user_error("troupe simulate: --search should be between 1 and 4096 devices, not " +
                     std::to_string(devices));
  if (config.is_explicit())
    throw user_error("troupe simulate --search wires a shorthand config ([parallel]); " +
                     quote_user_text(config.path) + " lists its actors and wires itself");
  const auto layers = static_cast<std::int64_t>(config.model.layers.size());
  const auto batch = config.data.batch_size;
  std::vector<wiring_candidate> tried;
  for (std::int64_t r = 1; r <= devices; ++r)
    for (std::int64_t p = 1; r * p <= devices && p <= layers; ++p) {
      std::vector<std::int64_t> ms = p == 1 ? std::vector<std::int64_t>{1}
                                            : std::vector<std::int64_t>{p, 2 * p, 4 * p};
      for (auto m : ms) {
        if (batch % (r * m) != 0)
          continue;
        std::vector<std::pair<std::string, std::int64_t>> schedules;
        if (p == 1)
          schedules = {{"-", 1}};
        else
          schedules = {{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}};
        if (p > 1 && 2 * p <= layers)
          schedules.push_back({"1f1b", 2});
        for (const auto& [schedule, v] : schedules) {
          wiring_candidate c;
          c.data = r;
          c.pipeline = p;
          c.microbatches = m;
          c.schedule = schedule;
          c.virtual_stages = v;
          run_config candidate = config;
          auto& parallel = candidate.parallel;
          parallel.data = r;
          parallel.pipeline = p;
          parallel.microbatches = m;
          parallel.schedule = schedule == "zb-h1"  ? pipeline_schedule::zb_h1
                              : schedule == "1f1b" ? pipeline_schedule::one_f_one_b
                                                   : pipeline_schedule::gpipe;
          parallel.virtual_stages = v;
          parallel.stage_ranges.clear();  // balanced by cost
          parallel.share_devices = false;
          parallel.devices.clear();
          for (std::int64_t d = 0; d < r * p; ++d) {
            device_config dc;
            dc.name = "cpu:" + std::to_string(d);
            dc.id = device_id{device_type::cpu, static_cast<int>(d), 0};
            dc.where = parallel.where;
            parallel.devices.push_back(dc);
          }
          candidate.cluster.nodes = 0;
          try {
            const auto predicted = simulate_run(candidate, costs, options);
            c.step_us = predicted.step_us;
            c.samples_per_second = predicted.samples_per_second;
            for (const auto& m : predicted.memory) {
              c.peak_held = std::max(c.peak_held, m.held);
              c.peak_bytes = std::max(c.peak_bytes, m.peak_bytes);
            }
          } catch (const config_error& e) {
            c.refused = e.what();
          }
          tried.push_back(std::move(c));
        }
      }
    }
  std::stable_sort(tried.begin(), tried.end(),
                   [](const wiring_candidate& a, const wiring_candidate& b) {
                     if (a.refused.empty() != b.refused.empty())
                       return a.refused.empty();
                     return a.samples_per_second > b.samples_per_second;
                   });
  return tried;
}

std::string format_search_text(const std::vector<wiring_candidate>& tried, std::size_t top) {
  std::string text = string_printf("%4s %4s %4s %-8s %3s %12s %12s %10s %12s\n", "R", "P", "M",
                                   "schedule", "v", "step (ms)", "samples/s", "peak held",
                                   "peak memory");
  std::size_t shown = 0, refused = 0;
  for (const auto& c : tried) {
    if (!c.refused.empty()) {
      ++refused;
      continue;
    }
    if (shown++ >= top)
      continue;
    text += string_printf("%4lld %4lld %4lld %-8s %3lld %12.3f %12.0f %10lld %12s\n",
                          static_cast<long long>(c.data), static_cast<long long>(c.pipeline),
                          static_cast<long long>(c.microbatches), c.schedule.c_str(),
                          static_cast<long long>(c.virtual_stages), c.step_us / 1000,
                          c.samples_per_second, static_cast<long long>(c.peak_held),
                          human_bytes(c.peak_bytes).c_str());
  }
  text += string_printf("(%zu wirings simulated, the best %zu shown; %zu refused by the config's "
                        "rules)\n",
                        tried.size() - refused, std::min(top, tried.size() - refused), refused);
  return text;
}

}  // namespace troupe
