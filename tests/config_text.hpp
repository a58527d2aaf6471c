// config_text.hpp: pieces of run-config text that many tests write: a [data] section over
// synthetic data and [[model.layers]] entries.
//
// Each test that runs or parses a whole config used to spell these sections out line by
// line; they differ only in their numbers. The helpers write the same TOML (same keys, same
// order) from those numbers, so a test states what it varies and nothing else.
//
// Header-only and test-only. Not for configs whose error positions (line:column) a test
// checks: those keep their literal text, where a reader can count the lines.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::test {

/// The numbers of a [data] section with source = "synthetic".
struct synthetic_data {
  std::int64_t batch_size = 0;
  std::int64_t train = 0;
  std::int64_t test = 0;
  std::int64_t features = 0;
  std::int64_t classes = 0;
  /// Written only when positive (else the config's default applies).
  std::int64_t eval_batch_size = 0;
};

/// `[data]` with source = "synthetic" and the numbers of `d`.
inline std::string data_section(const synthetic_data& d) {
  std::string text = "\n[data]\nsource = \"synthetic\"\nbatch_size = " +
                     std::to_string(d.batch_size) + "\n";
  if (d.eval_batch_size > 0)
    text += "eval_batch_size = " + std::to_string(d.eval_batch_size) + "\n";
  return text + "synthetic_train = " + std::to_string(d.train) +
         "\nsynthetic_test = " + std::to_string(d.test) +
         "\nsynthetic_features = " + std::to_string(d.features) +
         "\nsynthetic_classes = " + std::to_string(d.classes) + "\n";
}

/// One `[[model.layers]]` entry of type `type`; `keys` are further lines (`key = value`,
/// each ending in a newline).
inline std::string layer(const std::string& type, const std::string& keys = "") {
  return "[[model.layers]]\ntype = \"" + type + "\"\n" + keys;
}

/// A linear layer with `out` outputs.
inline std::string linear(std::int64_t out) {
  return layer("linear", "out = " + std::to_string(out) + "\n");
}

}  // namespace troupe::test
