// layer.cpp: the layer registry and parameter initialisation.
#include "runtime/model/layer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "runtime/base/limits.hpp"
#include "runtime/base/name_registry.hpp"
#include "runtime/base/random.hpp"
#include "runtime/config/precision.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe {

namespace {

const std::vector<std::pair<std::string, init_kind>>& init_names() {
  static const std::vector<std::pair<std::string, init_kind>> names = {
      {"zeros", init_kind::zeros},
      {"ones", init_kind::ones},
      {"kaiming", init_kind::kaiming_uniform},
      {"kaiming_uniform", init_kind::kaiming_uniform},
      {"kaiming_normal", init_kind::kaiming_normal},
      {"xavier", init_kind::xavier_uniform},
      {"xavier_uniform", init_kind::xavier_uniform},
      {"xavier_normal", init_kind::xavier_normal},
      {"torch", init_kind::torch_default},
      {"normal", init_kind::normal},
  };
  return names;
}

name_registry<layer_factory>& layer_registry() {
  static name_registry<layer_factory> registry;
  return registry;
}

}  // namespace

std::uint64_t layer_context::pass_key() const {
  return mix64(mix64(mix64(seed) ^ static_cast<std::uint64_t>(step)) ^
               static_cast<std::uint64_t>(layer));
}

bool parse_init_kind(const std::string& name, init_kind& out) {
  for (const auto& [text, kind] : init_names())
    if (text == name) {
      out = kind;
      return true;
    }
  return false;
}

std::vector<std::string> init_kind_names() {
  std::vector<std::string> names;
  for (const auto& entry : init_names())
    names.push_back(entry.first);
  return names;
}

void initialise_parameter(const param_spec& param, std::uint64_t seed, std::int64_t layer_index,
                          std::int64_t param_index, float* values) {
  auto n = element_count(param.shape);
  keyed_random random{seed, static_cast<std::uint64_t>(layer_index) + 1,
                      static_cast<std::uint64_t>(param_index) + 1};
  auto fan_in = static_cast<double>(std::max<std::int64_t>(1, param.fan_in));
  auto fan_out = static_cast<double>(std::max<std::int64_t>(1, param.fan_out));
  auto uniform = [&](double bound) {
    for (std::int64_t i = 0; i < n; ++i)
      values[i] = static_cast<float>((2.0 * random.uniform() - 1.0) * bound);
  };
  auto normal = [&](double stddev) {
    for (std::int64_t i = 0; i < n; ++i)
      values[i] = static_cast<float>(random.normal() * stddev);
  };
  switch (param.init) {
    case init_kind::zeros:
      std::fill(values, values + n, 0.0f);
      break;
    case init_kind::ones:
      std::fill(values, values + n, 1.0f);
      break;
    case init_kind::kaiming_uniform:
      uniform(std::sqrt(6.0 / fan_in));
      break;
    case init_kind::kaiming_normal:
      normal(std::sqrt(2.0 / fan_in));
      break;
    case init_kind::xavier_uniform:
      uniform(std::sqrt(6.0 / (fan_in + fan_out)));
      break;
    case init_kind::xavier_normal:
      normal(std::sqrt(2.0 / (fan_in + fan_out)));
      break;
    case init_kind::torch_default:
      uniform(1.0 / std::sqrt(fan_in));
      break;
    case init_kind::normal:
      normal(1.0);
      break;
  }
}

// ---- layer ----

double layer::cost(const shape_t& input) const {
  // An elementwise layer: a few operations per element, forward and backward.
  return 3.0 * static_cast<double>(element_count(input));
}

void layer::backward_input(const layer_context&, const std::vector<tensor>&,
                           const std::vector<tensor>&, const tensor&, const tensor&) const {
  throw std::logic_error("layer '" + type() + "' does not split its backward");
}

void layer::backward_weight(const layer_context&, const std::vector<tensor>&,
                            const std::vector<tensor>&, const tensor&, std::vector<tensor>&,
                            bool) const {
  throw std::logic_error("layer '" + type() + "' does not split its backward");
}

