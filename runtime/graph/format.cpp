// format.cpp: prints a topology three ways, for `troupe plan`: an aligned table
// for people, Graphviz DOT for pictures, and the explicit TOML config for editing
// (`--eject`), which reads back into the same topology.
//
// Nothing here checks a topology (validate_topology() does) or reads anything back.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "runtime/graph/actor_signature.hpp"
#include "runtime/graph/topology.hpp"

namespace troupe {
namespace {

std::string index_or_dash(std::int32_t value) {
  return value < 0 ? "-" : std::to_string(value);
}

/// Rows of cells printed with every column as wide as its widest cell, two spaces apart.
std::string aligned(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) {
      widths.resize(std::max(widths.size(), row.size()));
      widths[c] = std::max(widths[c], row[c].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (std::size_t c = 0; c < row.size(); ++c)
      line += " " + row[c] +
              (c + 1 < row.size() ? std::string(widths[c] - row[c].size() + 1, ' ') : "");
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

/// "factor=0.5, mode=\"x\"": a custom actor's settings (the built-in kinds' own columns
/// say theirs).
std::string custom_settings(const actor_plan& a);

std::string device_list(const topology& t) {
  std::string out;
  for (const auto& device : t.devices)
    out += (out.empty() ? "" : ", ") + device.to_string();
  return out;
}

// ---- DOT ----

/// A DOT quoted string; `\n` in the text stays DOT's own line break escape.
std::string dot_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

std::string dot_edge_style(wire_kind kind) {
  switch (kind) {
    case wire_kind::params:
      return "style=dashed";
    case wire_kind::grads:
      return "style=dotted";
    case wire_kind::ring:
      return "style=bold";
    case wire_kind::labels:
      return "color=gray, fontcolor=gray";
    case wire_kind::activations:
      return "style=solid";
  }
  TROUPE_CHECK(false, "wire kind " << static_cast<int>(kind));
  return {};
}

// ---- TOML ----

std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          std::ostringstream escape;
          escape << "\\u" << std::hex << std::setw(4) << std::setfill('0')
                 << static_cast<unsigned>(c);
          out += escape.str();
        } else {
          out += c;  // UTF-8 bytes pass through: TOML files are UTF-8
        }
    }
  }
  return out + "\"";
}

/// The shortest text that reads back as exactly `value`, and as a float, not an integer.
std::string toml_float(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  std::string text = shortest_text(value);
  if (text.find_first_of(".en") == std::string::npos)
    text += ".0";
  return text;
}

std::string toml_key(const std::string& key) {
  bool bare = !key.empty() && key.find_first_not_of(
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                  "qrstuvwxyz0123456789_-") == std::string::npos;
  return bare ? key : toml_string(key);
}

std::string toml_value(const setting_value& setting) {
  struct writer {
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return toml_float(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return toml_string(v); }
  };
  return std::visit(writer{}, setting.value);
}

/// Writes `key = value` lines in the order given.
class toml_writer {
 public:
  void section(const std::string& header) {
    out_ << (out_.tellp() > 0 ? "\n" : "") << header << "\n";
  }
  void comment(const std::string& text) { out_ << "# " << text << "\n"; }
  void raw(const std::string& key, const std::string& value) {
    out_ << toml_key(key) << " = " << value << "\n";
  }
  void put(const std::string& key, const std::string& value) { raw(key, toml_string(value)); }
  void put(const std::string& key, const char* value) { raw(key, toml_string(value)); }
  void put(const std::string& key, std::int64_t value) { raw(key, std::to_string(value)); }
  void put(const std::string& key, double value) { raw(key, toml_float(value)); }
  void put(const std::string& key, bool value) { raw(key, value ? "true" : "false"); }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

void write_actor(toml_writer& w, const actor_plan& a) {
  w.section("[[actor]]");
  w.put("name", a.name);
  w.put("kind", a.kind_name());
  w.put("device", a.device.to_string());
  for (auto [key, value] : {std::pair<const char*, std::int32_t>{"replica", a.replica},
                            {"stage", a.stage},
                            {"layer", a.layer}})
    if (value >= 0)
      w.put(key, std::int64_t{value});
  if (a.kind == actor_kind::layer) {
    w.put("type", a.math.type);
    for (const auto& [key, value] : a.math.settings)
      w.raw(key, toml_value(value));
  }
  if (a.kind == actor_kind::averager)
    w.put("method", to_string(a.method));
  for (const auto& [key, value] : a.settings)
    w.raw(key, toml_value(value));
}

std::string custom_settings(const actor_plan& a) {
  if (a.kind != actor_kind::custom)
    return {};
  std::string out;
  for (const auto& [key, value] : a.settings)
    out += (out.empty() ? "" : ", ") + key + "=" + toml_value(value);
  return out;
}

/// "ring", or "local_sgd (ring, parameters averaged every 8 steps)".
std::string averaging_of(const topology& t) {
  if (t.rule == averaging_rule::synchronous)
    return to_string(t.averaging);
  if (t.rule == averaging_rule::async)
    return "async (a parameter server per layer, max_staleness " + std::to_string(t.max_staleness) +
           ")";
  return std::string{to_string(t.rule)} + " (" + to_string(t.averaging) +
         ", parameters averaged every " +
         (t.sync_every == 1 ? std::string{"step"} : std::to_string(t.sync_every) + " steps") + ")";
}

}  // namespace

