// config.cpp: reads the topology config (TOML, shorthand or explicit) into run_config and
// checks it.
//
// The work is split in two layers. section_reader knows how to read one key of one table
// with its type and range checked, and records each key it is asked for; the read_*
// functions below are then a list of "this key, this range", ending in finish(), which
// rejects every key nobody read (Note [keys as read]). Every error is a config_error at the
// offending key or value (toml++ keeps source positions).
//
// Note [keys as read]
// The keys a section has are the keys its read_* function reads: listed once, where they
// are read, as layer_settings does for a layer's settings (runtime/model/layer.hpp). A key
// added to a read_* function is accepted without a second list to update, and a key only
// listed cannot exist. The price: finish() must come after the last read of the section,
// so an unknown key is reported after the errors of the keys read before it; each read_*
// function ends in finish(), and a test gives every section an unknown key.
//
// Deliberately not here: layer types and their settings (the layer registry checks them),
// what the keys of [[actor]] / [[wire]] tables mean (topology_from_explicit() reads them),
// and cross-section checks such as "data * pipeline devices" (the planner checks them,
// where it knows the whole graph).
#include "runtime/config/config.hpp"
#include "runtime/config/precision.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

// Debian also ships toml++ as a shared library (its pkg-config/CMake files set
// TOML_HEADER_ONLY=0); troupe uses the header-only form, so nothing extra is linked and
// the toml++ types never leave this file.
#ifndef TOML_HEADER_ONLY
#define TOML_HEADER_ONLY 1
#endif
// Note [toml++'s assertions]
// toml++ 3.3 states some expectations of its parser as TOML_ASSERT_ASSUME: an assert()
// without NDEBUG, and with NDEBUG under clang a __builtin_assume, undefined behaviour when
// false. The config fuzzer broke three of them with bad input (a table header "[#", a NUL
// after '[', a value terminator where an array's value starts); after each, toml++'s code
// reports a parse error. What troupe ships (g++ 12 with NDEBUG, which has no
// __builtin_assume) compiles them to nothing, and so does every other build of this file
// (the sanitizer and fuzzer builds, a clang release build): they then test what ships, and
// no build gets undefined behaviour from them. toml++ lets TOML_ASSERT be defined first;
// NDEBUG is hidden while it is included so that TOML_ASSERT_ASSUME uses that definition.
// (check_toml_limits still refuses the inputs found, with a better message.)
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) static_cast<void>(0)
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/config/toml_limits.hpp"
#include "runtime/core/device_name.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// ---- small formatting helpers ----

std::string type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::string format_number(double value) { return shortest_text(value); }

std::string join(const std::vector<std::string>& words, const char* quote = "'") {
  std::string out;
  for (const auto& word : words)
    out += (out.empty() ? "" : ", ") + std::string(quote) + word + quote;
  return out;
}

std::vector<std::string> name_parts(const std::string& name) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : name + "_") {
    if (c == '_' || c == '-') {
      if (!part.empty())
        parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  return parts;
}

// did_you_mean() catches typos by edit distance; a name that adds or drops a word
// ("lr_rate" for "lr", "warmup" for "warmup_steps") is too far for it, so whole words of
// the name are matched too.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  auto hint = did_you_mean(word, candidates);
  if (!hint.empty())
    return hint;
  auto word_parts = name_parts(word);
  for (const auto& candidate : candidates) {
    auto candidate_parts = name_parts(candidate);
    bool shares = std::find(word_parts.begin(), word_parts.end(), candidate) != word_parts.end() ||
                  std::find(candidate_parts.begin(), candidate_parts.end(), word) !=
                      candidate_parts.end();
    if (shares)
      return "; did you mean '" + candidate + "'?";
  }
  return {};
}

// ---- ranges, with the words an error message uses for them ----

struct integer_range {
  std::int64_t low;
  std::int64_t high = std::numeric_limits<std::int64_t>::max();

  bool contains(std::int64_t value) const { return value >= low && value <= high; }
  std::string describe() const {
    if (high == std::numeric_limits<std::int64_t>::max())
      return ">= " + std::to_string(low);
    return "in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
  }
};

integer_range at_least(std::int64_t low) { return {low}; }

struct number_range {
  double low;
  bool low_open;                                        // "> low" rather than ">= low"
  double high = std::numeric_limits<double>::infinity();  // always open

  bool contains(double value) const {
    return std::isfinite(value) && (low_open ? value > low : value >= low) && value < high;
  }
  std::string describe() const {
    if (std::isinf(high) && std::isinf(low))
      return "that is finite";
    if (std::isinf(high))
      return (low_open ? "> " : ">= ") + format_number(low);
    return "in " + std::string(low_open ? "(" : "[") + format_number(low) + ", " +
           format_number(high) + ")";
  }
};

number_range above(double low) { return {low, true}; }
number_range not_below(double low) { return {low, false}; }
number_range unit_interval() { return {0.0, false, 1.0}; }  // [0, 1)

// ---- positions and table entries ----

