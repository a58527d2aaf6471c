// actor_kinds.cpp: the actor kind registry, built-in and custom kinds alike.
#include "actors/base/actor_kinds.hpp"

#include "runtime/base/name_registry.hpp"

namespace troupe {

namespace {

struct kind_entry {
  actor_factory factory;
  custom_actor_factory custom;  // custom kinds: what `factory` calls
};

name_registry<kind_entry>& kind_registry() {
  static name_registry<kind_entry> registry;
  return registry;
}

void add_entry(const std::string& kind, const std::string& description, kind_entry entry) {
  if (!kind_registry().add(kind, description, std::move(entry)))
    throw std::logic_error(actor_kind_registered_twice(kind));
}

// The entry of `kind`, or a config_error at `where` naming the nearest registered kind.
kind_entry find_entry(const std::string& kind, const std::string& actor_name,
                      const source_position& where) {
  std::vector<std::string> kinds;
  if (auto entry = kind_registry().find(kind, kinds))
    return *entry;
  throw config_error(where, name_registry<kind_entry>::unknown(
                                "unknown actor kind '" + kind + "' for actor '" + actor_name + "'",
                                kind, kinds));
}

// Runs a custom kind's factory on `spawn`, then refuses the settings it did not read (the
// actor it made is stopped first: nothing else knows it yet).
caf::actor spawn_with(const custom_actor_factory& factory, actor_spawn& spawn) {
  auto actor = factory(spawn);
  try {
    spawn.settings.finish();
  } catch (...) {
    caf::anon_send_exit(actor, caf::exit_reason::kill);
    throw;
  }
  return actor;
}

}  // namespace

void register_builtin_actor_kind(const std::string& kind, const std::string& description,
                                 actor_factory factory) {
  add_entry(kind, description, kind_entry{std::move(factory), nullptr});
  if (!find_actor_signature(kind))
    register_actor_signature(kind, {}, {});
}

std::string actor_kind_conflict(const std::string& kind, const accepts& in, const emits& out) {
  if (has_actor_kind(kind) || find_actor_signature(kind) != nullptr)
    return actor_kind_registered_twice(kind);
  const auto& known = wire_kinds();
  for (const auto* list : {&in.wire_kinds, &out.wire_kinds})
    for (const auto& wire : *list)
      if (std::find(known.begin(), known.end(), wire) == known.end())
        return "actor kind '" + kind + "' names wire kind '" + wire + "', which does not exist";
  return {};
}

void register_actor_kind(const std::string& kind, const std::string& description, const accepts& in,
                         const emits& out, custom_actor_factory factory) {
  // The signature first: a bad wire kind must not leave a kind without one behind. A
  // kind that exists already (a built-in one, or a plugin's loaded before) is refused
  // here too, with the clearer of the two messages.
  if (has_actor_kind(kind))
    throw std::logic_error(actor_kind_registered_twice(kind));
  register_actor_signature(kind, in.wire_kinds, out.wire_kinds);
  auto whole_plan = [custom = factory](const actor_plan& plan, spawn_context& context) {
    settings own{"actor", plan.name, plan.settings, plan.where};
    actor_spawn spawn{context.system, plan.name, context.devices.at(plan.device), own, plan.replica,
                      plan.stage,     plan.layer};
    return spawn_with(custom, spawn);
  };
  add_entry(kind, description, kind_entry{std::move(whole_plan), std::move(factory)});
}

bool has_actor_kind(const std::string& kind) { return kind_registry().has(kind); }

std::vector<std::pair<std::string, std::string>> registered_actor_kinds() {
  return kind_registry().described();
}

caf::actor spawn_actor(const actor_plan& plan, spawn_context& context) {
  return find_entry(plan.kind_name(), plan.name, plan.where).factory(plan, context);
}

caf::actor spawn_custom_actor(const std::string& kind, actor_spawn& spawn) {
  const auto entry = find_entry(kind, spawn.name, spawn.settings.where());
  TROUPE_CHECK(entry.custom, "actor kind '" << kind << "' is built in: the session spawns it");
  return spawn_with(entry.custom, spawn);
}

}  // namespace troupe