std::string format_table(const topology& t) {
  std::string out =
      "topology: R = " + std::to_string(t.replicas) + " replicas, " +
      (t.virtual_stages > 1
           ? std::to_string(t.stages) +
                 " stages on P = " + std::to_string(t.stages / t.virtual_stages) +
                 " devices (v = " + std::to_string(t.virtual_stages) + " a device, interleaved)"
           : "P = " + std::to_string(t.stages) + " stages") +
      ", M = " + std::to_string(t.microbatches) + " micro-batches, schedule " +
      to_string(t.schedule) + ", averaging " + averaging_of(t) + ", devices " + device_list(t) +
      "\n";
  const bool nodes = t.nodes > 1;
  if (nodes) {
    auto crossing = std::count_if(t.wires.begin(), t.wires.end(),
                                  [&](const wire_plan& w) { return t.crosses_nodes(w); });
    out += "nodes: " + std::to_string(t.nodes) + " processes (node0 coordinates), " +
           std::to_string(crossing) + " of " + std::to_string(t.wires.size()) +
           " wires cross the network\n";
  }
  // A settings column only when a custom actor has settings to show.
  bool any_settings = std::any_of(t.actors.begin(), t.actors.end(),
                                  [](const actor_plan& a) { return !custom_settings(a).empty(); });
  std::vector<std::vector<std::string>> actors{
      {"name", "kind", "device", "replica", "stage", "layer", "type"}};
  if (nodes)
    actors[0].insert(actors[0].begin() + 2, "node");
  if (any_settings)
    actors[0].push_back("settings");
  for (const auto& a : t.actors) {
    actors.push_back({a.name, a.kind_name(), a.device.to_string(), index_or_dash(a.replica),
                      index_or_dash(a.stage), index_or_dash(a.layer),
                      a.kind != actor_kind::layer ? ""
                      : a.math.name.empty()       ? a.math.type
                                                  : a.math.type + " (" + a.math.name + ")"});
    if (nodes)
      actors.back().insert(actors.back().begin() + 2, "node" + std::to_string(a.device.node));
    if (any_settings)
      actors.back().push_back(custom_settings(a));
  }
  std::vector<std::vector<std::string>> wires{{"from", "to", "kind", "capacity"}};
  if (nodes)
    wires[0].push_back("crosses");
  const auto skips = t.skip_wires();
  for (std::size_t i = 0; i < t.wires.size(); ++i) {
    const auto& w = t.wires[i];
    wires.push_back({w.from, w.to, to_string(w.kind) + std::string(skips[i] ? " (skip)" : ""),
                     w.capacity > 0 ? std::to_string(w.capacity) : "-"});
    if (nodes) {
      const auto* from = t.find(w.from);
      const auto* to = t.find(w.to);
      wires.back().push_back(t.crosses_nodes(w) ? "node" + std::to_string(from->device.node) +
                                                      " -> node" + std::to_string(to->device.node)
                                                : "");
    }
  }
  out += "\nactors (" + std::to_string(t.actors.size()) + ")\n" + aligned(actors);
  out += "\nwires (" + std::to_string(t.wires.size()) + ")\n" + aligned(wires);
  return out;
}

