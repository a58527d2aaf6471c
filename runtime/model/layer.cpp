// layer.cpp: the layer registry and parameter initialisation.
#include "runtime/model/layer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "runtime/base/random.hpp"

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

struct registry_entry {
  std::string description;
  layer_factory factory;
};

struct layer_registry {
  std::mutex mutex;
  std::map<std::string, registry_entry> entries;
};

layer_registry& the_registry() {
  static layer_registry registry;
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

// ---- registry ----

void register_layer(const std::string& name, const std::string& description,
                    layer_factory factory) {
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  auto [it, inserted] = r.entries.emplace(name, registry_entry{description, std::move(factory)});
  if (!inserted)
    throw std::logic_error(layer_registered_twice(name));
}

bool has_layer(const std::string& name) {
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  return r.entries.count(name) > 0;
}

std::unique_ptr<layer> create_layer(const layer_config& config) {
  layer_factory factory;
  std::vector<std::string> names;
  {
    auto& r = the_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    auto it = r.entries.find(config.type);
    if (it != r.entries.end())
      factory = it->second.factory;
    for (const auto& entry : r.entries)
      names.push_back(entry.first);
  }
  if (!factory) {
    throw config_error(config.type_where, "unknown layer type '" + config.type + "'" +
                                              did_you_mean(config.type, names) +
                                              " (registered: " + comma_list(names) + ")");
  }
  layer_settings settings{config.type, config.settings, config.where};
  auto result = factory(settings);
  settings.finish();
  return result;
}

std::vector<std::pair<std::string, std::string>> registered_layers() {
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, entry] : r.entries)
    out.emplace_back(name, entry.description);
  return out;
}

}  // namespace troupe
