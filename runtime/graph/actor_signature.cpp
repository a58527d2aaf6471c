// actor_signature.cpp: the signature registry, with the five built-in kinds in it.
#include "runtime/graph/actor_signature.hpp"

#include "kernels/registration_journal.hpp"
#include "runtime/graph/kinds.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

namespace troupe {

namespace {

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

struct signature_registry {
  std::mutex mutex;
  // std::map: find_actor_signature() hands out pointers, which later insertions keep valid.
  std::map<std::string, actor_signature> entries;

  signature_registry() {
    // What topology.hpp says flows between the built-in kinds.
    // One per value of actor_kind but custom (kinds.hpp), under the same names.
    using a = actor_kind;
    auto w = [](wire_kind kind) { return std::string(to_string(kind)); };
    const auto activations = w(wire_kind::activations), labels = w(wire_kind::labels),
               grads = w(wire_kind::grads), ring = w(wire_kind::ring),
               params = w(wire_kind::params);
    add({to_string(a::data_loader), {}, {activations, labels}, true});
    add({to_string(a::layer), {activations, params}, {activations, grads}, true});
    add({to_string(a::loss), {activations, labels}, {}, true});
    add({to_string(a::averager), {grads, ring}, {grads, ring}, true});
    add({to_string(a::optimizer), {grads}, {params}, true});
  }

  void add(actor_signature signature) {
    for (const auto* list : {&signature.accepts, &signature.emits})
      for (const auto& wire : *list)
        if (!contains(wire_kinds(), wire))
          throw std::logic_error("actor kind '" + signature.kind + "' names wire kind '" + wire +
                                 "', which does not exist (wire kinds: activations, labels, "
                                 "grads, ring, params)");
    auto kind = signature.kind;
    if (!entries.emplace(kind, std::move(signature)).second)
      throw std::logic_error("actor kind '" + kind + "' has its wires declared twice");
  }
};

signature_registry& signatures() {
  static signature_registry registry;
  return registry;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words)
    out += (out.empty() ? "" : ", ") + word;
  return out;
}

}  // namespace

bool actor_signature::accepts_wire(const std::string& wire_kind) const {
  return contains(accepts, wire_kind);
}

bool actor_signature::emits_wire(const std::string& wire_kind) const {
  return contains(emits, wire_kind);
}

const std::vector<std::string>& wire_kinds() {
  static const std::vector<std::string> kinds = enum_names<wire_kind>();
  return kinds;
}

void register_actor_signature(const std::string& kind, std::vector<std::string> accepts,
                              std::vector<std::string> emits) {
  auto& r = signatures();
  {
    std::lock_guard<std::mutex> guard{r.mutex};
    r.add({kind, std::move(accepts), std::move(emits), false});
  }
  // Taken back if a library being loaded added it and its load fails.
  detail::record_undo([kind] {
    auto& registry = signatures();
    std::lock_guard<std::mutex> guard{registry.mutex};
    registry.entries.erase(kind);
  });
}

const actor_signature* find_actor_signature(const std::string& kind) {
  auto& r = signatures();
  std::lock_guard<std::mutex> guard{r.mutex};
  auto found = r.entries.find(kind);
  return found == r.entries.end() ? nullptr : &found->second;
}

std::vector<std::string> actor_signature_kinds() {
  auto& r = signatures();
  std::lock_guard<std::mutex> guard{r.mutex};
  std::vector<std::string> out;
  for (const auto& entry : r.entries)
    out.push_back(entry.first);
  return out;
}

std::string describe_signature(const actor_signature& signature) {
  return "accepts " + (signature.accepts.empty() ? "no wires" : joined(signature.accepts)) +
         "; emits " + (signature.emits.empty() ? "no wires" : joined(signature.emits));
}

}  // namespace troupe