source_position position_in(const std::string& file, const toml::source_region& region) {
  // A key or value set on the command line (--set) names the --set.
  const auto& where = region.path && !region.path->empty() && *region.path != file ? *region.path
                                                                                   : file;
  return {where, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
}

// toml::table is ordered by key name; errors should come in the order a user reads the file.
std::vector<std::pair<const toml::key*, const toml::node*>> entries_in_order(
    const toml::table& table) {
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (auto&& [key, node] : table)
    entries.emplace_back(&key, &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

// ---- section_reader: one fixed table ([run], [optimizer.schedule], ...) ----

class section_reader {
 public:
  /// `table` may be null (the section is absent): every read then keeps its default and
  /// reports `fallback` as the position.
  section_reader(const toml::table* table, std::string name, std::string file,
                 source_position fallback)
      : table_(table), name_(std::move(name)), file_(std::move(file)) {
    where_ = table_ ? position_in(file_, table_->source()) : std::move(fallback);
  }

  const source_position& where() const { return where_; }
  const std::string& file() const { return file_; }
  /// Every lookup records its key as one the section has (Note [keys as read]).
  const toml::node* find(const std::string& key) const {
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
      keys_.push_back(key);
    return table_ ? table_->get(key) : nullptr;
  }

  /// Rejects the first key, in file order, that no read asked for, naming the nearest of
  /// those that were. Call once every key of the section has been read.
  void finish() const {
    if (!table_)
      return;
    for (const auto& [key, node] : entries_in_order(*table_)) {
      const auto& name = key->str();
      if (std::find(keys_.begin(), keys_.end(), name) != keys_.end())
        continue;
      auto hint = suggestion(std::string(name), keys_);
      if (hint.empty())
        hint = "; valid keys: " + join(keys_, "");
      throw config_error(position_in(file_, key->source()),
                         "unknown key " + quote_user_text(name) + " in [" + name_ + "]" + hint);
    }
  }
  source_position position(const toml::node& node) const {
    return position_in(file_, node.source());
  }
  /// Where a key present in the table is written (the key itself, not its value).
  source_position key_position(const std::string& key) const {
    auto found = table_->find(key);
    TROUPE_CHECK(found != table_->end(), "key_position of absent key '" << key << "'");
    return position_in(file_, found->first.source());
  }

  [[noreturn]] void fail(const toml::node& node, const std::string& key,
                         const std::string& message) const {
    throw config_error(position(node), "[" + name_ + "] " + key + ": " + message);
  }
  [[noreturn]] void fail_type(const toml::node& node, const std::string& key,
                              const std::string& expected) const {
    fail(node, key, "expected " + expected + ", found " + type_name(node.type()));
  }

  // Each read leaves `out` alone when the key is absent and returns where the value came
  // from (the value, or the section when defaulted).
  source_position read(const std::string& key, std::int64_t& out, integer_range range) const {
    const auto* node = find(key);
    if (!node)
      return where_;
    out = integer(*node, key, range);
    return position(*node);
  }

  /// An integer checked against `range`; for array elements too.
  std::int64_t integer(const toml::node& node, const std::string& key, integer_range range) const {
    if (!node.is_integer())
      fail_type(node, key, "an integer");
    auto value = node.as_integer()->get();
    if (!range.contains(value))
      fail(node, key, "expected an integer " + range.describe() + ", found " + std::to_string(value));
    return value;
  }

  source_position read(const std::string& key, double& out, number_range range) const {
    const auto* node = find(key);
    if (!node)
      return where_;
    out = number(*node, key, range);
    return position(*node);
  }

  /// A number (integers accepted) checked against `range`; for array elements too.
  double number(const toml::node& node, const std::string& key, number_range range) const {
    double value = 0.0;
    if (node.is_integer())
      value = static_cast<double>(node.as_integer()->get());
    else if (node.is_floating_point())
      value = node.as_floating_point()->get();
    else
      fail_type(node, key, "a number");
    if (!range.contains(value))
      fail(node, key, "expected a number " + range.describe() + ", found " + format_number(value));
    return value;
  }

  source_position read(const std::string& key, bool& out) const {
    return read_exact(key, out, "a boolean (true or false)");
  }

  source_position read(const std::string& key, std::string& out) const {
    return read_exact(key, out, "a string");
  }

  /// A value of exactly the TOML type of T (bool, std::string); `what` names that type in
  /// the message when the file holds another.
  template <class T>
  source_position read_exact(const std::string& key, T& out, const char* what) const {
    const auto* node = find(key);
    if (!node)
      return where_;
    auto value = node->value_exact<T>();
    if (!value)
      fail_type(*node, key, what);
    out = std::move(*value);
    return position(*node);
  }

  /// A string that must be one of `valid`; `what` names it in messages ("optimizer type").
  source_position read_choice(const std::string& key, std::string& out, const std::string& what,
                              const std::vector<std::string>& valid) const {
    std::string value = out;
    auto at = read(key, value);
    if (std::find(valid.begin(), valid.end(), value) == valid.end())
      throw config_error(at, "unknown " + what + " " + quote_user_text(value) +
                                 suggestion(value, valid) + " (expected one of " + join(valid) +
                                 ")");
    out = value;
    return at;
  }

  /// A name that must be one of an enum's (runtime/config/choices.hpp), parsed here once;
  /// `what` names it in messages ("optimizer type").
  template <class Enum>
  source_position read_enum(const std::string& key, Enum& out, const std::string& what) const {
    std::string value = to_string(out);
    auto at = read(key, value);
    auto parsed = parse_enum<Enum>(value);
    if (!parsed) {
      auto valid = enum_names<Enum>();
      throw config_error(at, "unknown " + what + " " + quote_user_text(value) +
                                 suggestion(value, valid) + " (expected one of " + join(valid) +
                                 ")");
    }
    out = *parsed;
    return at;
  }

  /// A sub-table such as [optimizer.schedule]; null when absent.
  const toml::table* sub_table(const std::string& key) const {
    const auto* node = find(key);
    if (node && !node->is_table())
      fail_type(*node, key, "a table");
    return node ? node->as_table() : nullptr;
  }

 private:
  const toml::table* table_;
  std::string name_;
  std::string file_;
  mutable std::vector<std::string> keys_;  // every key looked up, in the order first read
  source_position where_;
};

// ---- the sections ----

// Note [relative paths]
// One rule: a path written in a config ([data] path and its files, [run] metrics, trace,
// checkpoint and plugins, [model] init_from, [cluster] secret_file and TLS files) is
// relative to the config file's directory, wherever troupe is started from; a path given
// on the command line (--metrics, --trace, --checkpoint, --resume) or to a Python call is
// relative to the working directory, as users expect of command-line paths. A default
// nobody wrote ([run] metrics absent: troupe-metrics.jsonl) is the command line's.
std::string in_config_directory(const std::string& directory, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute())
    return path;
  return (fs::path(directory.empty() ? "." : directory) / path).lexically_normal().string();
}

run_section read_run(const section_reader& r, const std::string& directory) {
  run_section s;
  s.where = r.where();
  r.read("epochs", s.epochs, integer_range{1, limits::max_steps});
  r.read("steps", s.steps, integer_range{0, limits::max_steps});
  std::int64_t seed = static_cast<std::int64_t>(s.seed);
  r.read("seed", seed, at_least(0));
  s.seed = static_cast<std::uint64_t>(seed);
  r.read("metrics", s.metrics);
  r.read("log_every", s.log_every, at_least(1));
  r.read("evaluate", s.evaluate);
  r.read("trace", s.trace);
  r.read("trace_capacity", s.trace_capacity, at_least(16));
  r.read("watchdog", s.watchdog, number_range{0, false, limits::max_seconds});
  r.read("checkpoint", s.checkpoint);
  r.read("checkpoint_every", s.checkpoint_every, at_least(0));
  r.read("checkpoint_keep", s.checkpoint_keep, at_least(1));
  r.read("checkpoint_keep_best", s.checkpoint_keep_best);
  r.read("tf32", s.tf32);
  r.read("fuse_layers", s.fuse_layers);
  std::string cpu_gemm = "auto";
  r.read_choice("cpu_gemm", cpu_gemm, "CPU GEMM library", {"auto", "onednn", "openblas"});
  std::string precision = "fp32";
  s.precision_where = r.read_choice("precision", precision, "precision", {"fp32", "bf16", "auto"});
  s.precision = resolve_precision(precision, "[run] precision", s.precision_where, this_cpu_bf16());
  s.cpu_gemm = cpu_gemm == "onednn"     ? kernels::cpu_gemm::onednn
               : cpu_gemm == "openblas" ? kernels::cpu_gemm::openblas
                                        : kernels::cpu_gemm::automatic;
  if (r.find("metrics"))  // Note [relative paths]
    s.metrics = in_config_directory(directory, s.metrics);
  s.trace = in_config_directory(directory, s.trace);
  s.checkpoint = in_config_directory(directory, s.checkpoint);
  if (const auto* plugins = r.find("plugins")) {
    const auto* array = plugins->as_array();
    if (!array)
      r.fail(*plugins, "plugins", "expected an array of plugin paths like [\"libmy_layers.so\"], "
                                  "found " + type_name(plugins->type()));
    for (const auto& element : *array) {
      const auto* path = element.as_string();
      if (!path || path->get().empty())
        r.fail(element, "plugins", "expected a plugin path, found " +
                                       (path ? std::string("an empty string") : type_name(element.type())));
      s.plugins.push_back(setting_value{path->get(), r.position(element)});
    }
  }
  r.finish();
  return s;
}

// Checked here rather than when loading, so that a typo in a path fails before anything
// is spawned, at the line that holds it.
void check_fashion_mnist_directory(const data_section& s) {
  const std::string hint =
      "; install Debian's dataset-fashion-mnist (scripts/install-deps.sh does) or set [data] "
      "source = \"synthetic\"";
  std::error_code error;
  if (!fs::is_directory(s.path, error))
    throw config_error(s.path_where, "[data] path: " + quote_user_path(s.path) +
                                         " is not a directory holding "
                                         "the Fashion-MNIST files" +
                                         hint);
  std::vector<std::string> missing;
  for (const auto& name : fashion_mnist_file_names())
    if (find_data_file(s.path, name).empty())
      missing.push_back(name + "(.gz)");
  if (!missing.empty())
    throw config_error(s.path_where, "[data] path: directory " + quote_user_path(s.path) +
                                         " has no " + join(missing) + hint);
}

/// [data] scale, mean or std: a number, or an array of one a feature.
void read_numbers(const section_reader& r, const std::string& key, number_range range,
                  std::vector<double>& out) {
  const auto* node = r.find(key);
  if (node == nullptr)
    return;
  out.clear();
  if (!node->is_array()) {
    out.push_back(r.number(*node, key, range));
    return;
  }
  const auto& array = *node->as_array();
  if (array.empty() || array.size() > static_cast<std::size_t>(limits::max_sample_features))
    r.fail(*node, key,
           "expected a number or an array of one a feature (1 to " +
               std::to_string(limits::max_sample_features) + " numbers), found " +
               std::to_string(array.size()) + " values");
  for (const auto& element : array)
    out.push_back(r.number(element, key, range));
}

/// The npy source's files (relative to the config's directory) and normalisation.
/// A string or an array of strings (csv's target and features): the names, in order.
std::vector<std::string> read_names(const section_reader& r, const std::string& key,
                                    const toml::node& node) {
  std::vector<std::string> names;
  if (node.is_string()) {
    names.push_back(node.as_string()->get());
  } else if (node.is_array() && !node.as_array()->empty()) {
    for (const auto& entry : *node.as_array()) {
      if (!entry.is_string())
        r.fail(entry, key, "expected column names (strings), found " + type_name(entry.type()));
      names.push_back(entry.as_string()->get());
    }
  } else {
    r.fail_type(node, key, "a column name or an array of them");
  }
  for (const auto& name : names)
    if (name.empty())
      r.fail(node, key, "expected column names, found an empty string");
  return names;
}

/// source = "csv": the test table, the target and feature columns and the delimiter.
void read_csv_settings(const section_reader& r, const std::string& directory, data_section& s) {
  r.read("test_path", s.test_path);
  if (const auto* node = r.find("test_path")) {
    if (s.test_path.empty())
      r.fail(*node, "test_path", "expected a file, found an empty string");
    fs::path path(s.test_path);
    if (path.is_relative())
      s.test_path =
          in_config_directory(directory, path);
  }
  if (const auto* node = r.find("target"))
    s.target_columns = read_names(r, "target", *node);
  std::string delimiter = ",";
  r.read("delimiter", delimiter);
  if (delimiter.size() != 1 || delimiter == "\"" || delimiter == "\n" || delimiter == "\r")
    r.fail(*r.find("delimiter"), "delimiter",
           "expected one character other than a quote or a line end (\",\", \";\", \"\\t\"), "
           "found " + quote_user_text(delimiter));
  s.delimiter = delimiter.front();
}

void read_npy_settings(const section_reader& r, const std::string& directory, data_section& s) {
  for (auto [key, out] : {std::pair{"features", &s.features}, std::pair{"targets", &s.targets},
                          std::pair{"test_features", &s.test_features},
                          std::pair{"test_targets", &s.test_targets}}) {
    if (std::string(key) == "features" && r.find(key) && r.find(key)->is_array()) {
      s.feature_columns = read_names(r, key, *r.find(key));  // csv's columns
      continue;
    }
    r.read(key, *out);
    if (s.source == data_source::npz || s.source == data_source::safetensors) {
      if (r.find(key) && out->empty())
        r.fail(*r.find(key), key, "expected an array's name, found an empty string");
      continue;  // the name of an array in path's file, not a file
    }
    if (const auto* node = r.find(key)) {
      if (out->empty())
        r.fail(*node, key, "expected a .npy file, found an empty string");
      fs::path path(*out);
      if (path.is_relative())
        *out = in_config_directory(directory, path);
    }
  }
  const auto any = -std::numeric_limits<double>::infinity();
  read_numbers(r, "scale", number_range{any, false}, s.scale);
  read_numbers(r, "mean", number_range{any, false}, s.mean);
  read_numbers(r, "std", number_range{0, true}, s.std);
  std::string normalize = "none";
  const auto normalize_where =
      r.read_choice("normalize", normalize, "normalization", {"none", "standard"});
  s.standardize = normalize == "standard";
  const bool arrays = s.source == data_source::npy || s.source == data_source::npz ||
                      s.source == data_source::safetensors;
  if (s.standardize && !arrays && s.source != data_source::csv)
    throw config_error(normalize_where, "[data] normalize = \"standard\" is for source = \"npy\", "
                                        "\"npz\", \"safetensors\" or \"csv\"; \"" +
                                        std::string(to_string(s.source)) +
                                        "\" normalises its data itself");
  if (s.standardize)
    for (const char* key : {"scale", "mean", "std"})
      if (r.find(key))
        throw config_error(normalize_where,
                           std::string("[data] normalize = \"standard\" computes each feature's "
                                       "mean and std from the training split; remove ") +
                               key + " (or normalize)");
}

/// source = "tokens": the ids' type, the vocabulary's size and the training windows.
void read_token_settings(const section_reader& r, data_section& s) {
  r.read_choice("dtype", s.token_dtype, "token type", {"uint16", "uint32"});
  r.read("vocab", s.vocabulary, integer_range{2, std::int64_t{1} << 24});
  std::string windows = "random";
  const auto windows_where = r.read_choice("windows", windows, "windows", {"random", "tiled"});
  s.random_windows = windows == "random";
  if (s.source == data_source::tokens && s.random_windows && !s.shuffle)
    throw config_error(r.find("windows") ? windows_where : r.key_position("shuffle"),
                       "[data] shuffle = false reads the windows in order, but windows = "
                       "\"random\" (the default) draws them at random; set windows = \"tiled\"");
}

/// source = "images": the size, channels, workers and augmentation; pixels scaled by 1/255
/// unless scale says otherwise.
void read_image_settings(const section_reader& r, data_section& s) {
  const auto side = integer_range{1, limits::max_image_side};
  if (const auto* node = r.find("size")) {
    if (node->is_integer()) {
      r.read("size", s.image_height, side);
      s.image_width = s.image_height;
    } else if (node->is_array() && node->as_array()->size() == 2) {
      const auto& pair = *node->as_array();
      s.image_height = r.integer(pair[0], "size", side);
      s.image_width = r.integer(pair[1], "size", side);
    } else {
      r.fail_type(*node, "size", "[H, W] (two integers) or one integer for a square");
    }
  }
  const auto channels_where = r.read("channels", s.channels, integer_range{1, 3});
  if (s.channels == 2)
    throw config_error(channels_where, "[data] channels: expected 1 (gray) or 3 (RGB), found 2");
  r.read("workers", s.workers, integer_range{0, 64});
  r.read("crop_padding", s.crop_padding, integer_range{0, 1024});
  r.read("flip", s.flip);
  if (s.source != data_source::images)
    return;
  if (!r.find("scale"))
    s.scale = {1.0 / 255};  // ToTensor's
  for (auto [key, values] : {std::pair{"scale", &s.scale}, std::pair{"mean", &s.mean},
                             std::pair{"std", &s.std}})
    if (values->size() != 1 && static_cast<std::int64_t>(values->size()) != s.channels)
      throw config_error(r.key_position(key),
                         std::string("[data] ") + key + ": " + std::to_string(values->size()) +
                             " values for images of " + std::to_string(s.channels) +
                             " channel(s); give one value, or one a channel");
  const auto pixels = s.channels * s.image_height * s.image_width;
  if (pixels > limits::max_sample_features)
    throw config_error(r.key_position("size"),
                       "[data] size: " + std::to_string(s.channels) + " x " +
                           std::to_string(s.image_height) + " x " + std::to_string(s.image_width) +
                           " values a sample, more than the limit of " +
                           std::to_string(limits::max_sample_features));
}

/// A source of a training `path` and a `test_path` (files, or folders): path given, test_path
/// or [data] validation, and each there. The `_is` texts say what each is, for the messages.
void check_split_paths(const section_reader& r, const data_section& s, bool folders,
                       const std::string& path_is, const std::string& test_is,
                       const std::string& validation_is) {
  const std::string needs = std::string("[data] source = \"") + to_string(s.source) + "\" needs ";
  if (!r.find("path"))
    throw config_error(s.source_where, needs + "path (" + path_is + ") and test_path (" +
                                           test_is + ", or [data] validation instead)");
  if (s.test_path.empty() && s.validation == 0)
    throw config_error(s.source_where, needs + "test_path (" + test_is +
                                           ") or [data] validation (" + validation_is + ")");
  for (auto [key, path] : {std::pair{"path", &s.path}, std::pair{"test_path", &s.test_path}}) {
    std::error_code error;
    if (!path->empty() &&
        !(folders ? fs::is_directory(*path, error) : fs::is_regular_file(*path, error)))
      throw config_error(r.key_position(key),
                         std::string("[data] ") + key + ": " + quote_user_path(*path) +
                             (folders ? " is not a folder" : " is not a file"));
  }
}

/// source = "npy" names its four files, and each is there.
void check_npy_files(const section_reader& r, const data_section& s) {
  if (s.test_features.empty() != s.test_targets.empty())
    throw config_error(s.source_where, "[data] source = \"npy\": test_features and test_targets "
                                       "go together (the test split), or neither");
  for (auto [key, path] : {std::pair{"features", &s.features}, std::pair{"targets", &s.targets},
                           std::pair{"test_features", &s.test_features},
                           std::pair{"test_targets", &s.test_targets}}) {
    if (path->empty() && s.validation > 0 && std::string(key).rfind("test_", 0) == 0)
      continue;  // the held-out validation split is evaluated instead
    if (path->empty())
      throw config_error(s.source_where,
                         std::string("[data] source = \"npy\" needs ") + key +
                             " (a .npy file; also features, targets, test_features and "
                             "test_targets: the training and the test split, or [data] "
                             "validation instead of the test split)");
    std::error_code error;
    if (!fs::is_regular_file(*path, error))
      throw config_error(r.key_position(key), std::string("[data] ") + key + ": " +
                                                  quote_user_path(*path) + " is not a file");
  }
}

/// source = "csv" names its two tables, each there, and its target columns.
void check_csv_files(const section_reader& r, const data_section& s) {
  const std::string needs = "[data] source = \"csv\" needs ";
  const std::string what = " (path and test_path: the training and the test table; target: "
                           "the target column or columns)";
  if (!r.find("path"))
    throw config_error(s.source_where, needs + "path" + what);
  if (s.test_path.empty() && s.validation == 0)
    throw config_error(s.source_where, needs + "test_path" + what + ", or [data] validation");
  if (s.target_columns.empty())
    throw config_error(s.source_where, needs + "target" + what);
  for (auto [key, path] : {std::pair{"path", &s.path}, std::pair{"test_path", &s.test_path}}) {
    if (path->empty())
      continue;
    std::error_code error;
    if (!fs::is_regular_file(*path, error))
      throw config_error(r.key_position(key), std::string("[data] ") + key + ": " +
                                                  quote_user_path(*path) + " is not a file");
  }
}

data_section read_data(const section_reader& r, const std::string& directory) {
  data_section s;
  s.where = r.where();
  s.source_where = r.read_enum("source", s.source, "data source");
  s.path_where = r.read("path", s.path);
  if (const auto* node = r.find("path")) {
    if (s.path.empty())
      r.fail(*node, "path", "expected a directory or a file, found an empty string");
    fs::path path(s.path);
    if (path.is_relative())
      s.path = in_config_directory(directory, path);
  }
  // At most a data set's samples, so that batch arithmetic (ceil(N / B)) cannot overflow.
  r.read("batch_size", s.batch_size, integer_range{1, limits::max_samples});
  r.read("eval_batch_size", s.eval_batch_size, integer_range{1, limits::max_samples});
  r.read("shuffle", s.shuffle);
  r.read("prefetch", s.prefetch, integer_range{1, 64});
  r.read("context", s.context, integer_range{1, 1 << 16});
  r.read("validation_every", s.validation_every, integer_range{2, limits::max_samples});
  read_npy_settings(r, directory, s);
  read_csv_settings(r, directory, s);
  read_token_settings(r, s);
  read_image_settings(r, s);
  s.validation_where = r.read("validation", s.validation, number_range{0.0, true, 1.0});
  if (s.validation > 0 && s.source == data_source::text)
    throw config_error(s.validation_where,
                       "[data] validation holds out a share of the samples; a text source "
                       "holds out every validation_every-th record instead");
  if (s.source == data_source::text && !r.find("path"))
    s.path = text_default_path;
  // The limits of make_synthetic (runtime/data/dataset.hpp), stated where they are read.
  const auto train_where =
      r.read("synthetic_train", s.synthetic_train, integer_range{1, limits::max_samples});
  const auto test_where =
      r.read("synthetic_test", s.synthetic_test, integer_range{1, limits::max_samples});
  const auto features_where = r.read("synthetic_features", s.synthetic_features,
                                     integer_range{1, limits::max_sample_features});
  const auto classes_where =
      r.read("synthetic_classes", s.synthetic_classes, integer_range{2, limits::max_samples});
  r.finish();
  // Each product is one tensor's size: checked, so that it neither overflows nor asks for
  // more memory than any machine has (Note [input limits]).
  for (auto [count, where, what] :
       {std::tuple{s.synthetic_train, train_where, "synthetic_train"},
        std::tuple{s.synthetic_test, test_where, "synthetic_test"},
        std::tuple{s.synthetic_classes, classes_where, "synthetic_classes"}}) {
    const auto elements = checked_multiply(count, s.synthetic_features);
    if (s.source == data_source::synthetic &&
        (!elements || *elements > limits::max_tensor_elements))
      throw config_error(
          r.find(what) ? where : features_where,
          std::string("[data] ") + what + " x synthetic_features = " + std::to_string(count) +
              " x " + std::to_string(s.synthetic_features) + " values, more than the limit of " +
              std::to_string(limits::max_tensor_elements) + " values in one tensor");
  }
  if (s.source == data_source::fashion_mnist)
    check_fashion_mnist_directory(s);
  if (s.source == data_source::npy)
    check_npy_files(r, s);
  if (s.source == data_source::csv)
    check_csv_files(r, s);
  if (s.source == data_source::tokens)
    check_split_paths(r, s, false, "a token file: ids as uint16 or uint32, or a .npy",
                      "a token file to evaluate on", "the last share of path's tokens");
  if (s.source == data_source::images)
    check_split_paths(r, s, true, "a folder of class folders of PNG or JPEG images",
                      "a folder like path's, to evaluate on", "a share of path's images");
  if (s.source == data_source::npz || s.source == data_source::safetensors)
    check_split_paths(r, s, false,
                      "a file holding the arrays features and targets name, \"x\" and \"y\" "
                      "unless they say otherwise",
                      "a file like path's, to evaluate on", "a share of path's samples");
  if (s.source == data_source::text) {
    std::error_code error;
    if (!fs::is_regular_file(s.path, error) && !fs::is_directory(s.path, error))
      throw config_error(r.find("path") ? s.path_where : s.source_where,
                         "[data] path: " + quote_user_path(s.path) +
                             " is neither a text file nor a directory of them" +
                             (s.path == text_default_path
                                  ? " (the fortunes package installs it: apt-get install fortunes)"
                                  : ""));
  }
  return s;
}

/// A scalar TOML value as a setting; `what` names the key in the error for anything else.
setting_value read_scalar(const toml::node& value, const source_position& key_where,
                          const std::string& file, const std::string& what) {
  setting_value setting;
  setting.where = key_where;
  if (value.is_integer())
    setting.value = value.as_integer()->get();
  else if (value.is_floating_point())
    setting.value = value.as_floating_point()->get();
  else if (value.is_boolean())
    setting.value = value.as_boolean()->get();
  else if (value.is_string())
    setting.value = value.as_string()->get();
  else
    throw config_error(position_in(file, value.source()),
                       what + ": expected a scalar (integer, float, boolean or string), found " +
                           type_name(value.type()));
  return setting;
}

layer_config read_layer(const section_reader& model, const toml::node& node, std::size_t index) {
  const std::string name = "[[model.layers]] #" + std::to_string(index + 1);
  if (!node.is_table())
    model.fail_type(node, "layers #" + std::to_string(index + 1), "a table ([[model.layers]])");
  const auto& table = *node.as_table();
  layer_config layer;
  layer.where = model.position(table);
  const auto* type = table.get("type");
  if (!type)
    throw config_error(layer.where, name + ": missing key 'type' (the layer's name, e.g. "
                                           "type = \"linear\")");
  if (!type->is_string() || type->as_string()->get().empty())
    throw config_error(model.position(*type),
                       name + " type: expected a layer name (a string), found " +
                           (type->is_string() ? "an empty string" : type_name(type->type())));
  layer.type = type->as_string()->get();
  layer.type_where = model.position(*type);
  if (const auto* label = table.get("name")) {
    layer.name_where = model.position(*label);
    if (!label->is_string() || label->as_string()->get().empty() ||
        label->as_string()->get().size() > limits::max_name_length)
      throw config_error(layer.name_where,
                         name + " name: expected the layer's name (a string of 1 to " +
                             std::to_string(limits::max_name_length) +
                             " bytes) that later layers' inputs can name, found " +
                             (label->is_string() ? quote_user_text(label->as_string()->get())
                                                 : type_name(label->type())));
    layer.name = label->as_string()->get();
  }
  if (const auto* inputs = table.get("inputs")) {
    const auto expected = " inputs: expected the names of earlier layers it reads, like "
                          "inputs = [\"block1\", \"attn1\"]";
    if (!inputs->is_array() || inputs->as_array()->empty())
      throw config_error(model.position(*inputs),
                         name + expected + ", found " +
                             (inputs->is_array() ? "an empty array" : type_name(inputs->type())));
    for (const auto& entry : *inputs->as_array()) {
      if (!entry.is_string())
        throw config_error(model.position(entry),
                           name + expected + ", found " + type_name(entry.type()));
      layer.inputs.push_back(entry.as_string()->get());
      layer.inputs_where.push_back(model.position(entry));
    }
  }
  for (const auto& [key, value] : entries_in_order(table)) {
    if (key->str() == "type" || key->str() == "name" || key->str() == "inputs")
      continue;
    layer.settings.emplace(std::string(key->str()),
                           read_scalar(*value, position_in(model.file(), key->source()),
                                       model.file(), name + " " + std::string(key->str())));
  }
  return layer;
}

/// [model] loss: a loss kind's name, or a table of its type and settings (`loss = { type =
/// "huber", delta = 0.5 }` or [model.loss]). The name is checked against the registry
/// later, when plugins are loaded (runtime/model/loss.hpp).
void read_loss(const section_reader& model, model_section& s) {
  const auto* loss = model.find("loss");
  if (loss == nullptr)
    return;
  s.loss_where = model.position(*loss);
  s.loss_type_where = s.loss_where;
  const auto expected = "a loss's name (like \"mse\") or a table of its type and settings "
                        "(like { type = \"huber\", delta = 0.5 })";
  if (loss->is_string()) {
    s.loss = loss->as_string()->get();
    return;
  }
  if (!loss->is_table())
    model.fail_type(*loss, "loss", expected);
  const auto& table = *loss->as_table();
  const auto* type = table.get("type");
  if (type == nullptr || !type->is_string() || type->as_string()->get().empty())
    throw config_error(type ? model.position(*type) : s.loss_where,
                       "[model] loss: expected " + std::string(expected) + ", found " +
                           (type == nullptr ? std::string("a table without a type")
                                            : type->is_string() ? "an empty type"
                                                                : type_name(type->type())));
  s.loss = type->as_string()->get();
  s.loss_type_where = model.position(*type);
  for (const auto& [key, value] : entries_in_order(table)) {
    if (key->str() == "type")
      continue;
    s.loss_settings.emplace(std::string(key->str()),
                            read_scalar(*value, position_in(model.file(), key->source()),
                                        model.file(), "[model] loss " + std::string(key->str())));
  }
}

/// explicit_form: the config has [[actor]] tables, which list the layers instead.
model_section read_model(const section_reader& r, bool explicit_form,
                         const std::string& directory) {
  model_section s;
  s.where = r.where();
  read_loss(r, s);
  s.init_from_where = r.read("init_from", s.init_from);
  if (!s.init_from.empty()) {  // "" (the default): the layers' init from the seed
    fs::path path(s.init_from);
    if (path.is_relative())
      s.init_from =
          in_config_directory(directory, path);
    std::error_code error;  // checked here, like [data] path, so a typo fails at its line
    if (!fs::is_regular_file(s.init_from, error))
      throw config_error(
          s.init_from_where,
          "[model] init_from: " + quote_user_path(s.init_from) + " " +
              (fs::exists(s.init_from, error) ? "is not a regular file" : "does not exist") +
              "; expected a safetensors file of weights named as "
              "torch.nn.Sequential's state_dict (e.g. from troupe export)");
  }
  if (const auto* layers = r.find("layers")) {
    if (!layers->is_array())
      r.fail_type(*layers, "layers", "an array of tables ([[model.layers]])");
    const auto& array = *layers->as_array();
    if (explicit_form && !array.empty())
      throw config_error(r.position(*array.get(0)),
                         "an explicit config lists its layers as [[actor]] tables; remove "
                         "[[model.layers]] or the [[actor]] tables");
    if (static_cast<std::int64_t>(array.size()) > limits::max_layers)
      throw config_error(r.position(*array.get(0)),
                         "[model] has " + std::to_string(array.size()) +
                             " [[model.layers]] tables, more than the limit of " +
                             std::to_string(limits::max_layers) + " layers");
    for (std::size_t i = 0; i < array.size(); ++i)
      s.layers.push_back(read_layer(r, *array.get(i), i));
  }
  r.finish();
  if (s.layers.empty() && !explicit_form)
    throw config_error(s.where, "[model] has no layers; add at least one [[model.layers]] table "
                                "with a type, e.g. type = \"linear\"");
  return s;
}

schedule_section read_schedule(const section_reader& r) {
  schedule_section s;
  s.where = r.where();
  r.read_enum("type", s.type, "schedule type");
  r.read("warmup_steps", s.warmup_steps, at_least(0));
  r.read("step_size", s.step_size, at_least(1));
  r.read("gamma", s.gamma, above(0));
  r.read("min_lr", s.min_lr, not_below(0));
  r.finish();
  return s;
}

optimizer_section read_optimizer(const section_reader& r) {
  optimizer_section s;
  s.where = r.where();
  s.type_where = r.read_enum("type", s.type, "optimizer type");
  r.read("lr", s.lr, above(0));
  r.read("momentum", s.momentum, unit_interval());
  r.read("dampening", s.dampening, unit_interval());
  auto nesterov_where = r.read("nesterov", s.nesterov);
  if (const auto* betas = r.find("betas")) {
    const auto* array = betas->as_array();
    if (!array || array->size() != 2)
      r.fail(*betas, "betas", "expected an array of 2 numbers [beta1, beta2], found " +
                                  (array ? "an array of " + std::to_string(array->size()) + " values"
                                         : type_name(betas->type())));
    s.beta1 = r.number(*array->get(0), "betas[0]", unit_interval());
    s.beta2 = r.number(*array->get(1), "betas[1]", unit_interval());
  }
  r.read("eps", s.eps, above(0));
  r.read("weight_decay", s.weight_decay, not_below(0));
  section_reader schedule(r.sub_table("schedule"), "optimizer.schedule", r.file(), s.where);
  r.finish();
  // The same rule as PyTorch's SGD: Nesterov momentum needs momentum and no dampening.
  if (s.nesterov && (s.momentum <= 0.0 || s.dampening != 0.0))
    throw config_error(nesterov_where,
                       "[optimizer] nesterov: needs momentum > 0 and "
                       "dampening = 0, found momentum = " +
                           format_number(s.momentum) +
                           ", dampening = " + format_number(s.dampening));
  s.schedule = read_schedule(schedule);
  return s;
}

/// `stages = [[0, 1], [2, 4]]`: each element a pair of layer indices, first <= last.
void read_stage_ranges(const section_reader& r, parallel_section& s) {
  const auto* stages = r.find("stages");
  if (!stages)
    return;
  s.stages_where = r.position(*stages);
  const auto* array = stages->as_array();
  if (!array || array->empty())
    r.fail(*stages, "stages", "expected a non-empty array of [first, last] layer ranges like "
                              "[[0, 1], [2, 4]], found " +
                                  (array ? std::string("an empty array") : type_name(stages->type())));
  for (const auto& element : *array) {
    const auto* pair = element.as_array();
    bool well_formed = pair && pair->size() == 2 && pair->get(0)->is_integer() &&
                       pair->get(1)->is_integer();
    if (!well_formed)
      r.fail(element, "stages", "expected a pair of layer indices [first, last], found " +
                                    (pair ? "an array of " + std::to_string(pair->size()) +
                                                " values" + (pair->size() == 2 ? " (not integers)" : "")
                                          : type_name(element.type())));
    auto first = pair->get(0)->as_integer()->get();
    auto last = pair->get(1)->as_integer()->get();
    if (first < 0 || last < first)
      r.fail(element, "stages", "expected layer indices 0 <= first <= last, found [" +
                                    std::to_string(first) + ", " + std::to_string(last) + "]");
    s.stage_ranges.emplace_back(first, last);
  }
}

/// [parallel] balance: "even" or an array of one positive weight a replica
/// (their count is checked against the replicas once the topology is known).
void read_balance(const section_reader& r, parallel_section& s) {
  const auto* node = r.find("balance");
  if (node == nullptr)
    return;
  s.balance_where = r.position(*node);
  if (!node->is_array()) {
    if (!node->is_string())
      r.fail_type(*node, "balance", "\"even\" or an array of weights like [1, 2]");
    r.read_enum("balance", s.balance, "replica balance");
    return;
  }
  const auto& array = *node->as_array();
  if (array.empty())
    r.fail(*node, "balance", "expected one weight a replica like [1, 2], found an empty array");
  if (array.size() > static_cast<std::size_t>(limits::max_replicas))
    r.fail(*node, "balance",
           "expected at most " + std::to_string(limits::max_replicas) +
               " weights (one a replica), found " + std::to_string(array.size()));
  s.balance = replica_balance::weights;
  for (const auto& element : array)
    s.balance_weights.push_back(r.number(element, "balance", number_range{0, true}));
}

/// explicit_form: the [[actor]] / [[wire]] graph says how many replicas and stages there
/// are, so the shorthand keys for them would say it twice (and could disagree).
/// [parallel] averaging: a collective (ring, central, gloo), or a rule: "local_sgd" or
/// "diloco", with the collective under it (`collective`), its period (`sync_every`,
/// required) and, for diloco, the outer optimizer (`outer`, `outer_lr`, `outer_momentum`);
/// or "async", a parameter server per layer with its bound (`max_staleness`, required).
void read_averaging(const section_reader& r, parallel_section& s) {
  auto names = enum_names<averaging_method>();
  for (auto rule : {averaging_rule::local_sgd, averaging_rule::diloco, averaging_rule::async})
    names.push_back(to_string(rule));
  std::string averaging = to_string(s.averaging);
  s.averaging_where = r.read_choice("averaging", averaging, "gradient averaging", names);
  if (auto method = parse_enum<averaging_method>(averaging))
    s.averaging = *method;
  else
    s.rule = *parse_enum<averaging_rule>(averaging);
  // Each key of a rule that is not in force: refused, saying whose it is.
  auto refuse_unless = [&](bool in_force, const char* owner,
                           std::initializer_list<const char*> keys) {
    for (const char* key : keys)
      if (!in_force && r.find(key))
        throw config_error(r.key_position(key), std::string("[parallel] ") + key + ": is " + owner +
                                                    "'s, and " + "averaging is " +
                                                    quote_user_text(averaging) +
                                                    "; set averaging = " + owner + " or remove it");
  };
  const bool local = s.rule == averaging_rule::local_sgd || s.rule == averaging_rule::diloco;
  refuse_unless(local, "\"local_sgd\" or \"diloco\"", {"collective", "sync_every"});
  refuse_unless(s.rule == averaging_rule::diloco, "\"diloco\"",
                {"outer", "outer_lr", "outer_momentum"});
  refuse_unless(s.rule == averaging_rule::async, "\"async\"", {"max_staleness"});
  auto require = [&](const char* key, const std::string& meaning) {
    if (!r.find(key))
      throw config_error(s.averaging_where, "[parallel] averaging = " + quote_user_text(averaging) +
                                                " needs " + key + " = " + meaning);
  };
  if (s.rule == averaging_rule::async) {
    // Note [asynchronous server] in actors/training/async_server.cpp.
    s.averaging = averaging_method::central;  // the server sits where a central averager would
    require("max_staleness",
            "N: how many of the server's updates may land between the version a replica "
            "computed its gradient on and that gradient's own update (at least replicas - 1)");
    s.max_staleness_where =
        r.read("max_staleness", s.max_staleness, integer_range{0, limits::max_steps});
    return;
  }
  if (!local)
    return;
  std::string collective = to_string(averaging_method::ring);
  r.read_choice("collective", collective, "collective under " + averaging,
                {to_string(averaging_method::ring), to_string(averaging_method::gloo)});
  s.averaging = *parse_enum<averaging_method>(collective);
  require("sync_every",
          "H: the number of steps each replica takes on its own between parameter averages "
          "(1 is every step)");
  r.read("sync_every", s.sync_every, integer_range{1, limits::max_steps});
  if (s.rule != averaging_rule::diloco)
    return;
  std::string outer = "nesterov";
  r.read_choice("outer", outer, "outer optimizer", {"nesterov", "sgd"});
  s.outer_nesterov = outer == "nesterov";
  r.read("outer_lr", s.outer_lr, number_range{0, true});
  r.read("outer_momentum", s.outer_momentum, number_range{0, false, 1.0});
  if (s.outer_nesterov && s.outer_momentum == 0)
    throw config_error(r.key_position("outer_momentum"),
                       "[parallel] outer = \"nesterov\" needs outer_momentum > 0 (Nesterov's "
                       "look-ahead is along the momentum); use outer = \"sgd\" for none");
}

parallel_section read_parallel(const section_reader& r, bool explicit_form) {
  parallel_section s;
  s.where = r.where();
  if (const auto* devices = r.find("devices")) {
    const auto* array = devices->as_array();
    if (!array || array->empty())
      r.fail(*devices, "devices", "expected a non-empty array of devices like [\"cpu:0\"], found " +
                                      (array ? std::string("an empty array")
                                             : type_name(devices->type())));
    std::map<device_id, std::size_t> index_of;  // device -> its index in s.devices
    for (const auto& element : *array) {
      const auto* name = element.as_string();
      if (!name)
        r.fail(element, "devices",
               "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0', found " +
                   type_name(element.type()));
      auto parsed = parse_device_name(name->get());
      if (!parsed.ok())
        r.fail(element, "devices", parsed.error);
      // A map, not a scan of the earlier devices: 100,000 devices must not take n^2.
      auto [earlier, first] = index_of.emplace(parsed.id, s.devices.size());
      if (!first) {
        const auto& other = s.devices[earlier->second];
        r.fail(element, "devices",
               "device " + quote_user_text(name->get()) + " is listed twice (first at " +
                   other.where.to_string() +
                   (other.name == name->get() ? "" : " as " + quote_user_text(other.name)) + ")");
      }
      s.devices.push_back({name->get(), parsed.id, r.position(element)});
    }
  } else {
    s.devices.push_back({"cpu:0", device_id{}, s.where});
  }
  if (explicit_form)
    for (const char* key : {"data", "pipeline", "stages"})
      if (r.find(key))
        throw config_error(r.key_position(key),
                           std::string("[parallel] ") + key +
                               ": is shorthand, and an explicit "
                               "config's [[actor]] tables already say how many replicas and stages "
                               "there are; remove it");
  r.read("data", s.data, integer_range{1, limits::max_replicas});
  r.read("pipeline", s.pipeline, integer_range{1, limits::max_layers});
  read_stage_ranges(r, s);
  r.read("microbatches", s.microbatches, integer_range{1, limits::max_microbatches});
  r.read_enum("schedule", s.schedule, "pipeline schedule");
  s.virtual_stages_where = r.read("virtual_stages", s.virtual_stages,
                                  integer_range{1, limits::max_layers});
  read_averaging(r, s);
  r.read("share_devices", s.share_devices);
  // bucket_kib * 1024 bytes must not overflow (Note [input limits]): at most 1 TiB.
  r.read("bucket_kib", s.bucket_kib, integer_range{1, std::int64_t{1} << 30});
  r.read("shard_optimizer", s.shard_optimizer);
  r.read("gloo_timeout", s.gloo_timeout, number_range{0, true, limits::max_seconds});
  s.shard_where = r.find("shard_optimizer") ? r.key_position("shard_optimizer") : s.where;
  std::string reduce_dtype = "fp32";
  const auto reduce_where =
      r.read_choice("reduce_dtype", reduce_dtype, "all-reduce dtype", {"fp32", "bf16"});
  s.reduce_bf16 = reduce_dtype == "bf16";
  read_balance(r, s);
  r.finish();
  const std::string rule = quote_user_text(to_string(s.rule));
  if ((s.reduce_bf16 || s.shard_optimizer) && s.rule == averaging_rule::async)
    throw config_error(s.reduce_bf16 ? reduce_where : s.shard_where,
                       std::string("[parallel] ") +
                           (s.reduce_bf16 ? "reduce_dtype" : "shard_optimizer") +
                           ": is the ring's, and averaging = \"async\" has no ring (a server a "
                           "layer applies each replica's gradients); leave it out");
  if (s.reduce_bf16 && s.rule != averaging_rule::synchronous)
    throw config_error(reduce_where,
                       "[parallel] reduce_dtype: \"bf16\" rounds the ring's gradient chunks, and "
                       "averaging = " +
                           rule +
                           " averages parameters, which would lose their low "
                           "bits at every sync; leave reduce_dtype out");
  if (s.shard_optimizer && s.rule != averaging_rule::synchronous)
    throw config_error(s.shard_where,
                       "[parallel] shard_optimizer: each replica of averaging = " + rule +
                           " updates all of its own parameters between syncs, so there is "
                           "nothing to shard; leave shard_optimizer out");
  if (s.reduce_bf16 && s.averaging != averaging_method::ring)
    throw config_error(reduce_where,
                       "[parallel] reduce_dtype: \"bf16\" is the ring's (its chunks travel in "
                       "bf16); averaging = \"" +
                           std::string(to_string(s.averaging)) +
                           "\" sums in fp32 only. Use averaging = \"ring\", or leave "
                           "reduce_dtype out");
  if (s.shard_optimizer && s.averaging != averaging_method::ring)
    throw config_error(s.shard_where,
                       "[parallel] shard_optimizer: needs averaging = \"ring\" "
                       "(the optimizer shards are the ring's chunks), found "
                       "averaging = \"" +
                           std::string(to_string(s.averaging)) + "\"");
  return s;
}

/// [cluster] tls and its files: each path made absolute (relative to the config file) and
/// checked to be a file now, so a typo fails at its line rather than at the first
/// connection; the files without tls = true are refused (they would do nothing).
void read_cluster_tls(const section_reader& r, const std::string& directory, cluster_section& s) {
  s.tls_where = r.read("tls", s.tls);
  struct tls_file {
    const char* key;
    std::string* path;
    const char* what;
    bool required;
  };
  const tls_file files[] = {
      {"certificate", &s.certificate, "this node's certificate (PEM)", true},
      {"key", &s.key, "the private key of that certificate (PEM)", true},
      {"ca_file", &s.ca_file, "the CA certificate (PEM) that signed every node's certificate",
       true},
      {"key_passphrase_file", &s.key_passphrase_file,
       "a file whose first line is the key's passphrase", false},
  };
  for (const auto& f : files) {
    const auto where = r.read(f.key, *f.path);
    if (!r.find(f.key)) {
      if (s.tls && f.required)
        throw config_error(s.tls_where, std::string("[cluster] tls: needs certificate, key and "
                                                    "ca_file (paths relative to the config "
                                                    "file); found no ") +
                                            f.key + " (" + f.what + ")");
      continue;
    }
    const std::string name = std::string("[cluster] ") + f.key;
    if (!s.tls)
      throw config_error(r.key_position(f.key),
                         name +
                             ": is used only with TLS between nodes; add tls = true to "
                             "[cluster], or remove " +
                             f.key);
    if (f.path->empty())
      throw config_error(where, name + ": expected a file's path, found an empty string");
    if (fs::path(*f.path).is_relative())
      *f.path =
          in_config_directory(directory, *f.path);
    std::error_code error;
    if (!fs::is_regular_file(*f.path, error))
      throw config_error(
          where, name + ": " + quote_user_path(*f.path) + " " +
                     (fs::exists(*f.path, error) ? "is not a regular file" : "does not exist") +
                     "; expected " + f.what);
  }
}

cluster_section read_cluster(const section_reader& r, const std::string& directory) {
  cluster_section s;
  s.where = r.where();
  s.nodes_where = r.read("nodes", s.nodes, integer_range{1, max_node_index + 1});
  r.read("address", s.address);
  r.read("port", s.port, integer_range{1, 65535});
  r.read("listen", s.listen);
  auto secret_where = r.read("secret_file", s.secret_file);
  if (r.find("secret_file") && s.secret_file.empty())
    throw config_error(secret_where,
                       "[cluster] secret_file: expected a file's path, found an "
                       "empty string");
  s.secret_file = in_config_directory(directory, s.secret_file);
  for (auto [key, value] :
       {std::pair<const char*, std::string*>{"address", &s.address}, {"listen", &s.listen}})
    if (value->empty() || value->find_first_of(" \t/") != std::string::npos)
      throw config_error(r.find(key) ? r.key_position(key) : s.where,
                         std::string("[cluster] ") + key +
                             ": expected a host name or an IP "
                             "address like \"127.0.0.1\", found " +
                             quote_user_text(*value));
  r.read("timeout", s.timeout, number_range{0, true, limits::max_seconds});
  r.read("heartbeat", s.heartbeat, number_range{0, true, 10});
  r.read("node_timeout", s.node_timeout, number_range{0, true, limits::max_seconds});
  if (s.node_timeout <= 2 * s.heartbeat)
    throw config_error(r.find("node_timeout") ? r.key_position("node_timeout") : s.where,
                       "[cluster] node_timeout: must be more than twice heartbeat (" +
                           format_number(s.heartbeat) +
                           " s), or one late heartbeat would end "
                           "the run; found " +
                           format_number(s.node_timeout));
  r.read("shared_memory", s.shared_memory);
  std::string link;
  s.link_where = r.read("link", link);
  if (r.find("link")) {
    try {
      s.link = parse_link(link, "[cluster] link");
    } catch (const user_error& e) {
      throw config_error(s.link_where, e.what());
    }
  }
  r.read("unauthenticated_gloo", s.unauthenticated_gloo);
  read_cluster_tls(r, directory, s);
  r.finish();
  return s;
}

// ---- the top level ----

/// Refuses the first key longer than limits::max_name_length, walking the tables and
/// arrays with a stack of its own (never recursion: Note [input limits]).
void check_key_lengths(const toml::table& root, const std::string& file) {
  std::vector<const toml::node*> pending{&root};
  while (!pending.empty()) {
    const auto* node = pending.back();
    pending.pop_back();
    if (const auto* table = node->as_table()) {
      for (auto&& [key, value] : *table) {
        if (key.str().size() > limits::max_name_length)
          throw config_error(position_in(file, key.source()),
                             "the key " + quote_user_text(key.str()) + " is longer than " +
                                 std::to_string(limits::max_name_length) +
                                 " bytes (the limit for names in a config)");
        pending.push_back(&value);
      }
    } else if (const auto* array = node->as_array()) {
      for (const auto& element : *array)
        pending.push_back(&element);
    }
  }
}

const std::vector<std::string> section_names = {"run",      "data",    "model", "optimizer",
                                                "parallel", "cluster", "actor", "wire"};

bool is_table_array(const std::string& name) { return name == "actor" || name == "wire"; }

void reject_unknown_sections(const toml::table& root, const std::string& file) {
  for (const auto& [key, node] : entries_in_order(root)) {
    std::string name(key->str());
    auto at = position_in(file, key->source());
    if (std::find(section_names.begin(), section_names.end(), name) == section_names.end()) {
      auto hint = suggestion(name, section_names);
      throw config_error(at,
                         "unknown section " + quote_user_text(name) +
                             (hint.empty() ? "; valid sections: " + join(section_names) : hint));
    }
    if (is_table_array(name) && !node->is_array_of_tables())
      throw config_error(at, "'" + name + "' must be an array of tables [[" + name + "]], found " +
                                 type_name(node->type()));
    if (!is_table_array(name) && !node->is_table())
      throw config_error(at, "'" + name + "' must be a section [" + name + "], found " +
                                 type_name(node->type()));
  }
}

/// Every [[actor]] (or [[wire]]) table, each key with its scalar value and position.
std::vector<table_config> read_tables(const toml::table& root, const std::string& name,
                                      const std::string& file) {
  std::vector<table_config> tables;
  const auto* array = root.get_as<toml::array>(name);
  if (!array)
    return tables;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const auto& table = *array->get(i)->as_table();
    table_config out;
    out.where = position_in(file, table.source());
    for (const auto& [key, value] : entries_in_order(table)) {
      auto what = "[[" + name + "]] #" + std::to_string(i + 1) + " " + std::string(key->str());
      out.settings.emplace(std::string(key->str()),
                           read_scalar(*value, position_in(file, key->source()), file, what));
    }
    tables.push_back(std::move(out));
  }
  return tables;
}

}  // namespace

