// session.cpp: one run as phases (see session.hpp): check outputs, restore, start devices,
// spawn, wire, run, collect, finish. Each phase is one method of `session`, in that order;
// what differs between one process, several nodes and a simulation is the run mode's
// (run_modes.hpp), which the phases call. What the phases build is session_state.
#include "actors/session/session.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "actors/base/actor_kinds.hpp"
#include "actors/base/batch_rows.hpp"
#include "actors/base/device_scheduler.hpp"
#include "actors/base/failures.hpp"
#include "actors/session/run_modes.hpp"
#include "actors/session/session_state.hpp"
#include "actors/training/batch_assembler_actor.hpp"
#include "actors/training/checkpoint_writer.hpp"
#include "actors/training/layer_actor.hpp"
#include "actors/training/optimizer_actor.hpp"
#include "actors/transport/shm_delivery.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/data/text.hpp"
#include "runtime/trace_tools/merge.hpp"
#include "troupe/trace.hpp"

namespace troupe {

namespace {

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

// Runs `action` when it goes out of scope, however that happens.
template <class Action>
class on_scope_exit {
 public:
  explicit on_scope_exit(Action action) : action_(std::move(action)) {}
  ~on_scope_exit() { action_(); }
  on_scope_exit(const on_scope_exit&) = delete;
  on_scope_exit& operator=(const on_scope_exit&) = delete;

 private:
  Action action_;
};

class session {
 public:
  session(const run_config& config, const session_options& options) : s_(config, options) {}

  session_result run() {
    check_outputs();
    restore();
    mode_ = make_run_mode(s_);
    start_devices();
    // Note [the trace on every path]: whatever ends the run, an exception from the code
    // below included, the trace of what was recorded is written before it propagates.
    std::exception_ptr escaped;
    try {
      in_actor_system();
    } catch (...) {
      escaped = std::current_exception();  // the actor system has shut down on the way here
    }
    return finish(escaped);
  }

 private:
  void check_outputs();
  void restore();
  void start_devices();
  void in_actor_system();
  void spawn();
  void spawn_actors(spawn_context& context);
  void spawn_trainer();
  void spawn_checkpoint_writer();
  session_result finish(std::exception_ptr escaped);

