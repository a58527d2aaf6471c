// layer_check.cpp: finite-difference checking of a layer's backward.
#include "runtime/model/layer_check.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <sstream>

#include "runtime/base/limits.hpp"
#include "runtime/base/random.hpp"

namespace troupe {

namespace {

struct check_state {
  const layer* math;
  layer_context context;
  std::vector<tensor> params;
  tensor x;
  tensor r;  // the weights of L = sum(y * r)
  shape_t y_shape;
};

double loss_of(check_state& s) {
  tensor y = tensor::zeros(s.y_shape);
  std::vector<tensor> saved;
  s.math->forward(s.context, s.params, s.x, y, saved);
  double total = 0;
  const float* yp = y.f32();
  const float* rp = s.r.f32();
  for (std::int64_t i = 0; i < y.numel(); ++i)
    total += static_cast<double>(yp[i]) * rp[i];
  return total;
}

// dL/dv[i] by central differences with step h, divided by the step actually taken in float.
double numeric_derivative(check_state& s, float* v, std::int64_t i, double h) {
  const float saved = v[i];
  const auto up = static_cast<float>(saved + h), down = static_cast<float>(saved - h);
  v[i] = up;
  const double plus = loss_of(s);
  v[i] = down;
  const double minus = loss_of(s);
  v[i] = saved;
  return (plus - minus) / (static_cast<double>(up) - static_cast<double>(down));
}

std::string number(double value) {
  std::ostringstream out;
  out.precision(4);
  out << value;
  return out.str();
}

// The p-quantile of `values` (copied: nth_element reorders).
double quantile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  const auto k = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

// Compares analytic derivatives of L with respect to `values` against central differences,
// element by element (Note [what the gradient check allows]). `label` names the settings
// of this run ("" for those given).
void compare(check_state& s, tensor& values, const tensor& analytic, const std::string& what,
             const std::string& label, const gradient_check_options& options,
             gradient_check_result& result) {
  float* v = values.f32();
  const float* a = analytic.f32();
  const auto n = values.numel();
  std::vector<double> numeric(static_cast<std::size_t>(n)), noise(numeric.size());
  double scale = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    numeric[k] = numeric_derivative(s, v, i, options.step);
    noise[k] = std::abs(numeric[k] - numeric_derivative(s, v, i, options.step / 2));
    scale = std::max({scale, std::abs(numeric[k]), std::abs(static_cast<double>(a[i]))});
  }
  const double typical_noise = quantile(noise, 0.9);
  double worst = -1;
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double floor = 3 * std::max(noise[k], typical_noise) + 1e-6 * scale;
    const double size = std::max(std::abs(numeric[k]), std::abs(static_cast<double>(a[i])));
    const double allowed = options.tolerance * size + floor;
    const double error = std::abs(numeric[k] - a[i]);
    // NaN in either is an error beyond any allowance.
    const double ratio = std::isfinite(error) ? (allowed > 0 ? error / allowed : 0) : INFINITY;
    if (ratio > worst) {
      worst = ratio;
      at = i;
    }
  }
  if (worst < 0)
    return;  // an empty tensor
  const auto k = static_cast<std::size_t>(at);
  const double error = std::abs(numeric[k] - a[at]);
  const double size = std::max(std::abs(numeric[k]), std::abs(static_cast<double>(a[at])));
  const double relative = size > 0 ? error / size : 0;
  const std::string where = what + "[" + std::to_string(at) + "]";
  const std::string line =
      where + (label.empty() ? "" : " at " + label) + ": backward gives " + number(a[at]) +
      ", finite differences " + number(numeric[k]) + " (relative error " + number(relative) +
      ", " + number(worst) + " times what is allowed there: tolerance " +
      number(options.tolerance) + " relative plus the differences' noise " +
      number(3 * std::max(noise[k], typical_noise) + 1e-6 * scale) + ")";
  if (worst > result.worst_ratio || result.worst.empty()) {
    result.worst_ratio = worst;
    result.worst_relative = relative;
    result.worst = line;
  }
  if (!(worst <= 1)) {
    result.passed = false;
    result.failures.push_back(line);
  }
}

