// async_server.cpp: an optimizer as the asynchronous parameter server of its layer.
//
// Note [asynchronous server]
// [parallel] averaging = "async" wires each layer's replicas straight to one optimizer (the
// central averager's place, so the servers are sharded by layer: a server a layer, on its
// stage's first device), which applies each replica's gradients as they arrive instead of
// summing a step's first. Its version counter `updates` counts the updates it has applied
// (R a step); a replica's parameters are the ones it sent after applying that replica's
// last gradients, and the staleness of an update is how many updates the server applied
// between making the version the gradients were computed on and applying them. The bound:
// no update is applied more than [parallel] max_staleness updates after its version. A
// held gradient is applied only when that cannot break the bound for any replica still
// computing (updates + 1 - based_on[q] <= max_staleness for each other q); otherwise it waits,
// and so does its replica, whose next version is sent only after it is applied. The oldest
// held gradient goes first. Once every replica's versions are distinct (after the first
// round) the oldest can always go, and the first round needs max_staleness >= R - 1, which
// the expander and connect_async demand: no deadlock. A replica that has reached a barrier
// step (the run's last, an evaluated epoch's end, a checkpoint) or the step where an
// interrupted run stops computes nothing more, so it bounds nothing.
//
// Each gradient is applied as it is: a replica's share of the step's loss, scaled as in
// synchronous data parallelism (DESIGN.md), so a round of R updates with SGD moves the
// parameters by the synchronous step's sum, and with one replica this is one device's run
// exactly. Adam's bias correction and SGD's first momentum step count updates, not steps.
// At a barrier step every replica waits until all have arrived there, then all get the
// same version: evaluations and checkpoints see one model, and a checkpoint holds the
// server's parameters and state after exactly R updates a step (so resuming restores
// `updates` as R times its step). Which order updates land in between depends on timing,
// as in every asynchronous server: a resumed run repeats an uninterrupted one bit for bit
// where the order is forced (one replica far slower than the others; tests/actors/
// averaging/async_server_test.cpp). Every update's staleness is a trace counter
// ("staleness", on the server's track towards the replica's layer) and counted for
// staleness_atom, which the session reports at the end of the run.
#include <algorithm>

#include "actors/training/bf16_versions.hpp"
#include "actors/training/optimizer_actor.hpp"
#include "runtime/core/transfer.hpp"
#include "troupe/error.hpp"

