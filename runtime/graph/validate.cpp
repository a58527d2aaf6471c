// validate.cpp: validate_topology(), the checks every topology passes before
// anything is spawned, whether it came from the shorthand or from [[actor]] / [[wire]].
//
// The checks run from the local to the global: names, devices and wire ends first, then
// each actor's wires, then cycles, the replicas (each has every layer, the same as replica
// 0's), shapes and order along the activation chains, the gradient and parameter paths,
// and last the whole run (devices, batch size). So a broken config gets the error nearest
// its cause, at the wire's or actor's table.
// Nothing here creates an actor; layers are created only to ask for their parameters.
//
// Note [custom actors]
// A kind a plugin registered is known here only by its signature (actor_signature.hpp):
// a wire may touch it when the signature says so. Such an actor may sit on any path, so
// the paths that matter (a layer's gradients to its averager or optimizer, parameters
// back from the optimizer) are followed through custom actors to the built-in actors at
// their ends, and those must be the right ones. What a custom actor does to the data is
// its own business: shapes are not checked on activations wires that touch one.
#include <algorithm>
#include <functional>
#include <set>

#include "runtime/base/limits.hpp"
#include "runtime/graph/actor_signature.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/graph/topology.hpp"

namespace troupe {
namespace {

/// Which kinds of actors each kind of wire may connect (topology.hpp says what flows).
std::vector<std::pair<actor_kind, actor_kind>> allowed_ends(wire_kind kind) {
  using k = actor_kind;
  switch (kind) {
    case wire_kind::activations:
      return {{k::data_loader, k::layer}, {k::layer, k::layer}, {k::layer, k::loss}};
    case wire_kind::labels:
      return {{k::data_loader, k::loss}};
    case wire_kind::grads:
      return {{k::layer, k::averager}, {k::layer, k::optimizer}, {k::averager, k::optimizer}};
    case wire_kind::ring:
      return {{k::averager, k::averager}};
    case wire_kind::params:
      return {{k::optimizer, k::layer}};
  }
  TROUPE_CHECK(false, "wire kind " << static_cast<int>(kind));
  return {};
}

std::string article(const std::string& kind) {
  return (std::string{"aeiou"}.find(kind[0]) != std::string::npos ? "an " : "a ") + kind;
}

std::string word_list(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words)
    out += (out.empty() ? "" : ", ") + word;
  return out.empty() ? "no" : out;  // "accepts no wires"
}

std::string named(const std::string& name) {
  return quote_user_text(name);
}

std::string setting_to_string(const setting_value& value) {
  struct printer {
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return std::to_string(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
  };
  return std::visit(printer{}, value.value);
}

/// How `other`'s layer differs from `reference`'s ("" when it does not): type and
/// setting values, positions aside.
std::string math_difference(const layer_config& reference, const layer_config& other) {
  if (reference.type != other.type)
    return "it is " + named(other.type) + ", not " + named(reference.type);
  std::set<std::string> keys;
  for (const auto& entry : reference.settings)
    keys.insert(entry.first);
  for (const auto& entry : other.settings)
    keys.insert(entry.first);
  for (const auto& key : keys) {
    auto a = reference.settings.find(key);
    auto b = other.settings.find(key);
    auto show = [&](auto found, const layer_config& config) {
      return found == config.settings.end() ? std::string("unset")
                                            : setting_to_string(found->second);
    };
    bool same = a != reference.settings.end() && b != other.settings.end() &&
                a->second.value == b->second.value;
    if (!same)
      return "its " + key + " is " + show(b, other) + ", not " + show(a, reference);
  }
  return {};
}

class validator {
 public:
  validator(const topology& t, const run_config& config, shape_t loss_input)
      : t_(t), config_(config), loss_input_(std::move(loss_input)) {
    TROUPE_CHECK(!t.shapes.empty(), "a topology without shapes");
    layers_ = static_cast<std::int32_t>(t.shapes.size()) - 1;
    TROUPE_CHECK(t.inputs.size() == static_cast<std::size_t>(layers_) &&
                     t.outputs.size() == static_cast<std::size_t>(layers_),
                 "a topology without its model graph");
    consumers_ = consumers_of(t.inputs);
  }

  void run() {
    check_names();
    check_kinds();
    check_wire_ends();
    check_devices();
    check_loader();
    check_indices();
    check_layer_activations();
    check_cycles();
    check_loss_inputs();
    check_replicas();
    check_shapes();
    check_chains();
    check_parameters();
    check_averagers();
    check_optimizers();
    check_interleaving();
    check_turn_credits();
    check_device_sharing();
    check_batch();
  }

 private:
  using wire_list = std::vector<const wire_plan*>;

  [[noreturn]] void fail(const source_position& at, const std::string& message) const {
    throw config_error(at, message);
  }

  const actor_plan& actor(const std::string& name) const { return t_.actors[index_.at(name)]; }

  /// Not one of the five built-in kinds (check_kinds() made sure it has a signature).
  static bool is_custom(const actor_plan& a) { return a.kind == actor_kind::custom; }
  wire_list incoming(const actor_plan& a, wire_kind kind) const {
    return select(incoming_.at(a.name), kind);
  }
  wire_list outgoing(const actor_plan& a, wire_kind kind) const {
    return select(outgoing_.at(a.name), kind);
  }
  static wire_list select(const wire_list& wires, wire_kind kind) {
    wire_list out;
    for (const auto* wire : wires)
      if (wire->kind == kind)
        out.push_back(wire);
    return out;
  }
  std::vector<const actor_plan*> of_kind(actor_kind kind) const {
    std::vector<const actor_plan*> out;
    for (const auto& a : t_.actors)
      if (a.kind == kind)
        out.push_back(&a);
    return out;
  }

  /// "'r0.layer_1' (layer 1 of replica 0)"
  static std::string describe(const actor_plan& a) {
    if (a.kind != actor_kind::layer)
      return named(a.name);
    return named(a.name) + " (layer " + std::to_string(a.layer) + " of replica " +
           std::to_string(a.replica) + ")";
  }

  /// Exactly `count` wires: too few is an error at the actor, too many at the first wire
  /// beyond `count`. `what` names the wires ("incoming grads wires"), `hint` what they are for.
  void expect_count(const actor_plan& a, const wire_list& wires, std::size_t count,
                    const std::string& what, const std::string& hint = "") const {
    if (wires.size() == count)
      return;
    auto message = describe(a) + " has " + std::to_string(wires.size()) + " " + what + ", needs " +
                   std::to_string(count);
    if (wires.size() < count)
      fail(a.where, message + (hint.empty() ? "" : " (" + hint + ")"));
    const auto& extra = *wires[count];
    fail(extra.where, message + "; this one, from " + named(extra.from) + " to " + named(extra.to) +
                          ", is one too many");
  }

  void check_names() {
    for (std::size_t i = 0; i < t_.actors.size(); ++i) {
      const auto& a = t_.actors[i];
      if (a.name.empty())
        fail(a.where, "an actor without a name");
      auto [found, fresh] = index_.emplace(a.name, i);
      if (!fresh)
        fail(a.where, "actor name " + named(a.name) + " is used twice (first at " +
                          t_.actors[found->second].where.to_string() + "); names must be unique");
      incoming_[a.name];
      outgoing_[a.name];
    }
  }

  void check_kinds() const {
    for (const auto& a : t_.actors)
      if (!find_actor_signature(a.kind_name())) {
        auto kinds = actor_signature_kinds();
        fail(a.where, named(a.name) + " is of unknown actor kind " + named(a.kind_name()) +
                          did_you_mean(a.kind_name(), kinds) + " (registered: " + word_list(kinds) +
                          "; load the plugin that defines it with [run] plugins or --plugin)");
      }
  }

  /// Why a wire of its kind may not go from `from` to `to`; "" when it may: the built-in
  /// table allows it, or (Note [custom actors]) one end is custom and both signatures agree.
  static std::string wire_refusal(const wire_plan& w, const actor_plan& from, const actor_plan& to) {
    auto ends = allowed_ends(w.kind);
    auto pair = std::make_pair(from.kind, to.kind);
    if (std::find(ends.begin(), ends.end(), pair) != ends.end())
      return {};
    const auto& sender = *find_actor_signature(from.kind_name());
    const auto& receiver = *find_actor_signature(to.kind_name());
    if (sender.built_in && receiver.built_in) {
      std::string allowed;
      for (const auto& [a, b] : ends)
        allowed +=
            (allowed.empty() ? "" : ", ") + std::string(to_string(a)) + " -> " + to_string(b);
      return to_string(w.kind) + std::string(" wires go ") + allowed;
    }
    std::string reasons;
    if (!sender.emits_wire(to_string(w.kind)))
      reasons += article(from.kind_name()) + " emits " + word_list(sender.emits) + " wires";
    if (!receiver.accepts_wire(to_string(w.kind)))
      reasons += (reasons.empty() ? "" : ", and ") + article(to.kind_name()) + " accepts " +
                 word_list(receiver.accepts) + " wires";
    return reasons;
  }

  void check_wire_ends() {
    std::vector<std::string> names;
    for (const auto& a : t_.actors)
      names.push_back(a.name);
    for (const auto& w : t_.wires) {
      for (const auto* end : {&w.from, &w.to})
        if (!index_.count(*end))
          fail(w.where, std::string("wire ") + (end == &w.from ? "from" : "to") + " " +
                            named(*end) + ": no actor has that name" + did_you_mean(*end, names));
      const auto& from = actor(w.from);
      const auto& to = actor(w.to);
      auto refusal = wire_refusal(w, from, to);
      if (!refusal.empty())
        fail(w.where, article(to_string(w.kind)) + " wire cannot go from " + named(w.from) + " (" +
                          article(from.kind_name()) + ") to " + named(w.to) + " (" +
                          article(to.kind_name()) + "); " + refusal);
      if (w.capacity < 0)
        fail(w.where,
             "wire capacity must be >= 0 (0: unbounded), found " + std::to_string(w.capacity));
      outgoing_[w.from].push_back(&w);
      incoming_[w.to].push_back(&w);
    }
  }

  void check_devices() {
    std::string listed;
    for (const auto& d : t_.devices)
      listed += (listed.empty() ? "" : ", ") + d.to_string();
    for (const auto& a : t_.actors)
      if (std::find(t_.devices.begin(), t_.devices.end(), a.device) == t_.devices.end())
        fail(a.where, named(a.name) + " runs on " + a.device.to_string() +
                          ", which [parallel] devices does not list (it lists " + listed + ")");
    // Every node of the run hosts an actor: a process with nothing to run is a config
    // for fewer nodes (or devices not yet named for their node).
    for (std::int64_t node = 0; node < t_.nodes; ++node)
      if (std::none_of(t_.actors.begin(), t_.actors.end(),
                       [&](const actor_plan& a) { return a.device.node == node; }))
        fail(config_.parallel.where,
             "the run has " + std::to_string(t_.nodes) + " nodes, and no actor runs on node" +
                 std::to_string(node) + " (devices " + listed + "); name its devices like 'node" +
                 std::to_string(node) + "/cpu:0' in [parallel] devices, or run on fewer nodes");
  }

  void check_loader() {
    auto loaders = of_kind(actor_kind::data_loader);
    if (loaders.empty())
      fail(t_.actors.empty() ? source_position{config_.path} : t_.actors.front().where,
           "no data_loader actor: a run has exactly one (add an [[actor]] with kind = "
           "\"data_loader\")");
    if (loaders.size() > 1)
      fail(loaders[1]->where, "a second data_loader " + named(loaders[1]->name) +
                                  " (the first is " + named(loaders[0]->name) + " at " +
                                  loaders[0]->where.to_string() + "); a run has exactly one");
  }

  void check_indices() {
    auto in_range = [&](const actor_plan& a, const char* key, std::int32_t value,
                        std::int64_t count, const std::string& counted) {
      if (value < 0 || value >= count)
        fail(a.where, named(a.name) + " has " + key + " = " + std::to_string(value) + ", but " +
                          counted + " numbered 0.." + std::to_string(count - 1));
    };
    for (const auto& a : t_.actors) {
      bool needs_layer = a.kind == actor_kind::layer || a.kind == actor_kind::averager ||
                         a.kind == actor_kind::optimizer;
      if (needs_layer && a.layer < 0)
        fail(a.where, article(a.kind_name()) + " needs the model layer it serves: " +
                          named(a.name) + " has no layer = N");
      if (needs_layer)
        in_range(a, "layer", a.layer, layers_, "the model's layers are");
      if (a.kind == actor_kind::layer) {
        in_range(a, "replica", a.replica, t_.replicas, "the replicas are");
        in_range(a, "stage", a.stage, t_.stages, "the stages are");
      }
      if ((a.kind == actor_kind::loss || a.kind == actor_kind::optimizer ||
           a.kind == actor_kind::averager) &&
          a.replica >= 0)
        in_range(a, "replica", a.replica, t_.replicas, "the replicas are");
      // Their stage names them in traces (the stage of their layer, or the last): in range.
      if ((a.kind == actor_kind::loss || a.kind == actor_kind::optimizer ||
           a.kind == actor_kind::averager) &&
          a.stage >= 0)
        in_range(a, "stage", a.stage, t_.stages, "the stages are");
      // Keys a kind does not read are refused, not ignored: a user who wrote one meant
      // something by it.
      if (a.kind == actor_kind::data_loader && (a.replica >= 0 || a.stage >= 0 || a.layer >= 0))
        fail(a.where, named(a.name) + " is the data loader, which serves every replica, stage "
                                      "and layer: it takes no " +
                          std::string{a.replica >= 0 ? "replica" : a.stage >= 0 ? "stage" : "layer"} +
                          " = N");
      if (a.kind == actor_kind::loss && a.layer >= 0)
        fail(a.where, named(a.name) + " is a loss, which reads the model's last layer: it takes no "
                                      "layer = N");
      if (is_custom(a)) {
        // Optional for a custom actor, but in range when given.
        if (a.layer >= 0)
          in_range(a, "layer", a.layer, layers_, "the model's layers are");
        if (a.replica >= 0)
          in_range(a, "replica", a.replica, t_.replicas, "the replicas are");
        // The data loader sends each replica its own micro-batches and labels, picking the
        // receiver of replica r by its replica.
        for (const auto* w : incoming_.at(a.name))
          if (actor(w->from).kind == actor_kind::data_loader && a.replica < 0)
            fail(w->where, "the data loader sends " + std::string(to_string(w->kind)) + " to " +
                               named(a.name) + " by replica, and " + named(a.name) +
                               " has none: give it replica = N");
      }
    }
  }

  void check_layer_activations() const {
    if (of_kind(actor_kind::loss).empty()) {
      const actor_plan* last = nullptr;
      for (const auto* a : of_kind(actor_kind::layer))
        if (a->layer == layers_ - 1 && (!last || a->replica < last->replica))
          last = a;
      TROUPE_CHECK(last, "no actor for the last layer");
      fail(last->where, "no loss actor: the model's last layer " + named(last->name) +
                            " must send its activations to a loss; add an [[actor]] with "
                            "kind = \"loss\" and an activations [[wire]] from " +
                            named(last->name) + " to it");
    }
    for (const auto* a : of_kind(actor_kind::layer)) {
      const auto& reads = t_.inputs[a->layer];
      const auto readers = consumers_[a->layer].size() + (a->layer == layers_ - 1 ? 1 : 0);
      if (readers == 0)
        fail(a->where, describe(*a) + " feeds nothing: no later layer reads its output (an "
                                      "activations wire from it to a later layer is missing)");
      expect_count(*a, incoming(*a, wire_kind::activations), reads.size(),
                   "incoming activations wires",
                   reads.size() == 1 ? "its input, from the data loader or the previous layer"
                                     : "one per input of the model's layer " +
                                           std::to_string(a->layer));
      expect_count(*a, outgoing(*a, wire_kind::activations), readers,
                   "outgoing activations wires",
                   readers == 1 ? "to the next layer or the loss"
                                : "one to each layer that reads layer " +
                                      std::to_string(a->layer));
      // Its ports are told apart by the actor at the other end (actors/training/layer_actor.cpp).
      for (bool in : {true, false}) {
        std::set<std::string> peers;
        for (const auto* w : in ? incoming(*a, wire_kind::activations)
                                : outgoing(*a, wire_kind::activations))
          if (!peers.insert(in ? w->from : w->to).second)
            fail(w->where, activations_wire(*w) + "a second activations wire between " +
                               named(w->from) + " and " + named(w->to) + "; one wire per input");
      }
    }
  }

  void check_loss_inputs() const {
    for (const auto* a : of_kind(actor_kind::loss)) {
      expect_count(*a, incoming(*a, wire_kind::activations), 1, "incoming activations wires");
      expect_count(*a, incoming(*a, wire_kind::labels), 1, "incoming labels wires",
                   "from the data loader");
    }
  }

  // Depth-first, with a stack of its own: a chain of 50,000 layers must not take 50,000
  // frames of the thread's stack (Note [input limits] in runtime/base/limits.hpp).
  void check_cycles() const {
    std::map<std::string, int> state;  // 0 unvisited, 1 on the path, 2 done
    // The path from the root: each actor with its outgoing activations wires and the next
    // of them to follow.
    struct frame {
      const std::string* name;
      std::vector<const wire_plan*> wires;
      std::size_t next = 0;
    };
    std::vector<frame> path;
    auto enter = [&](const std::string& name) {
      state[name] = 1;
      path.push_back({&name, outgoing(actor(name), wire_kind::activations)});
    };
    for (const auto& a : t_.actors) {
      if (state[a.name] != 0)
        continue;
      enter(a.name);
      while (!path.empty()) {
        auto& top = path.back();
        if (top.next == top.wires.size()) {
          state[*top.name] = 2;
          path.pop_back();
          continue;
        }
        const auto* w = top.wires[top.next++];
        if (state[w->to] == 1) {
          std::string cycle;
          auto start = std::find_if(path.begin(), path.end(),
                                    [&](const frame& f) { return *f.name == w->to; });
          for (auto it = start; it != path.end(); ++it)
            cycle += named(*it->name) + " -> ";
          fail(w->where, "activations wires form a cycle: " + cycle + named(w->to) +
                             "; activations flow one way, from the data loader to the losses");
        }
        if (state[w->to] == 0)
          enter(actor(w->to).name);
      }
    }
  }

  /// Calls f(wire, from, to) for every activations wire, in wire order.
  template <class F>
  void for_each_activations_wire(F f) const {
    for (const auto& w : t_.wires)
      if (w.kind == wire_kind::activations)
        f(w, actor(w.from), actor(w.to));
  }

  /// "activations wire from A to B: ", how a message about such a wire starts.
  std::string activations_wire(const wire_plan& w) const {
    return "activations wire from " + named(w.from) + " to " + named(w.to) + ": ";
  }

  void check_shapes() const {
    for_each_activations_wire([&](const wire_plan& w, const actor_plan& from,
                                  const actor_plan& to) {
      if (is_custom(from) || is_custom(to))
        return;  // Note [custom actors]
      const auto& out =
          from.kind == actor_kind::layer ? t_.outputs[from.layer] : t_.shapes.front();
      const auto& in = to.kind == actor_kind::layer ? t_.shapes[to.layer] : loss_input_;
      if (out == in)
        return;
      fail(w.where,
           activations_wire(w) + named(w.from) + " puts out " + shape_to_string(out) +
               " per sample but " + named(w.to) + " takes " + shape_to_string(in) +
               (to.kind == actor_kind::loss ? ", one logit per class of the data set; change the "
                                              "last layer's 'out'"
                                            : ""));
    });
  }

  void check_chains() const {
    for_each_activations_wire([&](const wire_plan& w, const actor_plan& from,
                                  const actor_plan& to) {
      auto here = activations_wire(w);
      if (from.kind == actor_kind::data_loader && to.kind == actor_kind::layer && to.layer != 0)
        fail(w.where, here + "the data loader feeds each replica's layer 0, and " + named(to.name) +
                          " is layer " + std::to_string(to.layer));
      if (from.kind != actor_kind::layer)
        return;
      const auto& readers = consumers_[from.layer];
      if (to.kind == actor_kind::layer &&
          std::find(readers.begin(), readers.end(), to.layer) == readers.end()) {
        std::string feeds;
        for (auto reader : readers)
          feeds += (feeds.empty() ? "" : ", ") + std::to_string(reader);
        fail(w.where, here + "layer " + std::to_string(from.layer) + " must feed layer " +
                          (feeds.empty() ? "none" : feeds) + ", not layer " +
                          std::to_string(to.layer));
      }
      if (to.kind == actor_kind::loss && from.layer != layers_ - 1)
        fail(w.where, here + "only the model's last layer (" + std::to_string(layers_ - 1) +
                          ") feeds a loss, and " + named(from.name) + " is layer " +
                          std::to_string(from.layer));
      if (to.replica >= 0 && to.replica != from.replica)
        fail(w.where, here + "it crosses from replica " + std::to_string(from.replica) +
                          " to replica " + std::to_string(to.replica));
      if (to.kind == actor_kind::layer && to.stage < from.stage)
        fail(w.where, here + "it goes back from stage " + std::to_string(from.stage) +
                          " to stage " + std::to_string(to.stage));
    });
  }

  void check_replicas() {
    // by_replica[r][i]: replica r's actor for model layer i
    std::vector<std::vector<const actor_plan*>> by_replica(
        t_.replicas, std::vector<const actor_plan*>(layers_, nullptr));
    for (const auto* a : of_kind(actor_kind::layer)) {
      auto& slot = by_replica[a->replica][a->layer];
      if (slot)
        fail(a->where, "replica " + std::to_string(a->replica) + " has layer " +
                           std::to_string(a->layer) + " twice: " + named(slot->name) + " (at " +
                           slot->where.to_string() + ") and " + named(a->name));
      slot = a;
    }
    for (std::int64_t r = 0; r < t_.replicas; ++r)
      for (std::int32_t i = 0; i < layers_; ++i) {
        const auto* a = by_replica[r][i];
        const actor_plan* reference = nullptr;
        for (const auto& row : by_replica)
          if (!reference)
            reference = row[i];
        TROUPE_CHECK(reference, "no replica holds layer " << i);
        if (!a) {
          // Point at the replica's layer before the gap, else at its first layer.
          const actor_plan* near = nullptr;
          for (const auto* b : by_replica[r])
            if (b && (!near || b->layer < i))
              near = b;
          fail(near ? near->where : reference->where,
               "replica " + std::to_string(r) + " has no layer " + std::to_string(i) + " (" +
                   named(reference->name) + " is layer " + std::to_string(i) + " of replica " +
                   std::to_string(reference->replica) + "); every replica runs the whole model");
        }
        auto difference = math_difference(by_replica[0][i]->math, a->math);
        if (!difference.empty())
          fail(a->where, describe(*a) + " differs from " + describe(*by_replica[0][i]) + ": " +
                             difference + "; every replica runs the same model");
      }
    has_parameters_.resize(layers_);
    for (std::int32_t i = 0; i < layers_; ++i)
      has_parameters_[i] = !create_layer(by_replica[0][i]->math)->parameters(t_.shapes[i]).empty();
  }

  /// The built-in actors that what flows on `start` reaches through custom actors
  /// (Note [custom actors]): downstream along the wires of its kind when `forward`, else
  /// upstream. A custom actor with no onward wire of that kind fails at `start`, naming
  /// `what` flows and `where_to` should go; so does a path that reaches no built-in actor.
  std::vector<const actor_plan*> follow(const wire_plan& start, bool forward,
                                        const std::string& what,
                                        const std::string& where_to) const {
    std::vector<const actor_plan*> reached;
    std::set<std::string> seen;
    // The wires still to follow, latest first; a stack of its own rather than recursion,
    // for a long chain of custom actors (Note [input limits]). Wires are taken in the
    // order recursion would take them, so the first failure is the same.
    std::vector<const wire_plan*> pending{&start};
    while (!pending.empty()) {
      const auto& w = *pending.back();
      pending.pop_back();
      const auto& next = actor(forward ? w.to : w.from);
      if (!is_custom(next)) {
        reached.push_back(&next);
        continue;
      }
      if (!seen.insert(next.name).second)
        continue;
      auto onward = forward ? outgoing(next, start.kind) : incoming(next, start.kind);
      if (onward.empty())
        fail(start.where,
             what + (forward ? " go to " : " come from ") + named(next.name) + " (" +
                 article(next.kind_name()) + "), which " +
                 (forward ? "sends them on to no one: add a " + std::string(to_string(start.kind)) +
                                " wire from " + named(next.name) + " to " + where_to
                          : "gets them from no one: add a " + std::string(to_string(start.kind)) +
                                " wire to " + named(next.name) + " from " + where_to));
      for (auto it = onward.rbegin(); it != onward.rend(); ++it)
        pending.push_back(*it);
    }
    if (reached.empty())
      fail(start.where, what + " go round a cycle of custom actors and never reach " + where_to);
    return reached;
  }

  /// " (through 'scaler')" when `w`'s other end is a custom actor, else "".
  std::string through(const wire_plan& w, bool forward) const {
    const auto& next = actor(forward ? w.to : w.from);
    return is_custom(next) ? " (through " + named(next.name) + ")" : "";
  }

  void check_parameters() const {
    for (const auto* a : of_kind(actor_kind::layer)) {
      auto params = incoming(*a, wire_kind::params);
      auto grads = outgoing(*a, wire_kind::grads);
      if (!has_parameters_[a->layer]) {
        for (const auto* w : params.empty() ? grads : params)
          fail(w->where, describe(*a) + " is " + named(a->math.type) +
                             ", which has no parameters: remove this " +
                             std::string(to_string(w->kind)) + " wire");
        continue;
      }
      expect_count(*a, params, 1, "params wires", "from the optimizer that owns its parameters");
      expect_count(*a, grads, 1, "outgoing grads wires", "to an averager or an optimizer");
      auto sinks = follow(*grads[0], true, "the gradients of " + describe(*a),
                          "an averager or an optimizer");
      auto sources = follow(*params[0], false, "the parameters of " + describe(*a),
                            "an optimizer");
      for (const auto* w : {params[0], grads[0]}) {
        bool forward = w == grads[0];
        for (const auto* other : forward ? sinks : sources)
          if (other->layer != a->layer)
            fail(w->where, describe(*a) + " is wired to " + named(other->name) +
                               through(*w, forward) + ", which serves layer " +
                               std::to_string(other->layer));
      }
      for (const auto* sink : sinks)
        if (t_.rule == averaging_rule::async && sink->kind != actor_kind::optimizer)
          fail(grads[0]->where, "with averaging = \"async\" the gradients of " + describe(*a) +
                                    " go to its layer's server (an optimizer), not to " +
                                    named(sink->name) + through(*grads[0], true));
        else if (t_.replicas > 1 && t_.rule != averaging_rule::async &&
                 sink->kind != actor_kind::averager)
          fail(grads[0]->where, "with " + std::to_string(t_.replicas) +
                                    " replicas the gradients of " + describe(*a) +
                                    " must be averaged: send them to an averager, not to " +
                                    named(sink->name) + through(*grads[0], true));
    }
  }

  void check_averagers() const {
    std::map<std::int32_t, std::vector<const actor_plan*>> rings;  // layer -> ring averagers
    std::map<std::int32_t, std::vector<const actor_plan*>> glooed;  // layer -> gloo averagers
    for (const auto* v : of_kind(actor_kind::averager)) {
      if (v->method != t_.averaging)
        fail(v->method_where, "averager " + named(v->name) + " has method " +
                                  named(to_string(v->method)) + ", but [parallel] averaging is " +
                                  named(to_string(t_.averaging)) + "; a run averages one way");
      auto from_layers = incoming(*v, wire_kind::grads);
      expect_count(*v, outgoing(*v, wire_kind::grads), 1, "outgoing grads wires",
                   "to its optimizer");
      const auto& out = *outgoing(*v, wire_kind::grads)[0];
      for (const auto* sink : follow(out, true, "the sums of averager " + named(v->name),
                                     "its optimizer"))
        if (sink->layer != v->layer)
          fail(out.where, "averager " + named(v->name) + " serves layer " +
                              std::to_string(v->layer) + " but feeds " + named(sink->name) +
                              through(out, true) + ", which serves layer " +
                              std::to_string(sink->layer));
      if (v->method == averaging_method::central) {
        auto ring = incoming(*v, wire_kind::ring);
        for (const auto* w : outgoing(*v, wire_kind::ring))
          ring.push_back(w);
        for (const auto* w : ring)
          fail(w->where, "averager " + named(v->name) +
                             " averages centrally; ring wires are for "
                             "ring averagers");
        expect_count(*v, from_layers, static_cast<std::size_t>(t_.replicas), "incoming grads wires",
                     "one from each replica's layer " + std::to_string(v->layer));
        continue;
      }
      // Ring and gloo: one averager per replica, fed by that replica's layer.
      const std::string method = to_string(v->method);
      if (v->replica < 0)
        fail(v->where, method + " averager " + named(v->name) +
                           " needs the replica it belongs to "
                           "(replica = N)");
      expect_count(*v, from_layers, 1, "incoming grads wires", "from its replica's layer");
      for (const auto* source :
           follow(*from_layers[0], false,
                  "the gradients " + method + " averager " + named(v->name) + " sums",
                  "its replica's layer"))
        if (source->replica != v->replica)
          fail(from_layers[0]->where, method + " averager " + named(v->name) + " of replica " +
                                          std::to_string(v->replica) + " gets the gradients of " +
                                          describe(*source) + through(*from_layers[0], false));
      if (v->method == averaging_method::gloo) {
        auto ring = incoming(*v, wire_kind::ring);
        for (const auto* w : outgoing(*v, wire_kind::ring))
          ring.push_back(w);
        for (const auto* w : ring)
          fail(w->where, "averager " + named(v->name) +
                             " averages through gloo; ring wires are for ring averagers");
        if (v->device.type != device_type::cpu)
          fail(v->where, "gloo averager " + named(v->name) + " is on " + v->device.to_string() +
                             ", but gloo sums host memory: put it on a cpu device, or use "
                             "averaging = \"ring\"");
        if (v->replica >= t_.replicas)
          fail(v->where, "gloo averager " + named(v->name) + " has replica " +
                             std::to_string(v->replica) + ", but the run has " +
                             std::to_string(t_.replicas) + " replicas (0 .. " +
                             std::to_string(t_.replicas - 1) + ")");
        glooed[v->layer].push_back(v);
        continue;
      }
      // Note [sharded optimizer]: the averager and its optimizer pass the shard back and
      // forth, so nothing may sit between them (a gradient clipper would see a shard).
      if (config_.parallel.shard_optimizer && actor(out.to).kind != actor_kind::optimizer)
        fail(out.where, "ring averager " + named(v->name) + " sends its sums to " + named(out.to) +
                            " (" + article(actor(out.to).kind_name()) +
                            "), but with [parallel] shard_optimizer = true it exchanges "
                            "shards with its optimizer directly: wire it to the optimizer, or "
                            "set shard_optimizer = false");
      expect_count(*v, outgoing(*v, wire_kind::ring), 1, "outgoing ring wires",
                   "to the next averager of the ring");
      expect_count(*v, incoming(*v, wire_kind::ring), 1, "incoming ring wires",
                   "from the previous averager of the ring");
      rings[v->layer].push_back(v);
    }
    for (const auto& [layer, group] : glooed) {
      // One gloo context per layer: ranks 0 .. R-1, each exactly once, or the context
      // would wait for a rank that never comes.
      std::map<std::int32_t, const actor_plan*> ranks;
      for (const auto* v : group)
        if (!ranks.emplace(v->replica, v).second)
          fail(v->where, "gloo averagers " + named(ranks[v->replica]->name) + " and " +
                             named(v->name) + " both have replica " + std::to_string(v->replica) +
                             " of layer " + std::to_string(layer) +
                             "; each replica's layer needs one");
      for (std::int32_t r = 0; r < static_cast<std::int32_t>(t_.replicas); ++r)
        if (!ranks.count(r))
          fail(group.front()->where, "layer " + std::to_string(layer) + " has no gloo averager " +
                                         "of replica " + std::to_string(r) + " (its gloo context " +
                                         "needs one per replica, 0 .. " +
                                         std::to_string(t_.replicas - 1) + ")");
    }
    for (const auto& [layer, ring] : rings) {
      // Follow the ring from its first averager: it must come back after visiting all R.
      std::set<std::string> seen;
      const actor_plan* at = ring.front();
      while (seen.insert(at->name).second) {
        const auto* next = outgoing(*at, wire_kind::ring)[0];
        at = &actor(next->to);
        if (at->layer != layer)
          fail(next->where, "ring wire from " + named(next->from) + " to " + named(next->to) +
                                " joins the rings of layers " + std::to_string(layer) + " and " +
                                std::to_string(at->layer));
      }
      if (static_cast<std::int64_t>(seen.size()) != t_.replicas || seen.size() != ring.size())
        fail(ring.front()->where, "the ring of layer " + std::to_string(layer) + " through " +
                                      named(ring.front()->name) + " holds " +
                                      std::to_string(seen.size()) +
                                      " averagers; it must hold one "
                                      "per replica (" +
                                      std::to_string(t_.replicas) + ")");
    }
  }

  void check_optimizers() const {
    // averaging = "async": a layer's server hears from each replica's layer itself.
    const bool async = t_.rule == averaging_rule::async;
    for (const auto* o : of_kind(actor_kind::optimizer)) {
      expect_count(*o, incoming(*o, wire_kind::grads),
                   async ? static_cast<std::size_t>(t_.replicas) : 1, "incoming grads wires",
                   async ? "one from each replica's layer" : "");
      // Through custom actors, the gradients must come from somewhere.
      follow(*incoming(*o, wire_kind::grads)[0], false,
             "the gradients of optimizer " + named(o->name), "a layer or an averager");
      if (outgoing(*o, wire_kind::params).empty())
        fail(o->where, "optimizer " + named(o->name) +
                           " sends parameters to no layer: add a "
                           "params wire to the layer it owns");
    }
  }

  // Interleaved 1F1B (Note [interleaved stages] in runtime/model/interleaved_schedule.hpp):
  // S = P v stages, stage s of a replica on the device of its stage s mod P, which is not
  // that of another of its first P stages; 1F1B's order; M a multiple of P.
  void check_interleaving() const {
    const auto v = t_.virtual_stages;
    if (v == 1)
      return;
    const auto& p = config_.parallel;
    const auto at = p.virtual_stages_where;
    const auto here = "[parallel] virtual_stages = " + std::to_string(v) + ": ";
    if (p.schedule != pipeline_schedule::one_f_one_b)
      fail(at, here + "interleaved stages run Megatron's interleaved 1F1B; set schedule = "
                      "\"1f1b\" (found \"" + std::string(to_string(p.schedule)) + "\")");
    if (t_.stages % v != 0)
      fail(at, here + "the replicas have " + std::to_string(t_.stages) +
                   " stages, not a multiple of " + std::to_string(v));
    const auto P = t_.stages / v;
    if (t_.microbatches % P != 0)
      fail(at, here + "microbatches = " + std::to_string(t_.microbatches) +
                   " must be a multiple of the " + std::to_string(P) +
                   " devices of a pipeline (micro-batches go round in groups of P)");
    // home[(replica, s mod P)]: the device of that replica's stage s mod P, and who is there.
    std::map<std::pair<std::int32_t, std::int64_t>, const actor_plan*> home;
    std::map<std::pair<std::int32_t, device_id>, const actor_plan*> owner;
    for (const auto* a : of_kind(actor_kind::layer)) {
      auto [found, fresh] = home.emplace(std::make_pair(a->replica, a->stage % P), a);
      const auto& b = *found->second;
      if (!fresh && b.device != a->device)
        fail(a->where, describe(*a) + " of stage " + std::to_string(a->stage) + " is on " +
                           a->device.to_string() + ", but " + here + "puts stages " +
                           std::to_string(a->stage % P) + ", " +
                           std::to_string(a->stage % P + P) + ", ... of a replica on one device, and " +
                           describe(b) + " of stage " + std::to_string(b.stage) + " is on " +
                           b.device.to_string());
      auto [held, first] = owner.emplace(std::make_pair(a->replica, a->device), a);
      const auto& c = *held->second;
      if (!first && c.stage % P != a->stage % P)
        fail(a->where, describe(*a) + " of stage " + std::to_string(a->stage) + " shares " +
                           a->device.to_string() + " with " + describe(c) + " of stage " +
                           std::to_string(c.stage) + ": " + here + "a device holds stages s, s + " +
                           std::to_string(P) + ", ... only");
    }
  }

  // Note [credits and turns] in runtime/model/interleaved_schedule.hpp: a wire into a
  // stage that waits for its turns (interleaved, or ZB-H1) has M credits or none, else a
  // micro-batch sent out of order can deadlock the run.
  void check_turn_credits() const {
    if (!t_.takes_turns())
      return;
    for_each_activations_wire([&](const wire_plan& w, const actor_plan& from,
                                  const actor_plan& to) {
      const bool enters_stage = from.kind != actor_kind::layer || from.stage != to.stage;
      if (to.kind != actor_kind::layer || !enters_stage || w.capacity == 0 ||
          w.capacity >= t_.microbatches)
        return;
      fail(w.where, activations_wire(w) + "capacity " + std::to_string(w.capacity) +
                        " into stage " + std::to_string(to.stage) +
                        ", which takes its micro-batches in turn (" +
                        (t_.virtual_stages > 1 ? "interleaved stages" : "ZB-H1") +
                        "), needs microbatches = " + std::to_string(t_.microbatches) +
                        " credits or 0 (unbounded): with fewer, micro-batches sent out of order "
                        "can hold every credit while the one whose turn it is waits");
    });
  }

  void check_device_sharing() const {
    if (config_.parallel.share_devices)
      return;
    std::set<device_id> used;
    for (const auto* a : of_kind(actor_kind::layer))
      used.insert(a->device);
    const auto P = t_.stages / t_.virtual_stages;  // a stage a device, or v interleaved
    auto groups = t_.replicas * P;
    if (static_cast<std::int64_t>(used.size()) >= groups)
      return;
    auto message = "R * P = " + std::to_string(t_.replicas) + " x " + std::to_string(P) +
                   " = " + std::to_string(groups) + " replica-stages need " +
                   std::to_string(groups) + " devices, and the layers use " +
                   std::to_string(used.size()) +
                   "; list more devices or set [parallel] share_devices = true to let them share";
    std::map<device_id, const actor_plan*> owner;  // the first layer on each device
    for (const auto* a : of_kind(actor_kind::layer)) {
      auto [found, fresh] = owner.emplace(a->device, a);
      const auto& b = *found->second;
      if (!fresh && (b.replica != a->replica || b.stage % P != a->stage % P))
        fail(a->where, describe(*a) + ", stage " + std::to_string(a->stage) + ", shares " +
                           a->device.to_string() + " with " + describe(b) + ", stage " +
                           std::to_string(b.stage) + ": " + message);
    }
    fail(config_.parallel.where, message);
  }

  void check_batch() const {
    if (config_.parallel.balance != replica_balance::even)
      return;  // an uneven split: weighted_rows() in actors/session/prepare.cpp checks it
    auto parts = t_.replicas * t_.microbatches;
    if (config_.data.batch_size % parts != 0)
      fail(config_.parallel.where,
           "[data] batch_size " + std::to_string(config_.data.batch_size) +
               " must split evenly into " + (config_.is_explicit() ? "replicas" : "data") + " (" +
               std::to_string(t_.replicas) + ") x microbatches (" +
               std::to_string(t_.microbatches) +
               ") parts; use a batch size that is a multiple of " + std::to_string(parts));
  }

  const topology& t_;
  const run_config& config_;
  shape_t loss_input_;  // (classes), or (positions, classes) for a sequence's labels
  std::int32_t layers_ = 0;  // L, the model's layer count
  std::vector<std::vector<std::int32_t>> consumers_;  // by model layer: the layers reading it
  std::map<std::string, std::size_t> index_;
  std::map<std::string, wire_list> incoming_, outgoing_;
  std::vector<bool> has_parameters_;  // by model layer index
};

}  // namespace

shape_t loss_input_shape(std::int64_t classes, std::int64_t positions) {
  return positions > 1 ? shape_t{positions, classes} : shape_t{classes};
}

void validate_topology(const topology& t, const run_config& config, std::int64_t classes,
                       std::int64_t positions) {
  validator(t, config, loss_input_shape(classes, positions)).run();
}

}  // namespace troupe