// The number of values of `shape` with a batch of `batch` in front, or nothing when that
// overflows or passes limits::max_tensor_elements.
std::optional<std::int64_t> batched_count(std::int64_t batch, const shape_t& shape) {
  std::optional<std::int64_t> count = batch;
  for (auto d : shape)
    if (count)
      count = checked_multiply(*count, d);
  if (!count || *count > limits::max_tensor_elements)
    return std::nullopt;
  return count;
}

std::string shape_words(std::int64_t batch, const shape_t& shape) {
  return "a batch of " + std::to_string(batch) + " x " + shape_to_string(shape);
}

}  // namespace

void check_gradient_check_size(const layer& math, const std::string& type,
                               const gradient_check_options& options, int runs) {
  const auto input = batched_count(options.batch, options.input_shape);
  if (!input)
    throw user_error("check-layer " + quote_user_text(type) + ": " +
                     shape_words(options.batch, options.input_shape) +
                     " is more than the limit of " + std::to_string(limits::max_tensor_elements) +
                     " values; use a smaller --input or --batch");
  // The output's shape first: it is where a layer refuses an input it cannot take (a
  // parameters() may assume one it can: attention read a rank-1 input's channels out of range).
  const auto output_shape = math.output_shape(options.input_shape);
  // Each checked value (an input or a parameter) costs four forward passes (two steps).
  double values = static_cast<double>(*input);
  for (const auto& spec : math.parameters(options.input_shape)) {
    const auto count = batched_count(1, spec.shape);
    if (!count)
      throw user_error("check-layer " + quote_user_text(type) + ": its parameter " +
                       quote_user_text(spec.name) + " of shape " + shape_to_string(spec.shape) +
                       " is more than the limit of " + std::to_string(limits::max_tensor_elements) +
                       " values; use a smaller --input or smaller settings");
    values += static_cast<double>(*count);
  }
  const auto output = batched_count(options.batch, output_shape);
  if (!output)
    throw user_error("check-layer " + quote_user_text(type) + ": its output for " +
                     shape_words(options.batch, options.input_shape) +
                     " is more than the limit of " + std::to_string(limits::max_tensor_elements) +
                     " values; use a smaller --input, --batch or settings");
  const double per_pass =
      std::max(1.0, math.cost(options.input_shape)) * static_cast<double>(options.batch);
  const double work = 4 * values * per_pass * runs;
  if (!(work <= limits::max_gradient_check_flops))
    throw user_error(
        "check-layer " + quote_user_text(type) + ": checking " +
        shape_words(options.batch, options.input_shape) +
        " by finite differences takes 4 forward passes for each of " + shortest_text(values) +
        " values" + (runs > 1 ? " at each of " + std::to_string(runs) + " settings" : "") +
        ", about " + shortest_text(work) +
        " floating-point operations, more than the "
        "limit of " +
        shortest_text(limits::max_gradient_check_flops) +
        "; use a smaller --input or --batch (a few features check a layer as well as many)");
}

