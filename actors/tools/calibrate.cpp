// calibrate.cpp: the timings of calibrate.hpp.
#include "actors/tools/calibrate.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "actors/base/device_scheduler.hpp"
#include "actors/session/session.hpp"
#include "actors/tools/process_link.hpp"
#include "actors/tools/verify.hpp"
#include "actors/training/layer_actor.hpp"
#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/random.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/model/loss.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "troupe/error.hpp"
#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

namespace troupe {

namespace {

// The most a calibration's contention may say (a file's is checked against it). A measure
// above it is the machine's noise (two rounds of a tiny model on a loaded machine), and is
// recorded as this: a calibration must be readable by the simulate that asked for it.
constexpr double max_contention = 100;

// The median of `repeats` runs of `run`, after two that warm caches and pools, in us.
double median_us(std::int64_t repeats, const std::function<void()>& run) {
  run();
  run();
  std::vector<double> times;
  for (std::int64_t i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

tensor random_tensor(shape_t shape, keyed_random& random, std::int64_t ids = 0) {
  auto t = tensor::empty(std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = ids > 0 ? static_cast<float>(random.below(static_cast<std::uint64_t>(ids)))
                         : static_cast<float>(2 * random.uniform() - 1);
  return t;
}

// `t` (f32) rounded to bf16 where `type` is bf16.
tensor in_type(const tensor& t, dtype type) {
  return type == dtype::bf16 ? rounded_to_bf16(layer_context{}, t) : t;
}

// Memory-bound ops (copies, sums, updates) in a run read what some other job wrote a while
// ago, out of cache; timed on one buffer over and over they would run from cache, several
// times faster. So they go round this many sets of their buffers, 8 MiB in all.
std::int64_t cold_sets(std::int64_t bytes_a_set) {
  constexpr std::int64_t beyond_caches = std::int64_t{8} << 20;
  return std::clamp<std::int64_t>(beyond_caches / std::max<std::int64_t>(1, bytes_a_set), 1, 256);
}

double elapsed_us(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

// One layer's passes on random inputs and parameters, each timed when run. `reads_data`:
// the layer's input is the data set's batch, so its backward computes no input gradient
// (layer_actor: nothing to send it to), as it is timed here.
class layer_bench {
 public:
  layer_bench(const layer_config& config, std::int64_t index, const shape_t& input, bool reads_data,
              activation_types types, std::int64_t rows, const run_config& run,
              keyed_random& random)
      : math_(create_layer(config)) {
    math_->bind(device_type::cpu);
    timing.layer = index;
    timing.type = config.type;
    timing.precision = run_precision_of(*math_, config, input, run);
    timing.input = input;
    timing.rows = rows;
    context_.training = true;
    context_.layer = static_cast<std::int32_t>(index);
    shape_t x_shape{rows};
    x_shape.insert(x_shape.end(), input.begin(), input.end());
    // x, y, dy and dx in the dtypes a run gives them (Note [bf16 activations]).
    x_ = in_type(random_tensor(x_shape, random, math_->input_ids()), types.x);
    // In a bf16 run the parameters the layer computes with in bf16 arrive rounded
    // (Note [bf16 parameters] in actors/training/layer_actor.cpp), and it is timed so.
    const auto in_bf16 = bf16_parameter_mask(*math_, config, input, run);
    for (const auto& spec : math_->parameters(input)) {
      params_.push_back(random_tensor(spec.shape, random));
      if (params_.size() <= in_bf16.size() && in_bf16[params_.size() - 1])
        params_.back() = rounded_to_bf16(context_, params_.back());
      grads_.push_back(tensor::zeros(spec.shape));
      timing.parameters += params_.back().numel();
    }
    shape_t y_shape{rows};
    const auto per_sample = math_->output_shape(input);
    y_shape.insert(y_shape.end(), per_sample.begin(), per_sample.end());
    y_ = tensor::zeros(y_shape, types.y);
    dy_ = in_type(random_tensor(y_shape, random), types.y);
    dx_ = tensor::zeros(x_shape, types.x);
    wants_dx_ = math_->input_ids() == 0 && !reads_data;
  }

  // One round: the forward (when `forward`), else the backwards, each timed into its list.
  void run(bool forward, bool keep) {
    auto start = std::chrono::steady_clock::now();
    if (forward) {
      saved_.clear();
      math_->forward(context_, params_, x_, y_, saved_);
      if (keep)
        forward_.push_back(elapsed_us(start));
      return;
    }
    math_->backward(context_, params_, saved_, dy_, wants_dx_ ? &dx_ : nullptr, grads_, false);
    if (keep)
      backward_.push_back(elapsed_us(start));
    if (!math_->splits_backward())
      return;
    start = std::chrono::steady_clock::now();
    math_->backward_input(context_, params_, saved_, dy_, dx_);
    if (keep)
      input_.push_back(elapsed_us(start));
    start = std::chrono::steady_clock::now();
    math_->backward_weight(context_, params_, saved_, dy_, grads_, false);
    if (keep)
      weight_.push_back(elapsed_us(start));
  }

  layer_timing finish() {
    timing.forward_us = median_of(forward_);
    timing.backward_us = median_of(backward_);
    if (math_->splits_backward()) {
      timing.backward_input_us = median_of(input_);
      timing.backward_weight_us = median_of(weight_);
    }
    return timing;
  }

  layer_timing timing;

 private:
  std::unique_ptr<layer> math_;
  layer_context context_;
  tensor x_, y_, dy_, dx_;
  std::vector<tensor> params_, grads_, saved_;
  bool wants_dx_ = true;
  std::vector<double> forward_, backward_, input_, weight_;
};

// A message to an actor on another device: from a post to the task running on that
// device's stream thread, which had gone to sleep waiting for work (its spin is 200 us;
// Note [CPU streams] in stream_worker.cpp), as a device waiting for its next message has.
double time_handover(std::int64_t repeats) {
  stream there{device_id{}, 1};
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::vector<double> times;
  for (std::int64_t i = 0; i < repeats; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(400));
    std::atomic<std::int64_t> ran{0};
    const auto posted = now_ns();
    there.post([&ran, &now_ns] { ran.store(now_ns()); });
    there.drain_posted();
    times.push_back(static_cast<double>(ran.load() - posted) / 1000);
  }
  // Wake-ups here come in two kinds (a few us, or tens when the VM's core slept as well),
  // in proportions a median would flip between: the mean of all but the slowest tenth.
  std::sort(times.begin(), times.end());
  const auto kept = std::max<std::size_t>(1, times.size() - times.size() / 10);
  double sum = 0;
  for (std::size_t i = 0; i < kept; ++i)
    sum += times[i];
  // On a machine whose cores are all busy (another build, another run) a wake-up waits for a
  // scheduler slice, milliseconds, which says nothing of a run with the machine to itself: no
  // more than the 200 us a stream spins before it sleeps (Note [CPU streams]).
  constexpr double most_us = 200;
  return std::min(most_us, sum / static_cast<double>(kept));
}

// Note [what a handler costs]
// Between jobs a device's thread runs its actors' handlers (Note [actors on device threads]
// in actors/base/device_scheduler.cpp), and a simulated handler keeps its device for the
// calibration's handler_us. That is measured here, not assumed: a short run of the config's
// own model on one device (single_device_form, as troupe verify runs it: 40 steps, a
// micro-batch's rows a step, traced), the handlers' time over the messages handled on a
// device's thread in steps 10-39 (the first allocate, spawn and fill caches; the host's
// trainer has no device). The mean, not the median: most handlers take under 2 us, a few
// more (a first layer's backward allocates the step's gradient buffer), and a step pays
// for all of them. The shipped MLP measured 3.1-3.3 us here (char_lm 4.1-4.4) while a
// first layer's backward woke the loader on the host thread for its credit (17 us of the
// handler; Note [the loader on its device] in actors/base/device_scheduler.cpp), against the
// 2 us simulate assumed before, which put its DP2 prediction at 0.88-0.89 of the measured
// step (then 0.96-0.97); 0.94-1.08 us since the loader handles its messages on its device. Traced, as the benchmark's measured
// runs are (bench/simulate_vs_measured.py); an untraced handler is somewhat cheaper. An
// explicit config (no single-device form) or a run that fails is not measured: -1, and
// simulate takes its default.
struct handler_costs {
  double handler_us = -1;  // Note [what a handler costs]
  double host_us = -1;     // Note [what a host turn costs]
};

// Note [what a host turn costs]
// The trainer takes its turns on the host thread (Note [actors on device threads] in
// actors/base/device_scheduler.cpp), which on a machine whose cores all run
// devices takes a core from one of them (Note [what shares a core] in
// runtime/core/simulation.cpp). What a turn costs there is not the handler's time the
// trace shows (a GPipe step of the shipped MLP: one report handled in 12.6 us, traced) but
// the host thread's CPU time, its wake-up and sleep included (95 us a step in that run, of
// which about 40% was the kernel switching threads, perf). So it is measured as CPU time,
// in the same run as the handlers: the host thread's CPU time from one turn's end to the
// next's (device_scheduler::record_host_turns), the mean over the turns after the first
// quarter (start-up's spawning and first allocations).
handler_costs time_handlers(const run_config& config, const session_prepared& prepared,
                            std::int64_t rows) {
  handler_costs out;
  if (config.is_explicit())
    return out;
  constexpr std::int64_t warm_steps = 10;  // the first steps allocate, spawn, fill caches
  auto one = single_device_form(config);
  one.run.steps = warm_steps + 30;
  one.run.evaluate = false;
  one.run.checkpoint.clear();
  one.data.batch_size = std::max<std::int64_t>(1, rows);
  static std::atomic<int> calibrations{0};  // two at once in one process write two files
  const auto trace = (std::filesystem::temp_directory_path() /
                      ("troupe-calibrate-" + std::to_string(::getpid()) + "-" +
                       std::to_string(calibrations.fetch_add(1)) + "-handlers.json"))
                         .string();
  session_options options;
  options.quiet = true;
  options.metrics_path = "/dev/null";
  options.trace_path = trace;
  options.sample_length = 0;
  options.data = prepared.data;
  std::vector<std::int64_t> host_turns;
  try {
    auto result = [&] {
      struct recording {  // until the session has ended, however it ends
        explicit recording(std::vector<std::int64_t>* into) {
          device_scheduler::record_host_turns(into);
        }
        ~recording() { device_scheduler::record_host_turns(nullptr); }
      } recorded{&host_turns};
      return run_session(one, options);
    }();
    if (result.outcome.exit_code == exit_code::ok && !result.trace_written.empty()) {
      const auto trace = load_trace(result.trace_written);
      double handling = 0;
      std::int64_t messages = 0;
      for (const auto& h : trace.handlers)
        if (h.device != "host" && h.step >= warm_steps) {
          handling += h.duration_us;
          ++messages;
        }
      if (messages > 0)
        out.handler_us = handling / static_cast<double>(messages);
      const auto first = host_turns.size() / 4;
      if (host_turns.size() - first >= 8) {
        double sum = 0;
        for (auto i = first; i < host_turns.size(); ++i)
          sum += static_cast<double>(host_turns[i]);
        out.host_us = sum / 1000 / static_cast<double>(host_turns.size() - first);
      }
    }
  } catch (const std::exception&) {
    out = handler_costs{};  // the model did not run as one device here (a plugin's layer refuses)
  }
  std::error_code ignored;
  std::filesystem::remove(trace, ignored);
  return out;
}

const char* optimizer_name(optimizer_type type) {
  switch (type) {
    case optimizer_type::sgd: return "sgd";
    case optimizer_type::adam: return "adam";
    case optimizer_type::adamw: return "adamw";
  }
  return "?";
}

}  // namespace

namespace {

// Note [layers timed as a run finds them]
// A layer in a run finds the caches as the rest of its step left them: the optimizers read
// and write every parameter, gradient and state, and the loader gathers random rows of the
// data set. Rounds of the layers' passes alone, back to back, run from caches a run never
// has: on this project's AMD VM the shipped MLP's first linear took 480 us a round so timed
// and 564 us in a traced run (1.17x; its second 1.16x), and in DP2's run, two devices at
// once, 1.34x and 1.22x, while the contention of such rounds on two threads measured 1.01.
// So between two rounds, untimed, the rest of a step runs as the run does it: the
// optimizer's update over every parameter (its own buffers: parameters, gradients, state)
// and a micro-batch's gather from the data set (rest_of_step). The rounds on two threads
// (contention) do the same, each thread its own.
class rest_of_step {
 public:
  rest_of_step(const run_config& config, const session_prepared& prepared, std::int64_t rows,
               std::int64_t parameters, std::uint64_t key)
      : sgd_(config.optimizer.type == optimizer_type::sgd),
        parameters_(parameters),
        data_(prepared.data),
        buffers_(static_cast<std::size_t>((sgd_ ? 3 : 4) * parameters), 0.0f),
        picked_(static_cast<std::size_t>(rows)),
        random_(config.run.seed, key) {
    sgd_hyper_.lr = adam_hyper_.lr = static_cast<float>(config.optimizer.lr);
    adam_hyper_.decoupled = config.optimizer.type == optimizer_type::adamw;
    if (data_ != nullptr)
      batch_.resize(static_cast<std::size_t>(rows * data_->train.features));
  }

  void run() {
    float* b = buffers_.data();
    const auto n = parameters_;
    if (n > 0 && sgd_)
      kernels::lookup<kernels::ops::sgd_update>(device_type::cpu)(context_, n, b, b, b + n,
                                                                 b + 2 * n, sgd_hyper_);
    else if (n > 0)
      kernels::lookup<kernels::ops::adam_update>(device_type::cpu)(
          context_, n, b, b, b + n, b + 2 * n, b + 3 * n, adam_hyper_);
    if (data_ == nullptr || data_->train.count <= 0)
      return;
    for (auto& row : picked_)
      row = static_cast<std::int64_t>(
          random_.below(static_cast<std::uint64_t>(data_->train.count)));
    data_->train.gather(picked_.data(), 0, picked_.size(), batch_.data());
  }

 private:
  bool sgd_;
  std::int64_t parameters_;
  std::shared_ptr<const dataset_split> data_;
  std::vector<float> buffers_;
  std::vector<std::int64_t> picked_;
  std::vector<float> batch_;
  keyed_random random_;  // its own: the contention rounds run one on each of two threads
  const kernels::context context_;
  kernels::sgd_hyper sgd_hyper_;
  kernels::adam_hyper adam_hyper_;
};

// Each layer's forward and backward on the calibration's rows, in rounds as a device runs
// the whole model (Note [layers timed as a run finds them]), and the contention of two
// devices computing at once; the elements of the largest activation (what copies and sums
// are timed with).
std::int64_t time_layers(const run_config& config, const session_prepared& prepared,
                         std::int64_t repeats, keyed_random& random, calibration& out) {
  const auto& graph = prepared.graph;
  std::int64_t largest = 1;
  const auto types = activation_dtypes(graph, config, device_type::cpu);  // timed on a CPU
  auto make_benches = [&] {
    std::vector<std::unique_ptr<layer_bench>> made;
    for (const auto& actor : graph.actors) {
      if (actor.kind != actor_kind::layer || actor.replica > 0)
        continue;
      const auto& input = graph.shapes.at(static_cast<std::size_t>(actor.layer));
      const auto& reads = graph.inputs.at(static_cast<std::size_t>(actor.layer));
      const bool reads_data = std::find(reads.begin(), reads.end(), data_input) != reads.end();
      made.push_back(std::make_unique<layer_bench>(actor.math, actor.layer, input, reads_data,
                                                   types.at(static_cast<std::size_t>(actor.layer)),
                                                   out.rows, config, random));
      std::int64_t elements = out.rows;
      for (auto d : input)
        elements *= d;
      largest = std::max(largest, elements);
    }
    std::sort(made.begin(), made.end(),
              [](const auto& a, const auto& b) { return a->timing.layer < b->timing.layer; });
    return made;
  };
  auto benches = make_benches();
  // Each round runs every forward in the model's order, then every backward in reverse, as a
  // device running the whole model does: a layer finds the caches as the layers before it
  // left them (timed alone, over and over, a layer would run from warm caches, and a
  // transformer's layers about 15% faster than in a run). Two rounds warm up.
  std::int64_t parameters = 0;
  for (const auto& b : benches)
    parameters += b->timing.parameters;
  auto round = [](std::vector<std::unique_ptr<layer_bench>>& set, bool keep, rest_of_step& rest) {
    rest.run();
    const auto start = std::chrono::steady_clock::now();
    for (auto& b : set)
      b->run(true, keep);
    for (auto it = set.rbegin(); it != set.rend(); ++it)
      (*it)->run(false, keep);
    return elapsed_us(start);
  };
  rest_of_step rest{config, prepared, out.rows, parameters, 0x5e57};
  std::vector<double> alone;
  for (std::int64_t r = 0; r < repeats + 2; ++r) {
    const double us = round(benches, r >= 2, rest);
    if (r >= 2)
      alone.push_back(us);
  }
  {
    auto sorted = alone;
    std::sort(sorted.begin(), sorted.end());
    const double median = median_of(alone);
    if (median > 0) {
      out.rounds_low = sorted[sorted.size() / 10] / median;
      out.rounds_high = sorted[sorted.size() - 1 - sorted.size() / 10] / median;
    }
  }
  // Contention (Note [what a job costs] in simulate.cpp): the same rounds on two threads at
  // once, each with its own tensors, as two devices of a machine run; the factor is how much
  // longer a round takes then. Devices share the memory system (and on a VM, more).
  if (std::thread::hardware_concurrency() >= 2 && !benches.empty()) {
    auto other = make_benches();
    const std::int64_t rounds = std::min<std::int64_t>(repeats, 20) + 2;
    std::vector<double> together;
    std::atomic<int> ready{0};
    std::thread second{[&] {
      rest_of_step own{config, prepared, out.rows, parameters, 0x5e58};
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      for (std::int64_t r = 0; r < rounds + 2; ++r)  // outlasts the first thread's rounds
        round(other, false, own);
    }};
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    for (std::int64_t r = 0; r < rounds; ++r) {
      const double us = round(benches, false, rest);
      if (r >= 2)
        together.push_back(us);
    }
    second.join();
    out.contention = std::clamp(median_of(together) / median_of(alone), 1.0, max_contention);
  }
  for (auto& b : benches)
    out.layers.push_back(b->finish());
  return largest;
}

// The update: every parameter of the model in one flat buffer, as the optimizers hold it.
void time_update(const run_config& config, std::int64_t repeats, calibration& out) {
  std::int64_t parameters = 0;
  for (const auto& l : out.layers)
    parameters += l.parameters;
  if (parameters > 0) {
    const kernels::context device_context;
    const auto sets = cold_sets(4 * parameters * static_cast<std::int64_t>(sizeof(float)));
    auto all = tensor::zeros({sets, 4, parameters});
    std::int64_t set = 0;
    tensor param, grad, state1, state2;
    auto next = [&] {  // the next set of buffers (cold_sets)
      set = (set + 1) % sets;
      param = all.view(set * 4 * parameters, {parameters});
      grad = all.view((set * 4 + 1) * parameters, {parameters});
      state1 = all.view((set * 4 + 2) * parameters, {parameters});
      state2 = all.view((set * 4 + 3) * parameters, {parameters});
    };
    next();
    double us = 0;
    if (config.optimizer.type == optimizer_type::sgd) {
      const auto update = kernels::lookup<kernels::ops::sgd_update>(device_type::cpu);
      kernels::sgd_hyper hyper;
      hyper.lr = static_cast<float>(config.optimizer.lr);
      us = median_us(repeats, [&] {
        next();
        update(device_context, parameters, param.f32(), param.f32(), grad.f32(), state1.f32(),
               hyper);
      });
    } else {
      const auto update = kernels::lookup<kernels::ops::adam_update>(device_type::cpu);
      kernels::adam_hyper hyper;
      hyper.lr = static_cast<float>(config.optimizer.lr);
      hyper.decoupled = config.optimizer.type == optimizer_type::adamw;
      us = median_us(repeats, [&] {
        next();
        update(device_context, parameters, param.f32(), param.f32(), grad.f32(), state1.f32(),
               state2.f32(), hyper);
      });
    }
    out.update_ns_per_parameter = us * 1000 / static_cast<double>(parameters);
    // In a bf16 run each optimizer then rounds its new version once (a convert job).
    if (std::any_of(out.layers.begin(), out.layers.end(),
                    [](const layer_timing& l) { return l.precision == "bf16"; })) {
      const auto round = kernels::lookup<kernels::ops::to_bf16>(device_type::cpu);
      auto rounded = tensor::empty({parameters}, dtype::bf16);
      const double round_us = median_us(repeats, [&] {
        next();
        round(device_context, parameters, param.f32(), rounded.bf16());
      });
      out.convert_ns_per_parameter = round_us * 1000 / static_cast<double>(parameters);
    }
  }
}

// A copy between two CPU devices is a memcpy of the activation (runtime/core/transfer.cpp).
void time_copy(std::int64_t largest, std::int64_t repeats, calibration& out) {
  out.copy_bytes = largest * static_cast<std::int64_t>(sizeof(float));
  const auto copy_sets = cold_sets(2 * out.copy_bytes);
  std::vector<char> buffers(static_cast<std::size_t>(2 * out.copy_bytes * copy_sets), 1);
  std::int64_t copy_set = 0;
  const double copy_us = median_us(repeats, [&] {
    copy_set = (copy_set + 1) % copy_sets;
    char* from = buffers.data() + 2 * out.copy_bytes * copy_set;
    std::memcpy(from + out.copy_bytes, from, static_cast<std::size_t>(out.copy_bytes));
  });
  out.copy_gb_per_s = copy_us > 0 ? static_cast<double>(out.copy_bytes) / (copy_us * 1000) : 0;
}

// A loader's batch: a micro-batch of random rows of the data set gathered into one
// buffer (gather_rows in actors/training/batch_assembler_actor.cpp), from the data set itself.
void time_load(const session_prepared& prepared, std::int64_t repeats, keyed_random& random,
               calibration& out) {
  const auto& train = prepared.data->train;
  const auto features = train.features;
  std::vector<float> batch(static_cast<std::size_t>(out.rows * features));
  std::vector<std::int64_t> picked(static_cast<std::size_t>(out.rows));
  const double us = median_us(repeats, [&] {
    for (auto& row : picked)
      row = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(train.count)));
    train.gather(picked.data(), 0, picked.size(), batch.data());
  });
  out.load_gb_per_s =
      us > 0 ? static_cast<double>(batch.size() * sizeof(float)) / (us * 1000) : 0;
}

// An averager's sum: y += x over the same bytes (actors/averaging/ring_collective.cpp).
void time_reduce(std::int64_t largest, std::int64_t repeats, keyed_random& random,
                 calibration& out) {
  const kernels::context device_context;
  const auto axpy = kernels::lookup<kernels::ops::axpy>(device_type::cpu);
  const auto sets = cold_sets(2 * out.copy_bytes);
  auto xy = random_tensor({sets, 2, largest}, random);
  std::int64_t set = 0;
  const double us = median_us(repeats, [&] {
    set = (set + 1) % sets;
    float* x = xy.f32() + set * 2 * largest;
    axpy(device_context, largest, 1.0f, x, x + largest);
  });
  out.reduce_gb_per_s = us > 0 ? static_cast<double>(out.copy_bytes) / (us * 1000) : 0;
}

// The loss of one micro-batch: the config's loss over every position, and its metrics
// (loss_actor).
void time_loss(const run_config& config, const topology& graph, std::int64_t repeats,
               keyed_random& random, calibration& out) {
  const kernels::context device_context;
  const auto& last = graph.shapes.back();
  const std::int64_t width = last.empty() ? 1 : last.back();
  std::int64_t rows = out.rows;
  for (std::size_t i = 0; i + 1 < last.size(); ++i)
    rows *= last[i];
  const auto loss = create_loss(config.model, device_type::cpu);
  const bool ids = loss->spec().targets == target_kind::class_ids;
  auto logits = random_tensor({rows, width}, random);
  auto targets = random_tensor(ids ? shape_t{rows} : shape_t{rows, width}, random, ids ? width : 0);
  auto classes = tensor::empty({rows}, dtype::i32);
  for (std::int64_t i = 0; ids && i < rows; ++i)
    classes.i32()[i] = static_cast<std::int32_t>(targets.f32()[i]);
  auto dlogits = tensor::zeros({rows, width});
  auto sums = tensor::zeros({2 + loss_job::max_metrics});
  loss_job job;
  job.rows = rows;
  job.width = width;
  job.output = logits.f32();
  job.class_ids = classes.i32();
  job.values = targets.f32();
  job.grad_scale = 1.0f;
  job.sums = sums.f32();
  job.doutput = dlogits.f32();
  out.loss_us = median_us(repeats, [&] { loss->compute(device_context, job); });
}

}  // namespace

calibration calibrate(const run_config& config, const std::string& path, std::int64_t repeats) {
  constexpr std::int64_t most_repeats = 10000;  // a minute or so of the largest ops
  if (repeats < 1 || repeats > most_repeats)
    throw user_error("--repeats should be between 1 and " + std::to_string(most_repeats) +
                     ", not " + std::to_string(repeats));
  const auto prepared = prepare_session(config);
  const auto& graph = prepared.graph;
  calibration out;
  out.config = path;
  out.repeats = repeats;
  out.rows = prepared.plan.batch_size / (prepared.plan.replicas * prepared.plan.microbatches);
  out.optimizer = optimizer_name(config.optimizer.type);
  // A cpu:N device's kernels run on one thread (Note [OpenBLAS threads]).
  const int threads_before = kernels::cpu_kernel_threads();
  kernels::set_cpu_kernel_threads(1);
  keyed_random random{config.run.seed, 0xca11b};
  const auto largest = time_layers(config, prepared, repeats, random, out);
  time_update(config, repeats, out);
  time_copy(largest, repeats, out);
  time_load(prepared, repeats, random, out);
  time_reduce(largest, repeats, random, out);
  time_loss(config, graph, repeats, random, out);
  kernels::set_cpu_kernel_threads(threads_before);
  out.handover_us = time_handover(std::min<std::int64_t>(repeats, 50));
  const auto link = time_process_link(std::min<std::int64_t>(repeats, 200));
  out.process_latency_us = link.latency_us;
  out.process_gb_per_s = link.gb_per_s;
  out.message_cpu_us = link.message_cpu_us;
  const auto handlers = time_handlers(config, prepared, out.rows);
  out.handler_us = handlers.handler_us;
  out.host_us = handlers.host_us;
  return out;
}

std::string run_precision_of(const layer& math, const layer_config& layer_config,
                             const shape_t& input, const run_config& config) {
  return bf16_parameter_mask(math, layer_config, input, config).empty() ? "fp32" : "bf16";
}

std::string format_calibration_text(const calibration& c) {
  std::string text = string_printf(
      "%s on this machine's %s, %lld rows a micro-batch, medians of %lld runs (us):\n", c.config.c_str(),
      c.device.c_str(), static_cast<long long>(c.rows), static_cast<long long>(c.repeats));
  text += string_printf("%5s  %-14s %-14s %10s %10s %10s %10s %10s\n", "layer", "type", "input",
                        "params", "forward", "backward", "bwd input", "bwd weight");
  for (const auto& l : c.layers) {
    auto split = [](double us) { return us < 0 ? std::string{"-"} : string_printf("%.1f", us); };
    text += string_printf(
        "%5lld  %-14s %-14s %10lld %10.1f %10.1f %10s %10s\n", static_cast<long long>(l.layer),
        (l.type + (l.precision == "bf16" ? " (bf16)" : "")).c_str(),
        shape_to_string(l.input).c_str(), static_cast<long long>(l.parameters), l.forward_us,
        l.backward_us, split(l.backward_input_us).c_str(), split(l.backward_weight_us).c_str());
  }
  text += string_printf(
      "update (%s): %.3f ns a parameter; copy: %.2f GB/s at %lld bytes; sum: "
      "%.2f GB/s; a batch's gather: %.2f GB/s; loss: %.1f us a micro-batch; a message to "
      "another device's thread: %.1f us; two devices at once: %.2fx as long; a message "
      "handled: %s; a host turn: %s\n",
      c.optimizer.c_str(), c.update_ns_per_parameter, c.copy_gb_per_s,
      static_cast<long long>(c.copy_bytes), c.reduce_gb_per_s, c.load_gb_per_s, c.loss_us,
      c.handover_us, c.contention,
      c.handler_us < 0 ? "not measured" : string_printf("%.1f us", c.handler_us).c_str(),
      c.host_us < 0 ? "not measured" : string_printf("%.1f us", c.host_us).c_str());
  if (c.convert_ns_per_parameter >= 0)
    text += string_printf("a version rounded to bf16: %.3f ns a parameter\n",
                          c.convert_ns_per_parameter);
  text += string_printf(
      "rounds of the model's passes: 10%% of them under %.2fx their median, 10%% over %.2fx\n",
      c.rounds_low, c.rounds_high);
  if (c.process_latency_us >= 0)
    text += string_printf(
        "between two processes here (through CAF over loopback): a message %.1f us, %.1f us of "
        "CPU; a 4 MiB tensor at %.2f GB/s\n",
        c.process_latency_us, c.message_cpu_us, c.process_gb_per_s);
  else
    text += "between two processes here: not measured (no loopback connection)\n";
  return text;
}

std::string format_calibration_json(const calibration& c) {
  auto layers = nlohmann::json::array();
  for (const auto& l : c.layers) {
    nlohmann::json row = {{"layer", l.layer},           {"type", l.type},
                          {"input", l.input},           {"rows", l.rows},
                          {"parameters", l.parameters}, {"forward_us", l.forward_us},
                          {"backward_us", l.backward_us}};
    if (l.backward_input_us >= 0) {
      row["backward_input_us"] = l.backward_input_us;
      row["backward_weight_us"] = l.backward_weight_us;
    }
    row["precision"] = l.precision;
    layers.push_back(std::move(row));
  }
  nlohmann::json out = {{"troupe_version", TROUPE_VERSION_STRING},
                        {"config", c.config},
                        {"device", c.device},
                        {"repeats", c.repeats},
                        {"rows", c.rows},
                        {"optimizer", c.optimizer},
                        {"update_ns_per_parameter", c.update_ns_per_parameter},
                        {"copy_bytes", c.copy_bytes},
                        {"copy_gb_per_s", c.copy_gb_per_s},
                        {"reduce_gb_per_s", c.reduce_gb_per_s},
                        {"load_gb_per_s", c.load_gb_per_s},
                        {"loss_us", c.loss_us},
                        {"handover_us", c.handover_us},
                        {"contention", c.contention},
                        {"layers", std::move(layers)}};
  if (c.convert_ns_per_parameter >= 0)
    out["convert_ns_per_parameter"] = c.convert_ns_per_parameter;
  if (c.handler_us >= 0)
    out["handler_us"] = c.handler_us;
  if (c.host_us >= 0)
    out["host_us"] = c.host_us;
  out["rounds_low"] = c.rounds_low;
  out["rounds_high"] = c.rounds_high;
  if (c.process_latency_us >= 0) {
    out["process_latency_us"] = c.process_latency_us;
    out["process_gb_per_s"] = c.process_gb_per_s;
    out["message_cpu_us"] = c.message_cpu_us;
  }
  return out.dump(2) + "\n";
}

calibration parse_calibration_json(const std::string& text, const std::string& path) {
  auto fail = [&](const std::string& what) -> user_error {
    return user_error(quote_user_text(path) + ": not a calibration from troupe calibrate --json: " +
                      what);
  };
  // Nesting measured before nlohmann recurses, repeated keys refused (json_input.hpp).
  nlohmann::json j;
  try {
    j = parse_untrusted_json(text.data(), text.data() + text.size(),
                             "calibration file " + quote_user_text(path));
  } catch (const data_error& e) {
    throw fail(e.what());
  }
  if (!j.is_object())
    throw fail("the top level is not an object");
  // Each number within what a machine can measure, so that the simulation's prices (whole
  // nanoseconds, bytes over rates, costs per parameter) fit in 64 bits.
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where,
                    double most = 1e9) {  // a time: at most 1000 s
    auto found = o.find(key);
    if (found == o.end() || !found->is_number())
      throw fail(where + "\"" + key + "\" is missing or not a number");
    const double v = found->get<double>();
    if (!std::isfinite(v) || v < 0 || v > most)
      throw fail(where + "\"" + key + "\" is " + shortest_text(v) +
                 ", expected a time or rate from 0 to " + shortest_text(most));
    return v;
  };
  auto rate = [&](const char* key) {  // GB/s: 0 (not measured), or 1 MB/s to 1000000 GB/s
    const double v = number(j, key, "", 1e6);
    if (v > 0 && v < 1e-3)
      throw fail(std::string{"\""} + key + "\" is " + shortest_text(v) +
                 ", expected 0 or a rate from 0.001 to 1e+06 GB/s");
    return v;
  };
  auto count = [&](const nlohmann::json& o, const char* key, const std::string& where,
                   std::int64_t least, std::int64_t most) {
    auto found = o.find(key);
    if (found == o.end() || !found->is_number())
      throw fail(where + "\"" + key + "\" is missing or not a number");
    const double v = found->get<double>();
    if (!(v >= static_cast<double>(least) && v <= static_cast<double>(most)) || v != std::floor(v))
      throw fail(where + "\"" + key + "\" is " + shortest_text(v) +
                 ", expected a whole number from " + std::to_string(least) + " to " +
                 std::to_string(most));
    return static_cast<std::int64_t>(v);
  };
  auto string = [&](const nlohmann::json& o, const char* key, const std::string& where = "") {
    auto found = o.find(key);
    if (found == o.end() || !found->is_string())
      throw fail(where + "\"" + key + "\" is missing or not a string");
    return found->get<std::string>();
  };
  constexpr std::int64_t most_bytes = std::int64_t{1} << 40;
  calibration c;
  c.config = string(j, "config");
  c.device = string(j, "device");
  c.optimizer = string(j, "optimizer");
  c.repeats = count(j, "repeats", "", 0, 1'000'000'000);
  c.rows = count(j, "rows", "", 1, limits::max_samples);
  c.update_ns_per_parameter = number(j, "update_ns_per_parameter", "", 1e4);
  c.copy_bytes = count(j, "copy_bytes", "", 0, most_bytes);
  c.copy_gb_per_s = rate("copy_gb_per_s");
  c.reduce_gb_per_s = rate("reduce_gb_per_s");
  c.load_gb_per_s = rate("load_gb_per_s");
  c.loss_us = number(j, "loss_us", "");
  c.handover_us = number(j, "handover_us", "");
  if (j.contains("convert_ns_per_parameter"))  // absent: no bf16 layer (or from before)
    c.convert_ns_per_parameter = number(j, "convert_ns_per_parameter", "", 1e4);
  if (j.contains("handler_us"))  // absent: not measured (or a calibration from before)
    c.handler_us = number(j, "handler_us", "");
  if (j.contains("host_us"))  // likewise
    c.host_us = number(j, "host_us", "");
  if (j.contains("rounds_low") || j.contains("rounds_high")) {  // absent: not measured
    c.rounds_low = number(j, "rounds_low", "", 1);
    c.rounds_high = number(j, "rounds_high", "", max_contention);
    if (c.rounds_high < 1)
      throw fail("\"rounds_high\" is " + shortest_text(c.rounds_high) +
                 ", expected a factor from 1 to " + shortest_text(max_contention));
  }
  if (j.contains("process_latency_us") || j.contains("process_gb_per_s") ||
      j.contains("message_cpu_us")) {  // absent: not measured (or before it was)
    c.process_latency_us = number(j, "process_latency_us", "");
    c.message_cpu_us = number(j, "message_cpu_us", "");
    c.process_gb_per_s = rate("process_gb_per_s");
    if (c.process_gb_per_s <= 0)
      throw fail("\"process_gb_per_s\" is 0, expected a rate from 0.001 to 1e+06 GB/s");
  }
  if (j.contains("contention")) {  // calibrations before it was measured: none
    c.contention = number(j, "contention", "");
    if (c.contention < 1 || c.contention > max_contention)
      throw fail("\"contention\" is " + shortest_text(c.contention) +
                 ", expected a factor between 1 and " + shortest_text(max_contention));
  }
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array())
    throw fail("\"layers\" is missing or not an array");
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto& row = (*layers)[i];
    const auto where = "layers[" + std::to_string(i) + "]: ";
    if (!row.is_object())
      throw fail(where + "not an object");
    layer_timing l;
    l.layer = count(row, "layer", where, 0, limits::max_layers);
    l.type = row.contains("type") ? string(row, "type", where) : std::string{};
    l.rows = count(row, "rows", where, 1, limits::max_samples);
    l.parameters = count(row, "parameters", where, 0, most_bytes);
    l.forward_us = number(row, "forward_us", where);
    l.backward_us = number(row, "backward_us", where);
    if (row.contains("backward_input_us")) {
      l.backward_input_us = number(row, "backward_input_us", where);
      l.backward_weight_us = number(row, "backward_weight_us", where);
    }
    // Optional: calibrations written before it timed fp32 only.
    if (row.contains("precision")) {
      l.precision = string(row, "precision", where);
      if (l.precision != "fp32" && l.precision != "bf16")
        throw fail(where + "\"precision\" is " + quote_user_text(l.precision) +
                   ", expected \"fp32\" or \"bf16\"");
    }
    c.layers.push_back(std::move(l));
  }
  return c;
}

}  // namespace troupe
