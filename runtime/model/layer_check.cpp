// layer_check.cpp: finite-difference checking of a layer's backward.
#include "runtime/model/layer_check.hpp"

#include <algorithm>
#include <cmath>
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

// Compares analytic derivatives of L with respect to `values` against central differences.
void compare(check_state& s, tensor& values, const tensor& analytic, const std::string& what,
             const gradient_check_options& options, gradient_check_result& result) {
  float* v = values.f32();
  const float* a = analytic.f32();
  double scale = 1;
  for (std::int64_t i = 0; i < values.numel(); ++i)
    scale = std::max(scale, std::abs(static_cast<double>(a[i])));
  double worst = 0;
  std::int64_t worst_index = 0;
  double worst_numeric = 0;
  for (std::int64_t i = 0; i < values.numel(); ++i) {
    float saved = v[i];
    v[i] = static_cast<float>(saved + options.step);
    double plus = loss_of(s);
    v[i] = static_cast<float>(saved - options.step);
    double minus = loss_of(s);
    v[i] = saved;
    // Divide by the step actually taken in float.
    double taken = static_cast<double>(static_cast<float>(saved + options.step)) -
                   static_cast<double>(static_cast<float>(saved - options.step));
    double numeric = (plus - minus) / taken;
    double error = std::abs(numeric - a[i]) / scale;
    if (error > worst) {
      worst = error;
      worst_index = i;
      worst_numeric = numeric;
    }
  }
  result.worst_error = std::max(result.worst_error, worst);
  if (worst > options.tolerance) {
    result.passed = false;
    std::ostringstream line;
    line << what << "[" << worst_index << "]: backward gives " << a[worst_index]
         << ", finite differences " << worst_numeric << " (error " << worst
         << " relative to the gradient scale " << scale << ", tolerance " << options.tolerance
         << ")";
    result.failures.push_back(line.str());
  }
}

}  // namespace

namespace {

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
                               const gradient_check_options& options) {
  const auto input = batched_count(options.batch, options.input_shape);
  if (!input)
    throw user_error("check-layer " + quote_user_text(type) + ": " +
                     shape_words(options.batch, options.input_shape) +
                     " is more than the limit of " + std::to_string(limits::max_tensor_elements) +
                     " values; use a smaller --input or --batch");
  // The output's shape first: it is where a layer refuses an input it cannot take (a
  // parameters() may assume one it can: attention read a rank-1 input's channels out of range).
  const auto output_shape = math.output_shape(options.input_shape);
  // Each checked value (an input or a parameter) costs two forward passes.
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
  const double work = 2 * values * per_pass;
  if (!(work <= limits::max_gradient_check_flops))
    throw user_error(
        "check-layer " + quote_user_text(type) + ": checking " +
        shape_words(options.batch, options.input_shape) +
        " by finite differences takes 2 forward passes for each of " + shortest_text(values) +
        " values, about " + shortest_text(work) +
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
                          const std::vector<param_spec>& specs, gradient_check_result& result) {
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
  s.math->backward(s.context, s.params, saved, s.r, nullptr, whole, false);
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

}  // namespace

gradient_check_result check_layer_gradients(const layer_config& config,
                                            const gradient_check_options& options) {
  gradient_check_result result;
  auto math = create_layer(config);
  math->bind(device_type::cpu);
  check_gradient_check_size(*math, config.type, options);
  keyed_random random{options.seed, 0xc4ec};

  check_state s;
  s.math = math.get();
  s.context.device = device_id{};
  s.context.training = true;
  shape_t x_shape{options.batch};
  x_shape.insert(x_shape.end(), options.input_shape.begin(), options.input_shape.end());
  s.x = tensor::empty(x_shape);
  const auto ids = math->input_ids();  // token ids, not values: drawn, and dx not checked
  for (std::int64_t i = 0; i < s.x.numel(); ++i) {
    double u = 2 * random.uniform() - 1;
    // Stay off the kink at 0 that piecewise-linear activations have.
    s.x.f32()[i] =
        ids > 0 ? static_cast<float>(std::min<std::int64_t>(
                      ids - 1, static_cast<std::int64_t>(random.uniform() * static_cast<double>(ids))))
                : static_cast<float>(u >= 0 ? u + options.kink_margin : u - options.kink_margin);
  }
  auto specs = math->parameters(options.input_shape);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto p = tensor::empty(specs[i].shape);
    // Random (not the configured init): zero biases would hide a wrong bias gradient.
    for (std::int64_t j = 0; j < p.numel(); ++j)
      p.f32()[j] = static_cast<float>(random.uniform() - 0.5);
    s.params.push_back(p);
  }
  auto out_shape = math->output_shape(options.input_shape);
  s.y_shape = {options.batch};
  s.y_shape.insert(s.y_shape.end(), out_shape.begin(), out_shape.end());
  s.r = tensor::empty(s.y_shape);
  for (std::int64_t i = 0; i < s.r.numel(); ++i)
    s.r.f32()[i] = static_cast<float>(2 * random.uniform() - 1);

  // Analytic gradients: dy = r.
  tensor y = tensor::zeros(s.y_shape);
  std::vector<tensor> saved;
  math->forward(s.context, s.params, s.x, y, saved);
  tensor dx = tensor::zeros(x_shape);
  std::vector<tensor> grads;
  for (const auto& p : s.params)
    grads.push_back(tensor::zeros(p.shape()));
  math->backward(s.context, s.params, saved, s.r, &dx, grads, false);

  if (ids == 0)
    compare(s, s.x, dx, "dx", options, result);
  for (std::size_t i = 0; i < s.params.size(); ++i)
    compare(s, s.params[i], grads[i], "d" + specs[i].name, options, result);

  // accumulate = true must add to what is there: a second backward doubles the grads.
  if (!grads.empty()) {
    std::vector<std::vector<float>> once;
    for (const auto& g : grads)
      once.push_back(g.to_vector());
    math->backward(s.context, s.params, saved, s.r, nullptr, grads, true);
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
  if (math->splits_backward())
    check_split_backward(s, saved, dx, specs, result);
  std::ostringstream summary;
  summary << config.type << ": input " << shape_to_string(x_shape) << ", output "
          << shape_to_string(s.y_shape) << ", " << specs.size() << " parameter(s)"
          << (math->splits_backward() ? ", split backward" : "") << "; worst relative error "
          << result.worst_error << " (tolerance " << options.tolerance << ")";
  result.summary = summary.str();
  return result;
}

}  // namespace troupe
