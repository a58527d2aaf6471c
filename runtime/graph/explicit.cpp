// explicit.cpp: reads the explicit config form ([[actor]] and [[wire]] tables)
// into a topology.
//
// The config loader has already checked that every value is a scalar and kept each key's
// position; here each key gets its meaning, type and range, and errors point at the key.
// Whether the graph makes sense (wire ends exist, layers chain, shapes agree, replicas
// match) is validate_topology()'s work (topology_validate.cpp), which checks shorthand
// expansions the same way. Layer settings are the layer registry's: create_layer() checks
// them when the shapes are computed here.
//
// Accepted tables (keys in any order):
//
//   [[actor]]
//   name = "r0.layer_0"     # required, unique, at most limits::max_name_length bytes
//   kind = "layer"          # data_loader | layer | loss | averager | optimizer, or a
//                           #   kind a plugin registered (runtime/graph/actor_signature.hpp)
//   device = "cpu:0"        # required, one of [parallel] devices
//   replica = 0             # optional indices, replica < limits::max_replicas, stage and
//   stage = 0               #   layer < limits::max_layers; for a layer, replica and stage
//   layer = 0               #   default to 0 and `layer` (the model index) is required
//   type = "linear"         # kind = "layer" only: the layer type, then its settings
//   out = 4                 #   (every other key)
//   method = "central"      # kind = "averager" only: "central" | "ring" | "gloo",
//                           #   default [parallel] averaging
//   factor = 0.5            # a plugin's kind: every other key is its setting, kept in
//                           #   actor_plan::settings for its factory to check
//
//   [[wire]]
//   from = "loader"
//   to = "r0.layer_0"
//   kind = "activations"    # activations | labels | grads | ring | params
//   capacity = 2            # optional credits in [0, 2^31 - 1]; 0 (the default) = unbounded
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "runtime/base/limits.hpp"
#include "runtime/core/device_name.hpp"
#include "runtime/graph/actor_signature.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {
namespace {

const std::vector<std::string> common_actor_keys = {"name",    "kind",  "device",
                                                    "replica", "stage", "layer"};

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words)
    out += (out.empty() ? "'" : ", '") + word + "'";
  return out;
}

const char* value_type_name(const setting_value& value) {
  switch (value.value.index()) {
    case 0: return "an integer";
    case 1: return "a float";
    case 2: return "a boolean";
    default: return "a string";
  }
}

/// Reads the keys of one [[actor]] or [[wire]] table; `label` prefixes every error
/// ("[[actor]] #3", then "[[actor]] 'r0.layer_1'" once the name is known).
class table_reader {
 public:
  table_reader(const table_config& table, std::string label)
      : table_(table), label_(std::move(label)) {}

  void rename(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  const source_position& where() const { return table_.where; }

  const setting_value* find(const std::string& key) const {
    auto found = table_.settings.find(key);
    return found == table_.settings.end() ? nullptr : &found->second;
  }

  [[noreturn]] void fail(const source_position& at, const std::string& key,
                         const std::string& message) const {
    throw config_error(at, label_ + " " + key + ": " + message);
  }

  /// A required, non-empty string; `example` completes the hint when it is missing.
  std::string text(const std::string& key, const std::string& example) const {
    const auto* value = find(key);
    if (!value)
      throw config_error(
          where(), label_ + ": missing key '" + key + "' (e.g. " + key + " = " + example + ")");
    const auto* text = std::get_if<std::string>(&value->value);
    if (!text || text->empty())
      fail(value->where, key,
           std::string("expected a non-empty string, found ") +
               (text ? "an empty string" : value_type_name(*value)));
    return *text;
  }

  /// A required name of one of Enum's values (kinds.hpp, choices.hpp), parsed here once;
  /// `what` names it in messages ("wire kind").
  template <class Enum>
  Enum choice(const std::string& key, const std::string& what) const {
    auto valid = enum_names<Enum>();
    auto value = text(key, "\"" + valid.front() + "\"");
    auto parsed = parse_enum<Enum>(value);
    if (!parsed)
      fail(find(key)->where, key,
           "unknown " + what + " " + quote_user_text(value) + did_you_mean(value, valid) +
               " (expected one of " + join(valid) + ")");
    return *parsed;
  }

  /// An optional integer in [min, max]; the message states both ends, the real limit.
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                       std::int64_t max = std::numeric_limits<std::int32_t>::max()) const {
    const auto* value = find(key);
    if (!value)
      return fallback;
    const auto* number = std::get_if<std::int64_t>(&value->value);
    if (!number)
      fail(value->where, key, std::string("expected an integer, found ") + value_type_name(*value));
    if (*number < min || *number > max)
      fail(value->where, key,
           "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
               "], found " + std::to_string(*number));
    return *number;
  }