namespace {

bool near(float a, float b) { return std::abs(a - b) <= 1e-5f * (1 + std::abs(b)); }

// A split backward must compute what backward does: backward_input its dx, and
// backward_weight its gradients (overwritten, then added to with accumulate = true).
void check_split_backward(const check_state& s, const std::vector<tensor>& saved, const tensor& dx,
                          const std::vector<param_spec>& specs, tensor* scratch_dx,
                          gradient_check_result& result) {
  auto fail = [&result](std::string line) {
    result.passed = false;
    result.failures.push_back(std::move(line));
  };
  tensor split_dx = tensor::zeros(dx.shape());
  s.math->backward_input(s.context, s.params, saved, s.r, split_dx);
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    if (!near(split_dx.f32()[i], dx.f32()[i])) {
      fail("dx[" + std::to_string(i) + "]: backward_input gives " +
           std::to_string(split_dx.f32()[i]) + ", backward " + std::to_string(dx.f32()[i]));
      break;
    }
  std::vector<tensor> whole, split;
  for (const auto& p : s.params) {
    whole.push_back(tensor::zeros(p.shape()));
    split.push_back(tensor::zeros(p.shape()));
  }
  s.math->backward(s.context, s.params, saved, s.r, scratch_dx, whole, false);
  for (int pass = 0; pass < 2; ++pass) {
    const bool accumulate = pass == 1;
    s.math->backward_weight(s.context, s.params, saved, s.r, split, accumulate);
    for (std::size_t i = 0; i < split.size(); ++i)
      for (std::int64_t j = 0; j < split[i].numel(); ++j) {
        const float expected = (accumulate ? 2 : 1) * whole[i].f32()[j];
        if (!near(split[i].f32()[j], expected)) {
          fail("d" + specs[i].name + "[" + std::to_string(j) + "]: backward_weight" +
               (accumulate ? " with accumulate = true" : "") + " gives " +
               std::to_string(split[i].f32()[j]) + ", backward " + std::to_string(expected));
          break;
        }
      }
  }
}

// accumulate = true must add to what is there: a second backward doubles the grads.
void check_accumulate(const check_state& s, const std::vector<tensor>& saved,
                      std::vector<tensor>& grads, const std::vector<param_spec>& specs,
                      tensor* scratch_dx, gradient_check_result& result) {
  std::vector<std::vector<float>> once;
  for (const auto& g : grads)
    once.push_back(g.to_vector());
  s.math->backward(s.context, s.params, saved, s.r, scratch_dx, grads, true);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    auto twice = grads[i].to_vector();
    for (std::size_t j = 0; j < twice.size(); ++j)
      if (std::abs(twice[j] - 2 * once[i][j]) > 1e-5f * (1 + std::abs(2 * once[i][j]))) {
        result.passed = false;
        result.failures.push_back("d" + specs[i].name +
                                  ": backward with accumulate = true does not add to the "
                                  "existing gradient");
        break;
      }
  }
}

// The seconds the child below may take: a backward of a check's size takes milliseconds.
constexpr unsigned null_dx_seconds = 60;

// Calls backward with dx = null, as a first layer's backward is called, in a child process:
// a layer that writes through it crashes there, not here. `grads` are backward's parameter
// gradients with a dx, which it must compute the same without one. Returns the failure, or
// "". This is the one fork() in troupe (Note [spawn, not fork] in runtime/base/spawn.hpp):
// it runs a function, not a program. The child allocates nothing (its gradients are made
// here), leaves no core file, and ends itself after null_dx_seconds.
std::string null_dx_failure(const check_state& s, const std::vector<tensor>& saved,
                            const std::vector<tensor>& grads) {
  std::vector<tensor> null_grads;
  for (const auto& p : s.params)
    null_grads.push_back(tensor::zeros(p.shape()));
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0)
    return {};  // cannot tell; the in-process calls below pass a real dx
  if (child == 0) {
    // Quiet, no core, a deadline, and the default action for the signals a bad write
    // raises (a sanitizer's handler would turn them into an exit code and a report).
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM})
      ::signal(signal_number, SIG_DFL);
    alarm(null_dx_seconds);
    try {
      s.math->backward(s.context, s.params, saved, s.r, nullptr, null_grads, false);
    } catch (...) {
      _exit(3);
    }
    for (std::size_t i = 0; i < grads.size(); ++i)
      for (std::int64_t j = 0; j < grads[i].numel(); ++j)
        if (!(std::abs(null_grads[i].f32()[j] - grads[i].f32()[j]) <=
              1e-5f * (1 + std::abs(grads[i].f32()[j]))))
          _exit(4);
    _exit(0);
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited != child || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
    return {};  // done, or not to be known (SIGCHLD ignored)
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
    return "backward threw when called with dx = null, as it is for a first layer (no "
           "gradient is wanted there): check dx before writing it";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
    return "backward with dx = null (a first layer's) computed other parameter gradients than "
           "with a dx: it must compute them either way, and skip only dx";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    return "backward with dx = null (a first layer's) did not finish within " +
           std::to_string(null_dx_seconds) + " s";
  const std::string how = WIFSIGNALED(status)
                              ? std::string{"signal "} + std::to_string(WTERMSIG(status)) + ", " +
                                    strsignal(WTERMSIG(status))
                              : "exit status " + std::to_string(WEXITSTATUS(status));
  return "backward wrote to dx, which is null for a first layer: called with dx = null it "
         "crashed (" + how + "); write dx only when it is not null";
}

}  // namespace