std::string format_dot(const topology& t) {
  std::string out =
      "digraph troupe {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n";
  // One cluster per device the run creates, then any device only an actor names.
  std::vector<device_id> devices = t.devices;
  for (const auto& a : t.actors)
    if (std::find(devices.begin(), devices.end(), a.device) == devices.end())
      devices.push_back(a.device);
  // With several nodes, each node is a cluster around its devices' clusters.
  const bool nodes = t.nodes > 1;
  for (std::int64_t node = 0; node < (nodes ? t.nodes : 1); ++node) {
    std::string indent = nodes ? "    " : "  ";
    if (nodes)
      out += "  subgraph cluster_node" + std::to_string(node) + " {\n    label=" +
             dot_quote("node" + std::to_string(node) + (node == 0 ? " (coordinator)" : "")) +
             ";\n    style=dashed;\n";
    for (const auto& device : devices) {
      if (nodes && device.node != node)
        continue;
      auto name = device.to_string();
      std::replace(name.begin(), name.end(), ':', '_');
      std::replace(name.begin(), name.end(), '/', '_');
      out += indent + "subgraph cluster_" + name + " {\n" + indent +
             "  label=" + dot_quote(device.to_string()) + ";\n";
      for (const auto& a : t.actors)
        if (a.device == device) {
          auto settings = custom_settings(a);
          auto label = a.name + "\n" + (a.kind == actor_kind::layer ? a.math.type : a.kind_name()) +
                       (settings.empty() ? "" : "\n" + settings);
          out += indent + "  " + dot_quote(a.name) + " [label=" + dot_quote(label) + "];\n";
        }
      out += indent + "}\n";
    }
    if (nodes)
      out += "  }\n";
  }
  const auto skips = t.skip_wires();
  for (std::size_t i = 0; i < t.wires.size(); ++i) {
    const auto& w = t.wires[i];
    auto label = to_string(w.kind) + std::string(skips[i] ? " skip" : "") +
                 (w.capacity > 0 ? " (" + std::to_string(w.capacity) + ")" : "");
    if (t.crosses_nodes(w))
      label += " [network]";
    out += "  " + dot_quote(w.from) + " -> " + dot_quote(w.to) + " [label=" + dot_quote(label) +
           ", " + dot_edge_style(w.kind) + (t.crosses_nodes(w) ? ", penwidth=2" : "") + "];\n";
  }
  return out + "}\n";
}

