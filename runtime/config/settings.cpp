// settings.cpp: the typed, range-checked reader of one table's settings (troupe/settings.hpp).
#include "troupe/settings.hpp"

#include <algorithm>

#include "runtime/base/limits.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

namespace {

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

}  // namespace

settings::settings(std::string noun, std::string name, setting_map values, source_position where)
    : noun_(std::move(noun)),
      name_(std::move(name)),
      values_(std::move(values)),
      where_(std::move(where)) {}

std::string settings::owner() const { return noun_ + " '" + name_ + "'"; }

std::string settings::setting_name(const std::string& key) const {
  return owner() + " setting '" + key + "'";
}

const setting_value* settings::find(const std::string& key) {
  read_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

source_position settings::position(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? where_ : it->second.where;
}

namespace {

// A required setting is missing, and the table holds a setting not read yet whose name is
// a near miss of it: the typo is the error, at its own line (else the typo would only be
// named once the missing setting was given).
void refuse_near_miss(const setting_map& values, const std::set<std::string>& read,
                      const std::string& key, const std::string& owner) {
  for (const auto& [given, value] : values)
    if (read.count(given) == 0 && nearest_name(given, {key}) == key)
      throw config_error(value.where, "unknown setting '" + given + "' for " + owner +
                                          "; did you mean '" + key + "'? (it needs '" + key + "')");
}

// The value of `v` as a T, or nullptr when the setting is absent (v == nullptr); throws
// when the setting holds another type than T (`expected`: "an integer").
template <class T>
const T* value_as(const setting_value* v, const std::string& setting, const char* expected) {
  if (v == nullptr)
    return nullptr;
  const auto* value = std::get_if<T>(&v->value);
  if (value == nullptr)
    throw config_error(v->where, setting + ": expected " + expected + ", found " + type_name(*v));
  return value;
}

// A number as the config would write it: 1e-20 reads "1e-20", not std::to_string's
// "0.000000" (which made eps = 1e-20 "out of range [0.000000, 1.000000]").
std::string number_text(std::int64_t value) { return std::to_string(value); }
std::string number_text(double value) { return shortest_text(value); }

template <class T>
config_error out_of_range(const std::string& setting, const setting_value& v, T value, T min,
                          T max) {
  return config_error(v.where, setting + " = " + number_text(value) + " is out of range [" +
                                   number_text(min) + ", " + number_text(max) + "]");
}

}  // namespace

void settings::declare(setting_declaration declaration) {
  for (const auto& known : declared_)
    if (known.key == declaration.key)
      return;
  declared_.push_back(std::move(declaration));
}

std::int64_t settings::integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                               std::int64_t max) {
  declare({key, setting_declaration::type::integer, false, static_cast<double>(fallback),
           static_cast<double>(min), static_cast<double>(max)});
  return read_integer(key, fallback, min, max);
}

std::int64_t settings::read_integer(const std::string& key, std::int64_t fallback,
                                    std::int64_t min, std::int64_t max) {
  const auto* v = find(key);
  const auto* i = value_as<std::int64_t>(v, setting_name(key), "an integer");
  if (i == nullptr)
    return fallback;
  if (*i < min || *i > max)
    throw out_of_range(setting_name(key), *v, *i, min, max);
  return *i;
}

std::int64_t settings::integer(const std::string& key, std::int64_t min, std::int64_t max) {
  declare({key, setting_declaration::type::integer, true, 0, static_cast<double>(min),
           static_cast<double>(max)});
  if (values_.count(key) == 0) {
    refuse_near_miss(values_, read_, key, owner());
    throw config_error(where_, owner() + " needs the integer setting '" + key + "'");
  }
  return read_integer(key, 0, min, max);
}

double settings::number(const std::string& key, double fallback, double min, double max) {
  declare({key, setting_declaration::type::number, false, fallback, min, max});
  return read_number(key, fallback, min, max);
}

double settings::read_number(const std::string& key, double fallback, double min, double max) {
  const auto* v = find(key);
  if (v == nullptr)
    return fallback;
  double x = 0;
  if (const auto* d = std::get_if<double>(&v->value))
    x = *d;
  else if (const auto* i = std::get_if<std::int64_t>(&v->value))
    x = static_cast<double>(*i);
  else
    throw config_error(v->where, setting_name(key) + ": expected a number, found " + type_name(*v));
  if (!(x >= min && x <= max))
    throw out_of_range(setting_name(key), *v, x, min, max);
  return x;
}

double settings::number(const std::string& key, double min, double max) {
  declare({key, setting_declaration::type::number, true, 0, min, max});
  if (values_.count(key) == 0) {
    refuse_near_miss(values_, read_, key, owner());
    throw config_error(where_, owner() + " needs the number setting '" + key + "'");
  }
  return read_number(key, 0, min, max);
}

bool settings::boolean(const std::string& key, bool fallback) {
  declare({key, setting_declaration::type::boolean, false, fallback ? 1.0 : 0.0, 0, 1});
  const auto* b = value_as<bool>(find(key), setting_name(key), "a boolean");
  return b == nullptr ? fallback : *b;
}

std::string settings::text(const std::string& key, const std::string& fallback,
                           const std::vector<std::string>& allowed) {
  declare({key, setting_declaration::type::text, false, 0, 0, 0});
  const auto* v = find(key);
  const auto* s = value_as<std::string>(v, setting_name(key), "a string");
  if (s == nullptr)
    return fallback;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
    throw config_error(v->where, setting_name(key) + ": unknown value " + quote_user_text(*s) +
                                     did_you_mean(*s, allowed) + " (valid: " + comma_list(allowed) +
                                     ")");
  }
  return *s;
}

void settings::finish() const {
  std::vector<std::string> known(read_.begin(), read_.end());
  for (const auto& [key, value] : values_) {
    if (read_.count(key))
      continue;
    std::string hint = did_you_mean(key, known);
    if (hint.empty()) {
      const auto list = comma_list(known);
      hint = list.empty() ? " (this " + noun_ + " takes no settings)" : " (valid: " + list + ")";
    }
    throw config_error(value.where, "unknown setting '" + key + "' for " + owner() + hint);
  }
}

}  // namespace troupe