  /// Throws at the first key (in file order) that is not in `known`.
  void reject_unknown(const std::vector<std::string>& known, const std::string& hint) const {
    const setting_value* first = nullptr;
    std::string first_key;
    for (const auto& [key, value] : table_.settings) {
      if (std::find(known.begin(), known.end(), key) != known.end())
        continue;
      bool earlier =
          !first || value.where.line < first->where.line ||
          (value.where.line == first->where.line && value.where.column < first->where.column);
      if (earlier) {
        first = &value;
        first_key = key;
      }
    }
    if (first)
      throw config_error(first->where, label_ + ": unknown key '" + first_key + "'" +
                                           did_you_mean(first_key, known) + " (" + hint +
                                           "; valid keys: " + join(known) + ")");
  }

 private:
  const table_config& table_;
  std::string label_;
};

actor_plan read_actor(const table_config& table, std::size_t index, const run_config& config) {
  table_reader r(table, "[[actor]] #" + std::to_string(index + 1));
  actor_plan actor;
  actor.where = table.where;
  actor.name = r.text("name", "\"r0.layer_0\"");
  if (actor.name.size() > limits::max_name_length)
    r.fail(r.find("name")->where, "name",
           "the name " + quote_user_text(actor.name) + " is longer than " +
               std::to_string(limits::max_name_length) +
               " bytes (the limit for names in a config)");
  r.rename("[[actor]] " + quote_user_text(actor.name));
  // Any kind with a signature: the built-in ones and those of the plugins loaded.
  auto kind = r.text("kind", "\"layer\"");
  const auto* signature = find_actor_signature(kind);
  if (!signature) {
    auto kinds = actor_signature_kinds();
    r.fail(r.find("kind")->where, "kind",
           "unknown actor kind " + quote_user_text(kind) + did_you_mean(kind, kinds) +
               " (expected one of " + join(kinds) +
               "; a plugin's kind needs its plugin loaded: [run] plugins or --plugin)");
  }
  const bool built_in = signature->built_in;
  // The signature registry knows the built-in kinds by the names kinds.hpp gives them.
  auto parsed_kind = parse_enum<actor_kind>(kind);
  TROUPE_CHECK(parsed_kind.has_value() == built_in,
               "actor kind '" << kind << "' is " << (built_in ? "" : "not ")
                              << "built in, yet kinds.hpp " << (built_in ? "lacks" : "has")
                              << " it");
  actor.kind = parsed_kind.value_or(actor_kind::custom);
  if (!built_in)
    actor.custom_kind = kind;
  auto device = parse_device_name(r.text("device", "\"cpu:0\""));
  if (!device.ok())
    r.fail(r.find("device")->where, "device", device.error);
  actor.device = device.id;
  const bool is_layer = actor.kind == actor_kind::layer;
  // Indices, so bounded by the counts they index (Note [input limits]).
  actor.replica = static_cast<std::int32_t>(
      r.integer("replica", is_layer ? 0 : -1, 0, limits::max_replicas - 1));
  actor.stage =
      static_cast<std::int32_t>(r.integer("stage", is_layer ? 0 : -1, 0, limits::max_layers - 1));
  actor.layer = static_cast<std::int32_t>(r.integer("layer", -1, 0, limits::max_layers - 1));

  if (is_layer) {
    if (!r.find("layer"))
      throw config_error(table.where, r.label() +
                                          ": missing key 'layer' (the model layer's "
                                          "index, 0 for the first)");
    actor.math.type = r.text("type", "\"linear\"");
    actor.math.type_where = r.find("type")->where;
    actor.math.where = table.where;
    for (const auto& [key, value] : table.settings)
      if (key != "type" && std::find(common_actor_keys.begin(), common_actor_keys.end(), key) ==
                               common_actor_keys.end())
        actor.math.settings.emplace(key, value);
    return actor;
  }
  if (!built_in) {
    // A custom kind's settings are its factory's to read and check.
    for (const auto& [key, value] : table.settings)
      if (std::find(common_actor_keys.begin(), common_actor_keys.end(), key) ==
          common_actor_keys.end())
        actor.settings.emplace(key, value);
    return actor;
  }
  auto known = common_actor_keys;
  if (actor.kind == actor_kind::averager) {
    known.push_back("method");
    actor.method = config.parallel.averaging;
    actor.method_where = table.where;
    if (const auto* method = r.find("method")) {
      actor.method = r.choice<averaging_method>("method", "averaging method");
      actor.method_where = method->where;
    }
  }
  r.reject_unknown(known, "of the built-in kinds, only a layer actor takes settings of its own");
  return actor;
}