namespace {

/// [data], with the keys of its source's own files (absolute, like path).
void write_data_section(toml_writer& w, const data_section& data) {
  w.section("[data]");
  w.put("source", to_string(data.source));
  // Absolute, so that the ejected file works wherever it is saved.
  w.put("path", std::filesystem::absolute(data.path).lexically_normal().string());
  w.put("batch_size", data.batch_size);
  w.put("eval_batch_size", data.eval_batch_size);
  w.put("shuffle", data.shuffle);
  w.put("prefetch", data.prefetch);
  // The keys of the source's own files, absolute like path.
  auto absolute = [](const std::string& path) {
    return std::filesystem::absolute(path).lexically_normal().string();
  };
  auto numbers = [](const std::vector<double>& values) {
    std::string text;
    for (const auto v : values)
      text += (text.empty() ? "" : ", ") + toml_float(v);
    return "[" + text + "]";
  };
  auto names = [](const std::vector<std::string>& values) {
    std::string text;
    for (const auto& v : values)
      text += (text.empty() ? "" : ", ") + toml_string(v);
    return "[" + text + "]";
  };
  if (data.source == data_source::npy)
    for (auto [key, file] : {std::pair{"features", &data.features},
                             std::pair{"targets", &data.targets},
                             std::pair{"test_features", &data.test_features},
                             std::pair{"test_targets", &data.test_targets}})
      if (!file->empty())  // no test files: [data] validation; none at all: data given
        w.put(key, absolute(*file));
  if (data.source == data_source::npz || data.source == data_source::safetensors) {
    if (!data.test_path.empty())
      w.put("test_path", absolute(data.test_path));
    w.put("features", data.features.empty() ? std::string("x") : data.features);
    w.put("targets", data.targets.empty() ? std::string("y") : data.targets);
  }
  if (data.source == data_source::csv) {
    if (!data.test_path.empty())  // none: [data] validation
      w.put("test_path", absolute(data.test_path));
    w.raw("target", names(data.target_columns));
    if (!data.feature_columns.empty())
      w.raw("features", names(data.feature_columns));
    w.put("delimiter", std::string(1, data.delimiter));
  }
  if ((data.source == data_source::npy || data.source == data_source::csv ||
       data.source == data_source::images || data.source == data_source::npz ||
       data.source == data_source::safetensors) &&
      !data.standardize) {
    w.raw("scale", numbers(data.scale));
    w.raw("mean", numbers(data.mean));
    w.raw("std", numbers(data.std));
  }
  if (data.validation > 0)
    w.put("validation", data.validation);
  if (data.standardize)
    w.put("normalize", "standard");
  if (data.source == data_source::images) {
    if (!data.test_path.empty())
      w.put("test_path", absolute(data.test_path));
    if (data.image_height > 0)
      w.raw("size", "[" + std::to_string(data.image_height) + ", " +
                        std::to_string(data.image_width) + "]");
    w.put("channels", data.channels);
    w.put("workers", data.workers);
    w.put("crop_padding", data.crop_padding);
    w.put("flip", data.flip);
  }
  if (data.source == data_source::tokens) {
    if (!data.test_path.empty())
      w.put("test_path", absolute(data.test_path));
    w.put("dtype", data.token_dtype);
    if (data.vocabulary > 0)
      w.put("vocab", data.vocabulary);
    w.put("windows", std::string(data.random_windows ? "random" : "tiled"));
    w.put("context", data.context);
  }
  if (data.source == data_source::text) {
    w.put("context", data.context);
    w.put("validation_every", data.validation_every);
  }
  w.put("synthetic_train", data.synthetic_train);
  w.put("synthetic_test", data.synthetic_test);
  w.put("synthetic_features", data.synthetic_features);
  w.put("synthetic_classes", data.synthetic_classes);
}

/// [parallel] averaging and its rule's keys, as the config gave them.
void write_averaging(toml_writer& w, const topology& t, const parallel_section& p) {
  if (p.rule == averaging_rule::async) {
    w.put("averaging", to_string(p.rule));
    w.put("max_staleness", p.max_staleness);
  } else if (p.rule != averaging_rule::synchronous) {
    w.put("averaging", to_string(p.rule));
    w.put("collective", to_string(t.averaging));
    w.put("sync_every", p.sync_every);
    if (p.rule == averaging_rule::diloco) {
      w.put("outer", p.outer_nesterov ? "nesterov" : "sgd");
      w.put("outer_lr", p.outer_lr);
      w.put("outer_momentum", p.outer_momentum);
    }
  } else {
    w.put("averaging", to_string(t.averaging));
  }
}

}  // namespace

