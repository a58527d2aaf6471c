// actor_kinds.cpp: the actor kind registry.
#include "actors/actor_kinds.hpp"

#include <map>
#include <mutex>

namespace troupe {

namespace {

struct kind_entry {
  std::string description;
  actor_factory factory;
};

struct kind_registry {
  std::mutex mutex;
  std::map<std::string, kind_entry> entries;
};

kind_registry& the_registry() {
  static kind_registry registry;
  return registry;
}

}  // namespace

void register_actor_kind(const std::string& kind, const std::string& description,
                         actor_factory factory) {
  {
    auto& r = the_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    if (!r.entries.emplace(kind, kind_entry{description, std::move(factory)}).second)
      throw std::logic_error("actor kind '" + kind + "' is registered twice");
  }
  if (!find_actor_signature(kind))
    register_actor_signature(kind, {}, {});
}

void register_actor_kind(const std::string& kind, const std::string& description,
                         const accepts& in, const emits& out, actor_factory factory) {
  // The signature first: a bad wire kind must not leave a kind without one behind. A
  // kind that exists already (a built-in one, or a plugin's loaded before) is refused
  // here too, with the clearer of the two messages.
  if (has_actor_kind(kind))
    throw std::logic_error("actor kind '" + kind + "' is registered twice");
  register_actor_signature(kind, in.wire_kinds, out.wire_kinds);
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  if (!r.entries.emplace(kind, kind_entry{description, std::move(factory)}).second)
    throw std::logic_error("actor kind '" + kind + "' is registered twice");
}

bool has_actor_kind(const std::string& kind) {
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  return r.entries.count(kind) > 0;
}

std::vector<std::pair<std::string, std::string>> registered_actor_kinds() {
  auto& r = the_registry();
  std::lock_guard<std::mutex> guard{r.mutex};
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [kind, entry] : r.entries)
    out.emplace_back(kind, entry.description);
  return out;
}

caf::actor spawn_actor(const actor_plan& plan, spawn_context& context) {
  actor_factory factory;
  std::vector<std::string> kinds;
  {
    auto& r = the_registry();
    std::lock_guard<std::mutex> guard{r.mutex};
    auto it = r.entries.find(plan.kind_name());
    if (it != r.entries.end())
      factory = it->second.factory;
    for (const auto& entry : r.entries)
      kinds.push_back(entry.first);
  }
  if (!factory) {
    std::string list;
    for (const auto& k : kinds)
      list += (list.empty() ? "" : ", ") + k;
    throw config_error(plan.where, "unknown actor kind '" + plan.kind_name() + "' for actor '" +
                                       plan.name + "'" + did_you_mean(plan.kind_name(), kinds) +
                                       " (registered: " + list + ")");
  }
  return factory(plan, context);
}

}  // namespace troupe