wire_plan read_wire(const table_config& table, std::size_t index) {
  table_reader r(table, "[[wire]] #" + std::to_string(index + 1));
  wire_plan wire;
  wire.where = table.where;
  wire.from = r.text("from", "\"loader\"");
  wire.to = r.text("to", "\"r0.layer_0\"");
  r.rename("[[wire]] " + quote_user_text(wire.from) + " -> " + quote_user_text(wire.to));
  wire.kind = r.choice<wire_kind>("kind", "wire kind");
  wire.capacity = r.integer("capacity", 0, 0);
  r.reject_unknown({"from", "to", "kind", "capacity"}, "a wire has only these");
  return wire;
}

/// The model's graph as the activations wires draw it, and its shapes: t.inputs[i] from
/// the incoming activations wires of model layer i's actor in the lowest replica that has
/// it (followed back through custom actors to a layer or the loader), t.shapes[i] the
/// per-sample input of layer i and t.shapes.back() the model's output, t.outputs[i] layer
/// i's output. A layer without incoming wires is read as the chain would (its error, a
/// missing wire, is validate_topology's); what only this graph can get wrong fails here.
void read_model_graph(topology& t, std::int64_t input_features) {
  std::map<std::int32_t, const actor_plan*> by_index;  // model index -> its lowest replica
  for (const auto& actor : t.actors) {
    if (actor.kind != actor_kind::layer)
      continue;
    auto& slot = by_index[actor.layer];
    if (!slot || actor.replica < slot->replica)
      slot = &actor;
  }
  const std::int32_t count = by_index.rbegin()->first + 1;
  std::vector<const actor_plan*> layers;
  for (std::int32_t i = 0; i < count; ++i) {
    auto found = by_index.find(i);
    if (found == by_index.end()) {
      const auto& last = *by_index.rbegin()->second;
      throw config_error(last.where, "no layer actor holds model layer " + std::to_string(i) +
                                         ", yet " + quote_user_text(last.name) +
                                         " has layer = " + std::to_string(last.layer) +
                                         "; number the model's layers 0, 1, 2, ... without gaps");
    }
    layers.push_back(found->second);
  }
  std::map<std::string, const actor_plan*> by_name;
  for (const auto& actor : t.actors)
    by_name.emplace(actor.name, &actor);
  std::map<std::string, std::vector<const wire_plan*>> incoming;  // activations, in order
  for (const auto& w : t.wires)
    if (w.kind == wire_kind::activations)
      incoming[w.to].push_back(&w);
  // The built-in actor an activations wire comes from, through custom actors (their
  // first incoming activations wire each); null when there is none or it loops.
  auto source_of = [&](const wire_plan& start) -> const actor_plan* {
    const wire_plan* w = &start;
    for (std::size_t hops = 0; hops <= t.wires.size(); ++hops) {
      auto from = by_name.find(w->from);
      if (from == by_name.end() || from->second->kind != actor_kind::custom)
        return from == by_name.end() ? nullptr : from->second;
      auto next = incoming.find(from->second->name);
      if (next == incoming.end())
        return nullptr;
      w = next->second.front();
    }
    return nullptr;
  };
  t.inputs.assign(layers.size(), {});
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& a = *layers[i];
    auto& reads = t.inputs[i];
    const wire_plan* second = nullptr;
    std::set<std::int32_t> seen;
    auto wires = incoming.find(a.name);
    for (const auto* in : wires == incoming.end() ? std::vector<const wire_plan*>{} : wires->second) {
      const auto& w = *in;
      const auto* from = source_of(w);
      if (from == nullptr || (from->kind != actor_kind::layer && from->kind != actor_kind::data_loader))
        continue;  // validate_topology names what is wrong with it
      const auto j = from->kind == actor_kind::layer ? from->layer : data_input;
      if (j != data_input && j >= static_cast<std::int32_t>(i))
        throw config_error(w.where, "activations wire from " + quote_user_text(w.from) + " to " +
                                        quote_user_text(w.to) + ": it goes back from layer " +
                                        std::to_string(j) + " to layer " + std::to_string(i) +
                                        " (a cycle, or layers numbered out of order); a layer "
                                        "reads earlier layers only");
      if (!seen.insert(j).second)
        throw config_error(w.where, "activations wire from " + quote_user_text(w.from) + " to " +
                                        quote_user_text(w.to) + ": a second wire from " +
                                        (j == data_input ? std::string("the data loader")
                                                         : "layer " + std::to_string(j)) +
                                        " into layer " + std::to_string(i) +
                                        "; one wire per input");
      if (!reads.empty() && second == nullptr)
        second = &w;
      reads.push_back(j);
    }
    const bool merges = create_layer(a.math)->sums_inputs();
    if (reads.size() > 1 && !merges)
      throw config_error(second->where,
                         quote_user_text(a.name) + " (layer " + std::to_string(i) +
                             ") has " + std::to_string(reads.size()) +
                             " incoming activations wires, needs 1 (only a layer that sums its "
                             "inputs, like 'add', reads several); this one, from " +
                             quote_user_text(second->from) +
                             " to " + quote_user_text(second->to) + ", is one too many");
    if (reads.size() == 1 && merges)
      throw config_error(a.where, quote_user_text(a.name) + " is " +
                                      quote_user_text(a.math.type) +
                                      ", which sums two or more inputs, and one activations "
                                      "wire comes in");
    if (reads.empty())
      reads.push_back(static_cast<std::int32_t>(i) - 1);
  }
  std::vector<const layer_config*> configs;
  std::vector<source_position> where;
  for (const auto* a : layers) {
    configs.push_back(&a->math);
    where.push_back(a->where);
  }
  auto shapes = infer_shapes(configs, t.inputs, {input_features}, where);
  t.shapes = shapes.input;
  t.shapes.push_back(shapes.output.back());
  t.outputs = shapes.output;
}

}  // namespace