namespace {

// An input of both signs in equal numbers (in random places), away from the kink at 0 that
// piecewise-linear activations have; a quarter of the magnitudes past 1 (where a clipping
// or saturating branch may start). A layer that reads token ids gets ids.
void draw_input(tensor& x, std::int64_t ids, const gradient_check_options& options,
                keyed_random& random) {
  float* v = x.f32();
  const auto n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids > 0) {
      v[i] = static_cast<float>(std::min<std::int64_t>(
          ids - 1, static_cast<std::int64_t>(random.uniform() * static_cast<double>(ids))));
      continue;
    }
    const double u = random.uniform();
    const double magnitude = u < 0.75 ? u / 0.75 : 1 + 12 * (u - 0.75);
    v[i] = static_cast<float>((i % 2 == 0 ? 1 : -1) * (magnitude + options.kink_margin));
  }
  if (ids == 0)  // shuffle the signs' places
    for (std::int64_t i = n - 1; i > 0; --i)
      std::swap(v[i], v[static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(i + 1)))]);
}

struct check_facts {
  shape_t x_shape, y_shape;
  std::size_t parameters = 0;
};

// One check of `math` with the options' input, parameters and r (the same draws whatever
// the settings); `label` names the settings when they are not the given ones.
check_facts check_once(const layer& math, const gradient_check_options& options,
                       const std::string& label, bool null_dx, gradient_check_result& result) {
  keyed_random random{options.seed, 0xc4ec};
  check_state s;
  s.math = &math;
  s.context.device = device_id{};
  s.context.training = true;
  check_facts facts;
  facts.x_shape = {options.batch};
  facts.x_shape.insert(facts.x_shape.end(), options.input_shape.begin(), options.input_shape.end());
  s.x = tensor::empty(facts.x_shape);
  const auto ids = math.input_ids();  // token ids, not values: drawn, and dx not checked
  draw_input(s.x, ids, options, random);
  auto specs = math.parameters(options.input_shape);
  facts.parameters = specs.size();
  for (const auto& spec : specs) {
    auto p = tensor::empty(spec.shape);
    // Random (not the configured init): zero biases would hide a wrong bias gradient.
    for (std::int64_t j = 0; j < p.numel(); ++j)
      p.f32()[j] = static_cast<float>(random.uniform() - 0.5);
    s.params.push_back(p);
  }
  const auto out_shape = math.output_shape(options.input_shape);
  s.y_shape = {options.batch};
  s.y_shape.insert(s.y_shape.end(), out_shape.begin(), out_shape.end());
  facts.y_shape = s.y_shape;
  s.r = tensor::empty(s.y_shape);
  for (std::int64_t i = 0; i < s.r.numel(); ++i)
    s.r.f32()[i] = static_cast<float>(2 * random.uniform() - 1);

  tensor y = tensor::zeros(s.y_shape);
  std::vector<tensor> saved;
  math.forward(s.context, s.params, s.x, y, saved);
  // Analytic gradients: dy = r.
  tensor dx = tensor::zeros(facts.x_shape);
  std::vector<tensor> grads;
  for (const auto& p : s.params)
    grads.push_back(tensor::zeros(p.shape()));
  math.backward(s.context, s.params, saved, s.r, &dx, grads, false);
  // Then with dx = null, in a child; if that failed, the calls below pass a real one.
  tensor scratch = tensor::zeros(facts.x_shape);
  tensor* no_dx = nullptr;
  if (null_dx) {
    auto failure = null_dx_failure(s, saved, grads);
    if (!failure.empty()) {
      result.passed = false;
      result.failures.push_back(failure);
      no_dx = &scratch;
    }
  }
  if (ids == 0)
    compare(s, s.x, dx, "dx", label, options, result);
  for (std::size_t i = 0; i < s.params.size(); ++i)
    compare(s, s.params[i], grads[i], "d" + specs[i].name, label, options, result);
  const auto before = result.failures.size();
  if (!grads.empty())
    check_accumulate(s, saved, grads, specs, no_dx, result);
  if (math.splits_backward())
    check_split_backward(s, saved, dx, specs, no_dx, result);
  if (!label.empty())
    for (auto i = before; i < result.failures.size(); ++i)
      result.failures[i] = "at " + label + ": " + result.failures[i];
  return facts;
}