namespace troupe {

void optimizer_actor::connect_async(const wiring_msg& wiring) {
  const auto sources = wiring.in("grads");
  const auto R = static_cast<std::int32_t>(sources.size());
  std::vector<bool> seen(static_cast<std::size_t>(R), false);
  for (const auto& end : sources) {
    if (end.peer_kind != "layer" || end.peer_replica < 0 || end.peer_replica >= R ||
        seen[static_cast<std::size_t>(end.peer_replica)])
      throw user_error(settings_.name + ": [parallel] averaging = \"async\" serves one layer " +
                       "of each replica 0.." + std::to_string(R - 1) +
                       " through a grads wire from each, and " + end.peer_name + " (a " +
                       end.peer_kind + " of replica " + std::to_string(end.peer_replica) +
                       ") is not one of them");
    seen[static_cast<std::size_t>(end.peer_replica)] = true;
  }
  const auto params = wiring.out("params");
  async_.subscriber.assign(static_cast<std::size_t>(R), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto r = params[i].peer_replica;
    if (r < 0 || r >= R || async_.subscriber[static_cast<std::size_t>(r)] != params.size())
      throw user_error(settings_.name + ": [parallel] averaging = \"async\" sends each of the " +
                       std::to_string(R) + " replicas its own versions, one params wire each, " +
                       "and " + params[i].peer_name + " is not one replica's");
    async_.subscriber[static_cast<std::size_t>(r)] = i;
  }
  if (params.size() != static_cast<std::size_t>(R))
    throw user_error(settings_.name + ": [parallel] averaging = \"async\" needs one params " +
                     "wire a replica (" + std::to_string(R) + "), and it has " +
                     std::to_string(params.size()));
  if (settings_.async.max_staleness < R - 1)
    throw user_error(settings_.name + ": [parallel] max_staleness = " +
                     std::to_string(settings_.async.max_staleness) + " is below replicas - 1 = " +
                     std::to_string(R - 1) + " (Note [asynchronous server])");
  async_.updates = version_ * R;
  async_.based_on.assign(static_cast<std::size_t>(R), async_.updates);
  async_.next_step.assign(static_cast<std::size_t>(R), version_);
  async_.at_barrier.assign(static_cast<std::size_t>(R), false);
}

bool optimizer_actor::async_barrier(std::int64_t version) const {
  const auto& a = settings_.async;
  return version == a.total_steps || (a.epoch_steps > 0 && version % a.epoch_steps == 0) ||
         settings_.checkpoints.due(version);
}

void optimizer_actor::receive_async(weight_grads_msg& message) {
  const auto R = static_cast<std::int32_t>(async_.next_step.size());
  TROUPE_CHECK(message.replica >= 0 && message.replica < R,
               settings_.name << " got gradients of replica " << message.replica << " of " << R);
  const auto r = static_cast<std::size_t>(message.replica);
  TROUPE_CHECK(message.step == async_.next_step[r] && !async_.at_barrier[r],
               settings_.name << " got replica " << message.replica << "'s gradients of step "
                              << message.step << " while it computes step " << async_.next_step[r]);
  TROUPE_CHECK(message.grads.size() == params_.size(),
               settings_.name << " got " << message.grads.size() << " gradients for "
                              << params_.size() << " parameters");
  async_.held.push_back({message.replica, message.step, arrive(message.grads, *settings_.on)});
  apply_async();
}

void optimizer_actor::apply_async() {
  const auto S = settings_.async.max_staleness;
  const auto R = async_.next_step.size();
  // Replicas at or past this step compute nothing more (an interrupted run's end).
  const auto stop =
      requested_checkpoint_ >= 0 ? requested_checkpoint_ : settings_.async.total_steps;
  auto bounds = [&](std::size_t q) { return !async_.at_barrier[q] && async_.next_step[q] < stop; };
  auto& held = async_.held;
  for (bool applied = true; applied && !held.empty();) {
    applied = false;
    std::stable_sort(held.begin(), held.end(), [&](const auto& a, const auto& b) {
      return async_.based_on[static_cast<std::size_t>(a.replica)] <
             async_.based_on[static_cast<std::size_t>(b.replica)];
    });
    for (auto it = held.begin(); it != held.end(); ++it) {
      const auto r = static_cast<std::size_t>(it->replica);
      bool allowed = true;
      for (std::size_t q = 0; q < R && allowed; ++q)
        allowed = q == r || !bounds(q) || async_.updates + 1 - async_.based_on[q] <= S;
      if (!allowed)
        continue;
      const auto staleness = async_.updates - async_.based_on[r];
      TROUPE_CHECK(staleness >= 0 && staleness <= S,
                   settings_.name << ": an update " << staleness << " versions stale");
      if (async_.staleness.size() <= static_cast<std::size_t>(staleness))
        async_.staleness.resize(static_cast<std::size_t>(staleness) + 1, 0);
      ++async_.staleness[static_cast<std::size_t>(staleness)];
      record_counter("staleness", subscriber_tracks_[async_.subscriber[r]], staleness);
      const auto step = it->step;
      params_ = updated_params(step, async_.updates, std::move(it->grads), nullptr, it->replica);
      held.erase(it);
      ++async_.updates;
      async_.next_step[r] = step + 1;
      if (async_barrier(step + 1)) {
        async_.at_barrier[r] = true;
      } else {
        async_.based_on[r] = async_.updates;
        const auto sent = in_layer_precision(params_, settings_.bf16_params, 0, *settings_.on,
                                             job_for_step(job_kind::convert, step + 1));
        params_msg out{step + 1, settings_.layer_index, sent, trace_stamp{}};
        const auto i = async_.subscriber[r];
        stamp_send(out, subscriber_tracks_[i], "params", bytes_of(out.params));
        send_written(subscribers_[i], std::move(out));
      }
      applied = true;
      break;  // the books changed: sort again
    }
  }
  const auto [lowest, highest] =
      std::minmax_element(async_.next_step.begin(), async_.next_step.end());
  const bool all_at_barrier =
      std::all_of(async_.at_barrier.begin(), async_.at_barrier.end(), [](bool b) { return b; });
  if (all_at_barrier && *lowest == *highest) {
    // Every replica has arrived: all of them get the same version (which checkpoints).
    std::fill(async_.at_barrier.begin(), async_.at_barrier.end(), false);
    std::fill(async_.based_on.begin(), async_.based_on.end(), async_.updates);
    set_version(*lowest, params_);
    return;
  }
  if (*lowest <= version_)
    return;
  // Every replica has taken `version_` steps: a get for it is answered, and an interrupted
  // run's checkpoint is taken once nothing beyond it is (Note [asynchronous server]).
  version_ = *lowest;
  if (version_ == requested_checkpoint_ && *lowest == *highest && held.empty())
    checkpoint(version_);
  deliver_waiting();
}

std::string optimizer_actor::async_waiting_for() const {
  std::string out = ": async server after " + std::to_string(async_.updates) + " updates";
  for (std::size_t r = 0; r < async_.next_step.size(); ++r) {
    out += "; replica " + std::to_string(r) + " at step " + std::to_string(async_.next_step[r]);
    const auto held = std::find_if(async_.held.begin(), async_.held.end(), [&](const auto& g) {
      return static_cast<std::size_t>(g.replica) == r;
    });
    if (held != async_.held.end())
      out += " (its gradients wait for the staleness bound " +
             std::to_string(settings_.async.max_staleness) + ")";
    else if (async_.at_barrier[r])
      out += " (waits for the others there)";
    else
      out += " (computing on version " + std::to_string(async_.based_on[r]) + ")";
  }
  return out;
}

}  // namespace troupe