const std::vector<std::string>& fashion_mnist_file_names() {
  static const std::vector<std::string> names = {
      "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
      "t10k-labels-idx1-ubyte"};
  return names;
}

std::string find_data_file(const std::string& directory, const std::string& name) {
  std::error_code error;
  for (auto path : {fs::path(directory) / (name + ".gz"), fs::path(directory) / name})
    if (fs::is_regular_file(path, error))
      return path.string();
  return {};
}

std::string shortest_text(double value) {
  // std::to_chars needs a buffer: a string as long as any double's shortest form can be
  // ("-2.2250738585072014e-308" is 24 characters), checked rather than truncated.
  std::string text(32, '\0');
  auto result = std::to_chars(text.data(), text.data() + text.size(), value);
  TROUPE_CHECK(result.ec == std::errc{},
               "to_chars needs more than " << text.size() << " characters for " << value);
  text.resize(static_cast<std::size_t>(result.ptr - text.data()));
  return text;
}

namespace {

// load_config's overrides: each "section.key=value" set in the parsed file's [section].
void apply_overrides(toml::table& root, const std::vector<std::string>& overrides) {
  for (const auto& text : overrides) {
    const std::string where_name = "--set " + quote_user_text(text);
    const source_position where{where_name, 0, 0};
    const auto equals = text.find('=');
    const auto dot = text.find('.');
    if (equals == std::string::npos || dot == std::string::npos || dot > equals || dot == 0 ||
        dot + 1 == equals)
      throw config_error(where, "expected SECTION.KEY=VALUE, e.g. parallel.data=64");
    const auto section = text.substr(0, dot);
    const auto key = text.substr(dot + 1, equals - dot - 1);
    if (key.find('.') != std::string::npos)
      throw config_error(where, "expected SECTION.KEY=VALUE with one dot before the '=', found " +
                                    quote_user_text(text.substr(0, equals)));
    // Parsed as a file of its own, named by the --set, so that every error in what it sets
    // (a wrong type, an unknown key, a value out of range) names the --set.
    const auto snippet = "[" + section + "]\n" + key + " = " + text.substr(equals + 1) + "\n";
    toml::table parsed;
    try {
      check_toml_limits(snippet, where_name);
      parsed = toml::parse(snippet, std::string_view{where_name});
    } catch (const toml::parse_error& error) {
      throw config_error(where, "cannot read it as TOML (strings need quotes: " + section + "." +
                                    key + "=\"...\"): " + std::string(error.description()));
    }
    if (parsed.size() != 1 || !parsed.begin()->second.is_table() ||
        parsed.begin()->second.as_table()->size() != 1)
      throw config_error(where, "expected SECTION.KEY=VALUE with one dot before the '='");
    auto* table = root.get(section);
    if (table == nullptr) {
      const auto whole = parsed.begin();  // moved: a copy would lose the --set's positions
      root.insert_or_assign(whole->first, std::move(whole->second));
      continue;
    }
    if (!table->is_table())
      throw config_error(where, "[" + section + "] is not a table in the config, cannot set " +
                                    quote_user_text(key) + " in it");
    const auto entry = parsed.begin()->second.as_table()->begin();  // a pair lives in it
    table->as_table()->insert_or_assign(entry->first, std::move(entry->second));
  }
}

}  // namespace