std::string format_explicit(const topology& t, const run_config& config) {
  toml_writer w;
  auto source = config.path;
  std::replace(source.begin(), source.end(), '\n', ' ');
  w.comment("generated by troupe plan --eject from " + source + "; edit freely");
  w.comment("R = " + std::to_string(t.replicas) + " replicas, P = " + std::to_string(t.stages) +
            " stages; the [[actor]] and [[wire]] tables below are the whole graph");

  const auto& run = config.run;
  w.section("[run]");
  w.put("epochs", run.epochs);
  w.put("steps", run.steps);
  w.put("seed", static_cast<std::int64_t>(run.seed));
  // Paths absolute, like [data] path: the ejected file may be written anywhere, and a
  // config's relative paths resolve against its own directory.
  const auto absolute = [](const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  w.put("metrics", absolute(run.metrics));
  w.put("log_every", run.log_every);
  w.put("evaluate", run.evaluate);
  if (!run.trace.empty())
    w.put("trace", absolute(run.trace));
  w.put("trace_capacity", run.trace_capacity);
  w.put("watchdog", run.watchdog);
  if (!run.checkpoint.empty())
    w.put("checkpoint", absolute(run.checkpoint));
  w.put("checkpoint_every", run.checkpoint_every);
  w.put("checkpoint_keep", run.checkpoint_keep);
  w.put("checkpoint_keep_best", run.checkpoint_keep_best);
  if (!run.plugins.empty()) {
    // Absolute, like [data] path: the custom layers and actor kinds below need them.
    std::string plugins;
    for (const auto& plugin : run.plugins) {
      std::filesystem::path path = std::get<std::string>(plugin.value);
      if (path.is_relative())
        path = std::filesystem::path(config.directory) / path;
      plugins += (plugins.empty() ? "" : ", ") +
                 toml_string(std::filesystem::absolute(path).lexically_normal().string());
    }
    w.raw("plugins", "[" + plugins + "]");
  }

  write_data_section(w, config.data);

  w.section("[model]");
  if (config.model.loss_settings.empty()) {
    w.put("loss", config.model.loss);
  } else {
    std::string loss = "{ type = " + toml_string(config.model.loss);
    for (const auto& [key, value] : config.model.loss_settings)
      loss += ", " + toml_key(key) + " = " + toml_value(value);
    w.raw("loss", loss + " }");
  }
  if (!config.model.init_from.empty())
    w.put("init_from",
          std::filesystem::absolute(config.model.init_from).lexically_normal().string());

  const auto& o = config.optimizer;
  w.section("[optimizer]");
  w.put("type", to_string(o.type));
  w.put("lr", o.lr);
  w.put("momentum", o.momentum);
  w.put("dampening", o.dampening);
  w.put("nesterov", o.nesterov);
  w.raw("betas", "[" + toml_float(o.beta1) + ", " + toml_float(o.beta2) + "]");
  w.put("eps", o.eps);
  w.put("weight_decay", o.weight_decay);
  w.section("[optimizer.schedule]");
  w.put("type", to_string(o.schedule.type));
  w.put("warmup_steps", o.schedule.warmup_steps);
  w.put("step_size", o.schedule.step_size);
  w.put("gamma", o.schedule.gamma);
  w.put("min_lr", o.schedule.min_lr);

  w.section("[parallel]");
  std::string devices;
  for (const auto& device : t.devices)
    devices += (devices.empty() ? "" : ", ") + toml_string(device.to_string());
  w.raw("devices", "[" + devices + "]");
  w.put("microbatches", t.microbatches);
  w.put("schedule", to_string(t.schedule));
  if (t.virtual_stages > 1)
    w.put("virtual_stages", t.virtual_stages);
  write_averaging(w, t, config.parallel);
  w.put("share_devices", config.parallel.share_devices);
  w.put("bucket_kib", config.parallel.bucket_kib);
  w.put("shard_optimizer", config.parallel.shard_optimizer);
  if (config.parallel.reduce_bf16)
    w.put("reduce_dtype", "bf16");
  w.put("gloo_timeout", config.parallel.gloo_timeout);
  if (config.parallel.balance == replica_balance::weights) {
    std::string weights;
    for (auto weight : config.parallel.balance_weights)
      weights += (weights.empty() ? "" : ", ") + toml_float(weight);
    w.raw("balance", "[" + weights + "]");
  } else {
    w.put("balance", to_string(config.parallel.balance));
  }

  const auto& c = config.cluster;
  if (c.nodes > 0) {
    w.section("[cluster]");
    w.put("nodes", c.nodes);
    w.put("address", c.address);
    w.put("port", c.port);
    w.put("listen", c.listen);
    if (!c.secret_file.empty())
      w.put("secret_file", std::filesystem::absolute(c.secret_file).lexically_normal().string());
    w.put("timeout", c.timeout);
    w.put("heartbeat", c.heartbeat);
    w.put("node_timeout", c.node_timeout);
    if (c.link.given)
      w.put("link", describe_link(c.link));
    if (c.tls) {
      w.put("tls", true);
      const auto absolute = [](const std::string& path) {
        return std::filesystem::absolute(path).lexically_normal().string();
      };
      w.put("certificate", absolute(c.certificate));
      w.put("key", absolute(c.key));
      w.put("ca_file", absolute(c.ca_file));
      if (!c.key_passphrase_file.empty())
        w.put("key_passphrase_file", absolute(c.key_passphrase_file));
    }
  }

  for (const auto& a : t.actors)
    write_actor(w, a);
  for (const auto& wire : t.wires) {
    w.section("[[wire]]");
    w.put("from", wire.from);
    w.put("to", wire.to);
    w.put("kind", to_string(wire.kind));
    w.put("capacity", wire.capacity);
  }
  return w.str();
}

}  // namespace troupe
