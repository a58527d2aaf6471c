// settings.hpp: reading the settings of one config table, with types and ranges checked.
//
// A layer's [[model.layers]] table and a custom actor's [[actor]] table carry settings the
// runtime does not know: the layer or actor kind reads them itself, through this class,
// when it is created. Every accessor records the key it read; finish() then refuses every
// key nobody read, with the nearest valid name. Each error is a config_error at the
// value's file:line:col:
//
//     layer 'linear' setting 'out': expected an integer, found a string
//     unknown setting 'outs' for layer 'linear'; did you mean 'out'?
//
// No TOML here: the config loader (runtime/config/) hands over scalar values with their
// positions. Not here: tables inside tables, arrays (a setting is one scalar).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "troupe/error.hpp"

namespace troupe {

/// One scalar setting of a config table, with its position.
struct setting_value {
  std::variant<std::int64_t, double, bool, std::string> value;
  source_position where;
};

using setting_map = std::map<std::string, setting_value>;

/// A setting as its kind reads it: the key, its type, whether it is required, its default
/// and its range (integers and numbers; a boolean's default is 0 or 1). What a tool that
/// varies settings needs (check-layer checks a layer at settings other than its defaults).
struct setting_declaration {
  enum class type { integer, number, boolean, text };
  std::string key;
  type kind = type::number;
  bool required = false;
  double fallback = 0;
  double min = 0;
  double max = 0;
};

class settings {
 public:
  /// What the table configures, for messages: `noun` "layer" and `name` "linear" give
  /// "layer 'linear' setting 'out'"; a custom actor's are "actor" and its [[actor]] name.
  /// `where` is the table's position (for settings that are missing).
  settings(std::string noun, std::string name, setting_map values, source_position where);

  /// "layer 'linear'".
  std::string owner() const;
  const source_position& where() const { return where_; }

  /// An integer in [min, max], or `fallback` when absent.
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                       std::int64_t max);
  /// A required integer in [min, max]: missing is an error at the table.
  std::int64_t integer(const std::string& key, std::int64_t min, std::int64_t max);
  /// A number (an integer is taken as one) in [min, max], or `fallback` when absent.
  double number(const std::string& key, double fallback, double min, double max);
  /// A required number in [min, max].
  double number(const std::string& key, double min, double max);
  bool boolean(const std::string& key, bool fallback);
  /// A string, one of `allowed` unless that is empty, or `fallback` when absent.
  std::string text(const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& allowed);
  /// Throws config_error for every key present that no accessor read ("unknown setting
  /// 'outs' for layer 'linear'; did you mean 'out'?").
  void finish() const;

  /// True if the table holds `key` (whichever form of a setting a kind reads).
  bool has(const std::string& key) const { return values_.count(key) != 0; }

  /// The position of a key's value (or of the table if absent).
  source_position position(const std::string& key) const;

  /// Every setting read so far, as its accessor declared it, in the order first read.
  const std::vector<setting_declaration>& declared() const { return declared_; }

 private:
  const setting_value* find(const std::string& key);
  void declare(setting_declaration declaration);
  std::int64_t read_integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                            std::int64_t max);
  double read_number(const std::string& key, double fallback, double min, double max);
  /// "layer 'linear' setting 'out'": how every message about one setting starts.
  std::string setting_name(const std::string& key) const;

  std::string noun_;
  std::string name_;
  setting_map values_;
  source_position where_;
  std::set<std::string> read_;
  std::vector<setting_declaration> declared_;
};

}  // namespace troupe