namespace {

/// The config's TOML, with `overrides` applied.
toml::table parse_with_overrides(const std::string& text, const std::string& name,
                                 const std::vector<std::string>& overrides) {
  // A UTF-8 byte-order mark first (what several Windows editors write) is not TOML's: TOML
  // parsers skip it, and so does troupe; positions count from after it, as editors show them.
  // CR LF line ends are TOML's own.
  std::string_view body{text};
  if (body.substr(0, 3) == "\xEF\xBB\xBF")
    body.remove_prefix(3);
  if (const auto utf16 = utf16_refusal(body.substr(0, 4)); !utf16.empty())
    throw config_error(source_position{name, 1, 1}, "the config " + utf16);
  check_toml_limits(body, name);  // what toml++ would recurse over (toml_limits.hpp)
  toml::table root;
  try {
    root = toml::parse(body, std::string_view{name});
  } catch (const toml::parse_error& error) {
    std::string description(error.description());
    if (!description.empty())
      description[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(description[0])));
    throw config_error(position_in(name, error.source()), "invalid TOML: " + description);
  }
  apply_overrides(root, overrides);
  return root;
}

}  // namespace

std::string config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides) {
  std::ostringstream out;
  out << toml::toml_formatter{parse_with_overrides(text, name, overrides)} << "\n";
  return out.str();
}

