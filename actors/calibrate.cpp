// calibrate.cpp: the timings of calibrate.hpp.
#include "actors/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "actors/session.hpp"
#include "runtime/base/random.hpp"
#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"
#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

namespace troupe {

namespace {

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

layer_timing time_layer(const layer_config& config, std::int64_t index, const shape_t& input,
                        std::int64_t rows, std::int64_t repeats, keyed_random& random) {
  auto math = create_layer(config);
  math->bind(device_type::cpu);
  layer_timing out;
  out.layer = index;
  out.type = config.type;
  out.input = input;
  out.rows = rows;
  layer_context context;
  context.training = true;
  context.layer = static_cast<std::int32_t>(index);
  shape_t x_shape{rows};
  x_shape.insert(x_shape.end(), input.begin(), input.end());
  const auto x = random_tensor(x_shape, random, math->input_ids());
  std::vector<tensor> params, grads;
  for (const auto& spec : math->parameters(input)) {
    params.push_back(random_tensor(spec.shape, random));
    grads.push_back(tensor::zeros(spec.shape));
    out.parameters += params.back().numel();
  }
  shape_t y_shape{rows};
  const auto per_sample = math->output_shape(input);
  y_shape.insert(y_shape.end(), per_sample.begin(), per_sample.end());
  auto y = tensor::zeros(y_shape);
  std::vector<tensor> saved;
  out.forward_us = median_us(repeats, [&] {
    saved.clear();
    math->forward(context, params, x, y, saved);
  });
  const auto dy = random_tensor(y_shape, random);
  auto dx = tensor::zeros(x_shape);
  const bool wants_dx = math->input_ids() == 0;
  out.backward_us = median_us(repeats, [&] {
    math->backward(context, params, saved, dy, wants_dx ? &dx : nullptr, grads, false);
  });
  if (math->splits_backward()) {
    out.backward_input_us =
        median_us(repeats, [&] { math->backward_input(context, params, saved, dy, dx); });
    out.backward_weight_us = median_us(
        repeats, [&] { math->backward_weight(context, params, saved, dy, grads, false); });
  }
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

calibration calibrate(const run_config& config, const std::string& path, std::int64_t repeats) {
  constexpr std::int64_t most_repeats = 10000;  // a minute or so of the largest ops
  if (repeats < 1 || repeats > most_repeats)
    throw user_error("troupe calibrate: --repeats should be between 1 and " +
                     std::to_string(most_repeats) + ", not " + std::to_string(repeats));
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
  std::int64_t largest = 1;
  for (const auto& actor : graph.actors) {
    if (actor.kind != actor_kind::layer || actor.replica > 0)
      continue;
    const auto& input = graph.shapes.at(static_cast<std::size_t>(actor.layer));
    out.layers.push_back(time_layer(actor.math, actor.layer, input, out.rows, repeats, random));
    std::int64_t elements = out.rows;
    for (auto d : input)
      elements *= d;
    largest = std::max(largest, elements);
  }
  std::sort(out.layers.begin(), out.layers.end(),
            [](const layer_timing& a, const layer_timing& b) { return a.layer < b.layer; });

  // The update: every parameter of the model in one flat buffer, as the optimizers hold it.
  std::int64_t parameters = 0;
  for (const auto& l : out.layers)
    parameters += l.parameters;
  if (parameters > 0) {
    const kernels::context device_context;
    auto param = random_tensor({parameters}, random);
    auto grad = random_tensor({parameters}, random);
    auto state1 = tensor::zeros({parameters});
    auto state2 = tensor::zeros({parameters});
    double us = 0;
    if (config.optimizer.type == optimizer_type::sgd) {
      const auto update = kernels::lookup<kernels::ops::sgd_update>(device_type::cpu);
      kernels::sgd_hyper hyper;
      hyper.lr = static_cast<float>(config.optimizer.lr);
      us = median_us(repeats, [&] {
        update(device_context, parameters, param.f32(), param.f32(), grad.f32(), state1.f32(),
               hyper);
      });
    } else {
      const auto update = kernels::lookup<kernels::ops::adam_update>(device_type::cpu);
      kernels::adam_hyper hyper;
      hyper.lr = static_cast<float>(config.optimizer.lr);
      hyper.decoupled = config.optimizer.type == optimizer_type::adamw;
      us = median_us(repeats, [&] {
        update(device_context, parameters, param.f32(), param.f32(), grad.f32(), state1.f32(),
               state2.f32(), hyper);
      });
    }
    out.update_ns_per_parameter = us * 1000 / static_cast<double>(parameters);
  }

  // A copy between two CPU devices is a memcpy of the activation (runtime/core/transfer.cpp).
  out.copy_bytes = largest * static_cast<std::int64_t>(sizeof(float));
  std::vector<char> from(static_cast<std::size_t>(out.copy_bytes), 1),
      to(static_cast<std::size_t>(out.copy_bytes));
  const double copy_us =
      median_us(repeats, [&] { std::memcpy(to.data(), from.data(), from.size()); });
  out.copy_gb_per_s = copy_us > 0 ? static_cast<double>(out.copy_bytes) / (copy_us * 1000) : 0;
  kernels::set_cpu_kernel_threads(threads_before);
  return out;
}

std::string format_calibration_text(const calibration& c) {
  std::string text = string_printf(
      "%s on this machine's %s, %lld rows a micro-batch, medians of %lld runs (us):\n", c.config.c_str(),
      c.device.c_str(), static_cast<long long>(c.rows), static_cast<long long>(c.repeats));
  text += string_printf("%5s  %-14s %-14s %10s %10s %10s %10s %10s\n", "layer", "type", "input",
                        "params", "forward", "backward", "bwd input", "bwd weight");
  for (const auto& l : c.layers) {
    auto split = [](double us) { return us < 0 ? std::string{"-"} : string_printf("%.1f", us); };
    text += string_printf("%5lld  %-14s %-14s %10lld %10.1f %10.1f %10s %10s\n",
                          static_cast<long long>(l.layer), l.type.c_str(),
                          shape_to_string(l.input).c_str(), static_cast<long long>(l.parameters),
                          l.forward_us, l.backward_us, split(l.backward_input_us).c_str(),
                          split(l.backward_weight_us).c_str());
  }
  text += string_printf("update (%s): %.3f ns a parameter; copy: %.2f GB/s at %lld bytes\n",
                        c.optimizer.c_str(), c.update_ns_per_parameter, c.copy_gb_per_s,
                        static_cast<long long>(c.copy_bytes));
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
                        {"layers", std::move(layers)}};
  return out.dump(2) + "\n";
}

}  // namespace troupe