struct setting_variant {
  layer_config config;
  std::string label;  // "slope = 0.3127"
};

// The most settings a check tries besides the given ones.
constexpr std::size_t max_variants = 6;

// Values of the settings the layer declares that the config leaves at their defaults,
// one setting changed at a time: a number above and below its default (by a half to the
// whole of (|default| + 1) / 2, drawn, kept in its range), an integer one more, a boolean
// flipped. Text settings (an init's name) and required settings stay as given.
std::vector<setting_variant> setting_variants(const layer_config& config,
                                              const std::vector<setting_declaration>& declared,
                                              const gradient_check_options& options) {
  keyed_random random{options.seed, 0x5e77};
  std::vector<setting_variant> out;
  const source_position drawn{"a setting check-layer drew"};
  const auto add = [&](const std::string& key, setting_value value, const std::string& text) {
    if (out.size() >= max_variants)
      return;
    setting_variant v{config, key + " = " + text};
    v.config.settings[key] = std::move(value);
    out.push_back(std::move(v));
  };
  for (const auto& d : declared) {
    if (d.required || config.settings.count(d.key) > 0)
      continue;
    switch (d.kind) {
      case setting_declaration::type::number:
        for (double sign : {1.0, -1.0}) {
          const double reach = 0.5 * (std::abs(d.fallback) + 1) * (0.5 + 0.5 * random.uniform());
          const double value = std::clamp(d.fallback + sign * reach, d.min, d.max);
          if (std::isfinite(value) && std::abs(value - d.fallback) > 1e-9 * (1 + std::abs(d.fallback)))
            add(d.key, {value, drawn}, number(value));
        }
        break;
      case setting_declaration::type::integer:
        if (d.fallback + 1 <= d.max)
          add(d.key, {static_cast<std::int64_t>(d.fallback) + 1, drawn},
              std::to_string(static_cast<std::int64_t>(d.fallback) + 1));
        break;
      case setting_declaration::type::boolean:
        add(d.key, {d.fallback == 0, drawn}, d.fallback == 0 ? "true" : "false");
        break;
      case setting_declaration::type::text:
        break;
    }
  }
  return out;
}

}  // namespace

gradient_check_result check_layer_gradients(const layer_config& config,
                                            const gradient_check_options& options) {
  std::vector<setting_declaration> declared;
  auto math = create_layer(config, &declared);
  math->bind(device_type::cpu);
  // The variants this input can take (one that cannot, as unflatten's channels = 2 for
  // an input of 7, is not a finding about the layer's gradient).
  std::vector<std::pair<std::unique_ptr<layer>, std::string>> variants;
  if (options.vary_settings)
    for (auto& v : setting_variants(config, declared, options)) {
      try {
        auto other = create_layer(v.config);
        other->bind(device_type::cpu);
        const auto shape = other->output_shape(options.input_shape);
        (void)other->parameters(options.input_shape);
        if (batched_count(options.batch, shape))
          variants.emplace_back(std::move(other), v.label);
      } catch (const std::exception&) {
      }
    }
  check_gradient_check_size(*math, config.type, options, 1 + static_cast<int>(variants.size()));
  gradient_check_result result;
  const auto facts = check_once(*math, options, "", options.null_dx, result);
  for (const auto& [other, label] : variants) {
    check_once(*other, options, label, false, result);
    result.checked.push_back(label);
  }
  std::ostringstream summary;
  summary << config.type << ": input " << shape_to_string(facts.x_shape) << ", output "
          << shape_to_string(facts.y_shape) << ", " << facts.parameters << " parameter(s)"
          << (math->splits_backward() ? ", split backward" : "") << "; at the given settings";
  for (const auto& label : result.checked)
    summary << ", " << label;
  summary << "; each element within " << options.tolerance
          << " relative plus the finite differences' noise";
  if (!result.worst.empty())
    summary << "\nworst element: " << result.worst;
  result.summary = summary.str();
  return result;
}

}  // namespace troupe