topology topology_from_explicit(const run_config& config, std::int64_t input_features) {
  TROUPE_CHECK(config.is_explicit(), "topology_from_explicit on a shorthand config");
  topology t;
  t.devices = runnable_devices(config);
  t.nodes = config.nodes();
  t.microbatches = config.parallel.microbatches;
  t.schedule = config.parallel.schedule;
  t.virtual_stages = config.parallel.virtual_stages;
  t.averaging = config.parallel.averaging;
  t.rule = config.parallel.rule;
  t.sync_every = config.parallel.sync_every;
  t.max_staleness = config.parallel.max_staleness;
  for (const auto* tables : {&config.actors, &config.wires})
    if (static_cast<std::int64_t>(tables->size()) > limits::max_actors)
      throw config_error((*tables)[static_cast<std::size_t>(limits::max_actors)].where,
                         "more than " + std::to_string(limits::max_actors) + " [[" +
                             (tables == &config.actors ? "actor" : "wire") +
                             "]] tables (the limit); found " + std::to_string(tables->size()));
  for (std::size_t i = 0; i < config.actors.size(); ++i)
    t.actors.push_back(read_actor(config.actors[i], i, config));
  for (std::size_t i = 0; i < config.wires.size(); ++i)
    t.wires.push_back(read_wire(config.wires[i], i));

  std::set<std::int32_t> replicas, stages;
  for (const auto& actor : t.actors)
    if (actor.kind == actor_kind::layer) {
      replicas.insert(actor.replica);
      stages.insert(actor.stage);
    }
  if (replicas.empty())
    throw config_error(t.actors.front().where,
                       "an explicit config needs at least one [[actor]] with kind = \"layer\"");
  t.replicas = static_cast<std::int64_t>(replicas.size());
  t.stages = static_cast<std::int64_t>(stages.size());
  read_model_graph(t, input_features);
  return t;
}

}  // namespace troupe
