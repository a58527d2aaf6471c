// layer.cpp: the layer registry, layer settings and parameter initialisation.
#include "runtime/model/layer.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

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

const char* type_name(const setting_value& v) {
  switch (v.value.index()) {
    case 0:
      return "an integer";
    case 1:
      return "a float";
    case 2:
      return "a boolean";
    default:
      return "a string";
  }
}

// "a, b, c": the names a message lists as valid or registered.
std::string comma_list(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names)
    list += (list.empty() ? "" : ", ") + n;
  return list;
}

// "layer 'dense' setting 'out'": how every message about one setting starts.
std::string setting_name(const std::string& layer_type, const std::string& key) {
  return "layer '" + layer_type + "' setting '" + key + "'";
}

config_error wrong_type(const std::string& layer_type, const std::string& key,
                        const setting_value& v, const char* expected) {
  return config_error(v.where, setting_name(layer_type, key) + ": expected " + expected +
                                   ", found " + type_name(v));
}

// The value of `v` as a T, or nullptr when the setting is absent (v == nullptr); throws
// when the setting holds another type than T (`expected`: "an integer").
template <class T>
const T* value_as(const setting_value* v, const std::string& layer_type, const std::string& key,
                  const char* expected) {
  if (v == nullptr)
    return nullptr;
  const auto* value = std::get_if<T>(&v->value);
  if (value == nullptr)
    throw wrong_type(layer_type, key, *v, expected);
  return value;
}

template <class T>
config_error out_of_range(const std::string& layer_type, const std::string& key,
                          const setting_value& v, T value, T min, T max) {
  return config_error(v.where, setting_name(layer_type, key) + " = " + std::to_string(value) +
                                   " is out of range [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
}

}  // namespace

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
  }
}

// ---- layer_settings ----

layer_settings::layer_settings(const layer_config& config) : config_(config) {}

const setting_value* layer_settings::find(const std::string& key) {
  read_.insert(key);
  auto it = config_.settings.find(key);
  return it == config_.settings.end() ? nullptr : &it->second;
}

source_position layer_settings::position(const std::string& key) const {
  auto it = config_.settings.find(key);
  return it == config_.settings.end() ? config_.where : it->second.where;
}

std::int64_t layer_settings::integer(const std::string& key, std::int64_t fallback,
                                     std::int64_t min, std::int64_t max) {
  const auto* v = find(key);
  const auto* i = value_as<std::int64_t>(v, config_.type, key, "an integer");
  if (i == nullptr)
    return fallback;
  if (*i < min || *i > max)
    throw out_of_range(config_.type, key, *v, *i, min, max);
  return *i;
}

std::int64_t layer_settings::integer(const std::string& key, std::int64_t min,
                                     std::int64_t max) {
  if (config_.settings.count(key) == 0)
    throw config_error(config_.where, "layer '" + config_.type + "' needs the integer setting '" +
                                          key + "'");
  return integer(key, 0, min, max);
}

double layer_settings::number(const std::string& key, double fallback, double min, double max) {
  const auto* v = find(key);
  if (v == nullptr)
    return fallback;
  double x;
  if (const auto* d = std::get_if<double>(&v->value))
    x = *d;
  else if (const auto* i = std::get_if<std::int64_t>(&v->value))
    x = static_cast<double>(*i);
  else
    throw wrong_type(config_.type, key, *v, "a number");
  if (!(x >= min && x <= max))
    throw out_of_range(config_.type, key, *v, x, min, max);
  return x;
}

bool layer_settings::boolean(const std::string& key, bool fallback) {
  const auto* v = find(key);
  const auto* b = value_as<bool>(v, config_.type, key, "a boolean");
  if (b == nullptr)
    return fallback;
  return *b;
}

std::string layer_settings::text(const std::string& key, const std::string& fallback,
                                 const std::vector<std::string>& allowed) {
  const auto* v = find(key);
  const auto* s = value_as<std::string>(v, config_.type, key, "a string");
  if (s == nullptr)
    return fallback;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
    throw config_error(v->where, setting_name(config_.type, key) + ": unknown value '" + *s + "'" +
                                     did_you_mean(*s, allowed) + " (valid: " + comma_list(allowed) +
                                     ")");
  }
  return *s;
}

void layer_settings::finish() const {
  std::vector<std::string> known(read_.begin(), read_.end());
  for (const auto& [key, value] : config_.settings) {
    if (read_.count(key))
      continue;
    std::string hint = did_you_mean(key, known);
    if (hint.empty()) {
      const auto list = comma_list(known);
      hint = list.empty() ? " (this layer takes no settings)" : " (valid: " + list + ")";
    }
    throw config_error(value.where, "unknown setting '" + key + "' for layer '" + config_.type +
                                        "'" + hint);
  }
}

// ---- layer ----

double layer::cost(const shape_t& input) const {
  // An elementwise layer: a few operations per element, forward and backward.
  return 3.0 * static_cast<double>(element_count(input));
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
  layer_settings settings{config};
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
