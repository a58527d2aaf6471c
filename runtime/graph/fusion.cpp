// fusion.cpp: the groups of layers that run fused (Note [fused layers] in fusion.hpp).
#include "runtime/graph/fusion.hpp"

#include <map>
#include <memory>
#include <unordered_map>

#include "runtime/model/layer.hpp"

namespace troupe {

std::string fusion_group::name() const {
  const auto& first = members.front();
  auto last = members.back();
  // "r0.layer_0..layer_12": the last without the replica prefix the two share.
  const auto dot = first.rfind('.');
  if (dot != std::string::npos && last.compare(0, dot + 1, first, 0, dot + 1) == 0)
    last = last.substr(dot + 1);
  return first + ".." + last;
}

namespace {

// The activations wires at each actor, in and out.
struct activation_ends {
  std::unordered_map<std::string, std::vector<const wire_plan*>> in, out;
  explicit activation_ends(const topology& t) {
    for (const auto& w : t.wires)
      if (w.kind == wire_kind::activations) {
        out[w.from].push_back(&w);
        in[w.to].push_back(&w);
      }
  }
  const wire_plan* only(const std::unordered_map<std::string, std::vector<const wire_plan*>>& at,
                        const std::string& name) const {
    auto it = at.find(name);
    return it != at.end() && it->second.size() == 1 ? it->second.front() : nullptr;
  }
};

// What fusion needs to know of each model layer: whether its job is long for `rows`
// samples, and whether it sums its inputs (an `add`, never fused).
struct layer_facts {
  bool is_long = false;
  bool sums = false;
};

std::vector<layer_facts> facts_of(const topology& t, std::int64_t rows) {
  std::vector<layer_facts> out;
  std::vector<bool> known;
  for (const auto& a : t.actors) {
    const auto at = static_cast<std::size_t>(a.layer);
    if (a.kind != actor_kind::layer || (at < known.size() && known[at]))
      continue;
    if (at >= out.size()) {
      out.resize(at + 1);
      known.resize(at + 1, false);
    }
    const auto math = create_layer(a.math);
    // Long matters only where gradients are averaged over replicas (Note [fused layers]).
    out[at].is_long = t.replicas > 1 &&
                      math->cost(t.shapes.at(at)) * static_cast<double>(rows) > long_job_flops;
    out[at].sums = math->sums_inputs();
    known[at] = true;
  }
  return out;
}

}  // namespace

std::vector<fusion_group> plan_fusion(const topology& t, std::int64_t rows, bool enabled) {
  std::vector<fusion_group> groups;
  if (!enabled || t.schedule == pipeline_schedule::zb_h1 || t.takes_turns())
    return groups;
  const activation_ends ends{t};
  const auto facts = facts_of(t, rows);
  auto fact = [&](const actor_plan& a) { return facts.at(static_cast<std::size_t>(a.layer)); };
  // Follows each chain from its first layer: an actor whose one wire in comes from a
  // layer it may join is not a start.
  auto joins = [&](const actor_plan& from, const actor_plan& to) {
    if (from.kind != actor_kind::layer || to.kind != actor_kind::layer ||
        from.device != to.device || from.replica != to.replica || from.stage != to.stage)
      return false;
    const auto* out = ends.only(ends.out, from.name);
    const auto* in = ends.only(ends.in, to.name);
    return out != nullptr && out == in && !fact(from).sums && !fact(to).sums;
  };
  for (const auto& a : t.actors) {
    if (a.kind != actor_kind::layer)
      continue;
    const auto* in = ends.only(ends.in, a.name);
    if (in != nullptr && joins(*t.find(in->from), a))
      continue;  // inside a chain that starts further up
    fusion_group group{{a.name}};
    bool has_long = fact(a).is_long;
    const actor_plan* at = &a;
    while (const auto* out = ends.only(ends.out, at->name)) {
      const auto* next = t.find(out->to);
      if (!joins(*at, *next))
        break;
      if (fact(*next).is_long) {
        if (has_long) {  // a second long layer starts a group of its own
          if (group.members.size() > 1)
            groups.push_back(group);
          group = fusion_group{{}};
        }
        has_long = true;
      }
      group.members.push_back(next->name);
      at = next;
    }
    if (group.members.size() > 1)
      groups.push_back(std::move(group));
  }
  return groups;
}

std::string format_fusion(const std::vector<fusion_group>& groups) {
  if (groups.empty())
    return "";
  const auto n = groups.size();
  std::string out = "\nfused layers (" + std::to_string(n) + (n == 1 ? " actor runs" : " actors run") +
                    " several layers, one job a pass; [run] fuse_layers = false runs each "
                    "alone)\n";
  for (const auto& g : groups) {
    out += "  " + g.name() + ":";
    for (const auto& m : g.members)
      out += " " + m;
    out += "\n";
  }
  return out;
}

}  // namespace troupe