  session_state s_;
  std::unique_ptr<run_mode> mode_;
  std::unique_ptr<stream_bindings> bound_streams_;
  // The checkpoint writer's thread (Note [the writer's own thread] in
  // actors/training/checkpoint_writer.cpp): made before the actor system, gone after it.
  std::unique_ptr<stream> writer_home_;
};

// Note [output checked up front]
// A metrics or trace path that cannot be written is bad input like a bad config: it is
// refused (exit 2, the path and the reason) before the data loads and before anything
// is spawned, not found out after the run as "internal error" or a lost trace. The
// names are those of this process's node (a launcher's rank; the coordinator is 0).
void session::check_outputs() {
  const auto& config = s_.config;
  const auto& options = s_.options;
  const int rank = options.cluster ? options.cluster->rank : 0;
  s_.metrics_path = options.metrics_path.value_or(config.run.metrics);
  if (rank != 0)
    s_.metrics_path.clear();  // only the coordinator reports
  s_.trace_path = trace_path_of_node(options.trace_path.value_or(config.run.trace), rank);
  if (!s_.metrics_path.empty())
    check_output_file(s_.metrics_path, "the metrics file");
  if (!s_.trace_path.empty())
    check_output_file(s_.trace_path, "the trace file");
  // The checkpoints' directory too (it was found at the first checkpoint, with
  // checkpoint_every = 0 after the whole run): a file there made and removed again.
  if (rank == 0 && !config.run.checkpoint.empty())
    check_output_file(
        (std::filesystem::path{config.run.checkpoint} / ".troupe-write-check").string(),
        "a file in the checkpoint directory");
}

void session::restore() {
  const auto& config = s_.config;
  const auto& options = s_.options;
  // A restart loop says --resume DIR --checkpoint DIR from the first start on: until the
  // first checkpoint is in, there is nothing to resume, and the run starts at step 0. In
  // one process only: a node of several cannot know that node0 finds none either.
  s_.resume = options.resume;
  auto& resume = s_.resume;
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
  auto data = options.data != nullptr ? options.data
                                      : load_session_data(config, options.evaluation);
  s_.prepared = prepare_session(config, data, resume, options.purpose);
  // A text source's vocabulary goes with the run: token ids mean nothing without it. Next
  // to a metrics file, not a device (--metrics /dev/null).
  const auto& metrics_path = s_.metrics_path;
  const auto& vocabulary = s_.prepared.data->vocabulary;
  std::error_code no_file;
  if (!metrics_path.empty() && !vocabulary.empty() &&
      (std::filesystem::is_regular_file(metrics_path, no_file) ||
       !std::filesystem::exists(metrics_path, no_file))) {
    const auto path =
        std::filesystem::path(metrics_path).replace_extension(".vocab.json").string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << vocabulary_json(vocabulary);
    if (!out)
      throw user_error("cannot write the vocabulary to " + quote_user_text(path));
  }
}

// Tracing and the message log: this session's recorder, bound to every thread that runs
// its code (Note [recorders and threads] in runtime/trace/recorder.cpp), with tracks for
// every device stream and actor (and the trainer), registered before anything runs.
void session::start_devices() {
  s_.rank = mode_->rank();
  s_.every_node = mode_->plays_every_node();
  s_.drives = mode_->drives();
  set_this_node(s_.rank);
  const auto& config = s_.config;
  trace::recorder_settings trace_settings;
  trace_settings.record = !s_.trace_path.empty();
  mode_->set_clock(trace_settings);
  trace_settings.capacity = static_cast<std::size_t>(config.run.trace_capacity);
  trace_settings.log_messages = s_.options.log_messages;
  trace_settings.log_filter = s_.options.log_filter;
  trace_settings.flow_base = static_cast<std::uint64_t>(s_.rank) << 48;  // merge.hpp
  s_.recorder = std::make_shared<trace::recorder>(trace_settings);
  s_.bound_here = std::make_unique<trace::thread_binding>(s_.recorder);
  s_.devices = mode_->make_devices(s_);
  for (auto& d : s_.devices->all())
    reset_storage_peak(d->id());  // the run summary's peak memory is this run's
  bound_streams_ = std::make_unique<stream_bindings>(*s_.devices, s_.recorder);
  auto& recorder = *s_.recorder;
  if (recorder.recording() || recorder.logging()) {
    for (auto& d : s_.devices->all())
      d->work().set_trace_track(recorder.register_track(
          {d->id().to_string() + " stream", "stream", d->id().to_string(), -1, -1, -1}));
    for (const auto& a : s_.graph().actors)
      if (s_.runs_here(a))
        s_.tracks[a.name] = recorder.register_track(
            {a.name, a.kind_name(), a.device.to_string(), a.replica, a.stage, a.layer});
    for (const auto& g : s_.prepared.fusion) {  // the actor that runs them (Note [fused layers])
      const auto& first = *s_.graph().find(g.members.front());
      if (s_.runs_here(first))
        s_.tracks[g.name()] = recorder.register_track(
            {g.name(), "fused", first.device.to_string(), first.replica, first.stage, -1});
    }
    for (int node : s_.batch_assembler_nodes())
      s_.tracks[batch_assembler_name(node)] = recorder.register_track(
          {batch_assembler_name(node), "batch_assembler", "host", -1, -1, -1});
    if (s_.drives)
      s_.trainer_track = recorder.register_track({"trainer", "trainer", "host", -1, -1, -1});
  }
  mode_->tracks_registered(s_.tracks);
  if (s_.drives && !config.run.checkpoint.empty() && mode_->writer_on_own_thread()) {
    writer_home_ = std::make_unique<stream>(device_id{}, -1);
    writer_home_->post([] { pthread_setname_np(pthread_self(), "troupe writer"); });
  }
}

// The actor system's life: made, the actors spawned, wired, run, collected and finished,
// then gone (waiting for every actor) with everything that held its handles.
void session::in_actor_system() {
  caf::actor_system_config system_config;
  add_message_types(system_config);
  process_links links;  // before the actor system, gone after it
  mode_->configure(system_config, links, s_);
  system_config.add_thread_hook<bind_recorder_hook>(s_.recorder);
  // Actors handle their messages on their devices' threads, the trainer and the loader
  // on one host thread (Note [actors on device threads] in device_scheduler.cpp).
  system_config.load<device_scheduler>();
  caf::actor_system system{system_config};
  // Messages that other processes of this machine leave in shared memory: each stream
  // thread takes them between its jobs (Note [messages through shared memory] in
  // runtime/net/shared_memory.cpp), handing each to its actor as CAF's network thread
  // would. Unset before the actor system goes.
  std::unique_ptr<stream_poller> poller;
  if (links.links)
    poller = deliver_shared_memory(system, *links.links);
  mode_->started(system);
  s_.system = &system;
  // Note [an emulated link] in runtime/net/link_model.cpp: between real processes only (a
  // simulation prices its link itself, in virtual time).
  const auto& link = s_.config.cluster.link;
  const bool emulated = link.given && s_.config.nodes() > 1 && !mode_->plays_every_node();
  net::emulate_link(emulated ? link : link_cost{});
  if (emulated && s_.drives && !s_.options.quiet)
    std::fprintf(stderr,
                 "note: [cluster] link emulates %s between the nodes: each process holds its "
                 "messages to other nodes as such a link would (an emulation over this "
                 "machine's transport, not a measurement of a network)\n",
                 describe_link(link).c_str());
  on_scope_exit leaving{[this] {
    net::emulate_link(link_cost{});
    mode_->close();
    s_.leave_actor_system();
  }};
  spawn();
  mode_->wire(s_);
  mode_->run(s_);
  mode_->collect(s_);
  mode_->finish(s_);
  s_.devices->synchronize();
}

void session::spawn_trainer() {
  const auto& config = s_.config;
  const auto& options = s_.options;
  auto& t = *s_.trainer_config;
  t.plan = s_.prepared.plan;
  t.schedule = s_.prepared.schedule;
  t.metrics_path = s_.metrics_path;
  t.log_every = config.run.log_every;
  t.progress_bar = options.progress_bar;
  t.quiet = options.quiet;
  t.title = std::filesystem::path(config.path).stem().string();
  t.outcome = s_.outcome;
  t.devices = s_.devices.get();
  t.track = s_.trainer_track;
  t.watchdog_seconds = options.watchdog >= 0 ? options.watchdog : config.run.watchdog;
  s_.trainer = s_.system->spawn<trainer_actor>(s_.trainer_config);
}

// Checkpoints: a writer on its own thread, on the driving node; the optimizers of every
// node send it their copies.
void session::spawn_checkpoint_writer() {
  const auto& config = s_.config;
  const auto& prepared = s_.prepared;
  const auto& graph = s_.graph();
  // A run writes the steps after its start: checkpoints in its root newer than that are
  // another run's (a fresh start's root was used before), or an abandoned future (a
  // resume from an older one), which a restart must not take for this run's (it did,
  // and pruning counted them, deleting the checkpoints this run wrote).
  for (const auto& path :
       set_aside_newer_checkpoints(config.run.checkpoint, prepared.plan.first_step))
    std::fprintf(stderr, "note: set aside %s: it is newer than step %lld, where this run starts\n",
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
  w.base.feature_mean = prepared.data->feature_mean;  // normalize = "standard"
  w.base.feature_std = prepared.data->feature_std;
  w.base.class_names = prepared.data->class_names;  // an image folder's
  w.base.validation = config.data.validation;
  w.base.validation_seed = config.data.validation > 0 ? config.run.seed : 0;
  w.trainer = s_.trainer;
  s_.checkpoints.writer =
      troupe::spawn_checkpoint_writer(*s_.system, std::move(w), writer_home_.get());
}

void session::spawn() {
  const auto& config = s_.config;
  const auto& prepared = s_.prepared;
  const auto& graph = s_.graph();
  auto& system = *s_.system;
  s_.trainer_config = std::make_shared<trainer_settings>();
  if (s_.drives)
    spawn_trainer();
  if (!config.run.checkpoint.empty()) {
    auto& c = s_.checkpoints;
    c.every = config.run.checkpoint_every;
    c.at_evaluations = config.run.checkpoint_keep_best;
    c.total_steps = prepared.plan.total_steps;
    c.steps_per_epoch = prepared.plan.steps_per_epoch;
    c.evaluate = prepared.plan.evaluate;
    if (s_.drives)
      spawn_checkpoint_writer();
  }
  mode_->join(s_);
  s_.trainer_config->checkpoints = s_.checkpoints;
  s_.trainer_config->watch_interrupts = s_.options.watch_interrupts;
  s_.trainer_config->stop_request = s_.options.stop_request;
  s_.trainer_config->on_record = s_.options.on_record;
  s_.trainer_config->several_nodes = s_.graph().nodes > 1;
  for (auto& d : s_.devices->all())
    d->work().set_error_handler([trainer = s_.trainer, name = d->id().to_string()](
                                    std::exception_ptr e) {
      caf::anon_send(trainer, failure_of(name, e));
    });
  s_.gloo = mode_->gloo(s_, s_.options.gloo);
  s_.sequencers = make_stage_sequencers(graph);
  s_.readers_in_bf16 = bf16_readers_of(graph, config);
  spawn_context context{system,         *s_.devices,       config,        graph,
                        prepared.plan,  prepared.schedule, prepared.data, prepared.start,
                        s_.checkpoints, s_.gloo,           s_.sequencers, s_.readers_in_bf16};
  try {
    spawn_actors(context);
    for (int node : s_.batch_assembler_nodes())
      s_.spawned[batch_assembler_name(node)] =
          system.spawn<batch_assembler_actor>(node, prepared.data, s_.devices.get());
  } catch (...) {
    // A factory refused its actor's settings (a plugin's kind reads them only here).
    // Nothing has started; stop what exists, or the actor system would wait for it
    // forever on the way out, then report.
    s_.stop_spawned();
    throw;
  }
  // Every actor handles its messages on its device's thread, the loader too (Note
  // [the loader on its device] in actors/base/device_scheduler.cpp); a fused group's once.
  std::set<caf::actor> placed;
  for (const auto& a : graph.actors)
    if (s_.runs_here(a) && placed.insert(s_.spawned.at(a.name)).second)
      device_scheduler::place(system, s_.spawned.at(a.name), s_.devices->at(a.device).work());
}

// Each actor of the graph that runs here; a fused group's members as one actor, known by
// each member's name (Note [fused layers] in runtime/graph/fusion.hpp).
void session::spawn_actors(spawn_context& context) {
  const auto& graph = s_.graph();
  std::map<std::string, const fusion_group*> group_of;
  for (const auto& g : s_.prepared.fusion)
    for (const auto& m : g.members)
      group_of[m] = &g;
  auto track_of = [&](const std::string& name) {
    auto it = s_.tracks.find(name);
    return it == s_.tracks.end() ? 0u : it->second;
  };
  for (const auto& a : graph.actors) {
    if (!s_.runs_here(a))
      continue;
    auto fused = group_of.find(a.name);
    if (fused == group_of.end()) {
      s_.spawned[a.name] = spawn_actor(a, context);
      continue;
    }
    const auto& group = *fused->second;
    if (group.members.front() != a.name)
      continue;  // spawned with the group's first
    std::vector<const actor_plan*> members;
    std::vector<std::uint32_t> tracks;
    for (const auto& m : group.members) {
      members.push_back(graph.find(m));
      // A simulated job's work runs at one virtual instant (Note [simulated streams]), so
      // its members' parts would have no length: a simulated trace shows the fused jobs.
      if (s_.options.world == nullptr)
        tracks.push_back(track_of(m));
    }
    auto handle = spawn_fused_layers(group.name(), members, std::move(tracks), context);
    for (const auto& m : group.members)
      s_.spawned[m] = handle;
  }
}

// The actor system has shut down; the streams drain and stop when the devices go. What
// was recorded is written (a worker's went to node0 unless the run ended before node0
// asked for it), and a failure to write it joins the run's own.
session_result session::finish(std::exception_ptr escaped) {
  auto& result = s_.result;
  result.outcome = *s_.outcome;
  s_.devices->synchronize();
  bound_streams_->release();
  s_.recorder->freeze();
  std::string trace_error;
  if (mode_->returns_trace())
    result.trace_json = s_.trace_json(result.outcome);
  if (!s_.trace_path.empty() && !s_.trace_sent) {
    try {
      auto text = mode_->returns_trace() ? result.trace_json : s_.trace_json(result.outcome);
      if (!s_.node_traces.empty())
        text = trace::merge_node_traces(text, s_.node_traces);
      text += '\n';
      write_whole_file(s_.trace_path, text, "the trace file");
      result.trace_written = s_.trace_path;
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
    auto& outcome = result.outcome;
    if (outcome.exit_code == exit_code::ok) {
      outcome.exit_code = exit_code::run_failed;
      outcome.failure = trace_error;
    } else {
      outcome.failure += "; and " + trace_error;
    }
  }
  return std::move(result);
}

}  // namespace

session_result run_session(const run_config& config, const session_options& options) {
  if (options.purpose == session_purpose::evaluate) {
    // An evaluation trains nothing, so it writes no checkpoint (nor keeps a best one).
    auto evaluation = config;
    evaluation.run.checkpoint.clear();
    evaluation.run.checkpoint_keep_best = false;
    session s{evaluation, options};
    return s.run();
  }
  session s{config, options};
  return s.run();
}

}  // namespace troupe