run_config parse_config(const std::string& text, const std::string& name,
                        const std::string& directory, const std::vector<std::string>& overrides) {
  const toml::table root = parse_with_overrides(text, name, overrides);
  check_key_lengths(root, name);
  reject_unknown_sections(root, name);

  run_config config;
  config.path = name;
  config.directory = directory;
  const source_position whole_file{name, 0, 0};
  auto section = [&](const char* key) {
    return section_reader(root.get_as<toml::table>(key), key, name, whole_file);
  };
  config.run = read_run(section("run"), directory);
  config.data = read_data(section("data"), directory);
  config.actors = read_tables(root, "actor", name);
  config.wires = read_tables(root, "wire", name);
  const bool explicit_form = config.is_explicit();
  if (explicit_form && config.wires.empty())
    throw config_error(config.actors.front().where,
                       "an explicit config needs [[wire]] tables too: the [[actor]] tables say "
                       "what runs, the wires how activations, labels, gradients and parameters "
                       "flow between them");
  if (!explicit_form && !config.wires.empty())
    throw config_error(config.wires.front().where,
                       "[[wire]] tables need [[actor]] tables to connect; a shorthand config "
                       "has neither");
  config.model = read_model(section("model"), explicit_form, directory);
  config.optimizer = read_optimizer(section("optimizer"));
  config.parallel = read_parallel(section("parallel"), explicit_form);
  config.cluster = read_cluster(section("cluster"), directory);
  return config;
}

run_config load_config(const std::string& path) { return load_config(path, {}); }

run_config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const auto text = read_file_capped(path, limits::max_config_bytes, "config file");
  auto directory = fs::path(path).parent_path().string();
  return parse_config(text, path, directory.empty() ? "." : directory, overrides);
}

}  // namespace troupe