dtype layer::input_dtype(dtype sent, const std::vector<tensor>& params) const {
  if (sent != dtype::bf16)
    return sent;
  const auto flow = activations();
  const bool takes =
      flow == bf16_flow::kept || (flow == bf16_flow::made && computes_in_bf16(params));
  return takes ? dtype::bf16 : dtype::f32;
}

dtype layer::output_dtype(dtype x, const std::vector<tensor>& params,
                          bool readers_take_bf16) const {
  switch (activations()) {
    case bf16_flow::made:
      return readers_take_bf16 && computes_in_bf16(params) ? dtype::bf16 : dtype::f32;
    case bf16_flow::kept:
      return x == dtype::bf16 ? dtype::bf16 : dtype::f32;
    case bf16_flow::none:
      break;
  }
  return dtype::f32;
}

tensor rounded_to_bf16(const layer_context& context, const tensor& t) {
  if (t.type() == dtype::bf16)
    return t;
  const auto round = kernels::lookup<kernels::ops::to_bf16>(context.device.type);
  tensor out = tensor::empty(t.shape(), dtype::bf16, context.device);
  round(context.kernels, t.numel(), t.f32(), out.bf16());
  return out;
}

tensor widened_to_f32(const layer_context& context, const tensor& t) {
  if (t.type() != dtype::bf16)
    return t;
  const auto widen = kernels::lookup<kernels::ops::from_bf16>(context.device.type);
  tensor out = tensor::empty(t.shape(), dtype::f32, context.device);
  widen(context.kernels, t.numel(), t.bf16(), out.f32());
  return out;
}

bool computes_in_bf16(const std::vector<tensor>& params) {
  return std::any_of(params.begin(), params.end(),
                     [](const tensor& p) { return p.type() == dtype::bf16; });
}

tensor f32_output(const layer_context& context, const tensor& out) {
  return out.type() == dtype::f32 ? out : tensor::empty(out.shape(), dtype::f32, context.device);
}

void store_output(const layer_context& context, const tensor& values, const tensor& out) {
  if (values.shares_storage_with(out))
    return;
  TROUPE_CHECK(
      out.type() == dtype::bf16 && values.type() == dtype::f32 && values.numel() == out.numel(),
      "store_output: " << to_string(values.type()) << " values of "
                       << shape_to_string(values.shape()) << " into a " << to_string(out.type())
                       << " output of " << shape_to_string(out.shape()));
  const auto round = kernels::lookup<kernels::ops::to_bf16>(context.device.type);
  round(context.kernels, out.numel(), values.f32(), out.bf16());
}

// ---- registry ----

void register_layer(const std::string& name, const std::string& description,
                    layer_factory factory) {
  if (!layer_registry().add(name, description, std::move(factory)))
    throw std::logic_error(layer_registered_twice(name));
}

bool has_layer(const std::string& name) { return layer_registry().has(name); }

std::unique_ptr<layer> create_layer(const layer_config& config,
                                    std::vector<setting_declaration>* declared) {
  std::vector<std::string> names;
  const auto factory = layer_registry().find(config.type, names);
  if (!factory)
    throw config_error(config.type_where,
                       name_registry<layer_factory>::unknown(
                           "unknown layer type " + quote_user_text(config.type), config.type, names));
  // `precision` is the runtime's (runtime/config/precision.hpp), not the layer's to read.
  setting_map own = config.settings;
  own.erase("precision");
  layer_settings settings{config.type, std::move(own), config.where};
  auto result = (*factory)(settings);
  settings.finish();
  const auto precision = layer_precision(config.settings, this_cpu_bf16());
  if (precision == numeric_precision::bf16 && result->bf16_parameters().empty())
    throw config_error(config.settings.at("precision").where,
                       "layer " + quote_user_text(config.type) +
                           " computes in fp32 only: precision = \"bf16\" does not apply to it "
                           "(its parameters, if any, are not bf16_parameters)");
  if (declared != nullptr)
    *declared = settings.declared();
  return result;
}

std::vector<std::pair<std::string, std::string>> registered_layers() {
  return layer_registry().described();
}

}  // namespace troupe
