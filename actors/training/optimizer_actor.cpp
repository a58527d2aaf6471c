// optimizer_actor.cpp: parameter init, gradient gathering and the update job.
#include "actors/training/optimizer_actor.hpp"

#include <algorithm>
#include <utility>

#include "actors/base/actor_kinds.hpp"
#include "actors/training/bf16_versions.hpp"
#include "actors/training/layer_actor.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/transfer.hpp"

namespace troupe {
namespace {

// Adam and AdamW keep a second moment and run the Adam kernel; SGD runs its own. A switch
// without default: a new optimizer_type is a -Wswitch warning here, not a silent Adam.
bool is_adam_family(optimizer_type type) {
  switch (type) {
    case optimizer_type::sgd: return false;
    case optimizer_type::adam: return true;
    case optimizer_type::adamw: return true;
  }
  TROUPE_CHECK(false, "optimizer type " << static_cast<int>(type));
  return false;
}

}  // namespace

bool optimizer_is_sharded(const actor_plan& plan, const topology& graph, const run_config& config) {
  if (!config.parallel.shard_optimizer)
    return false;
  return std::any_of(graph.actors.begin(), graph.actors.end(), [&](const actor_plan& a) {
    return a.kind == actor_kind::averager && a.layer == plan.layer &&
           a.method == averaging_method::ring;
  });
}

bool optimizer_writes_checkpoints(const actor_plan& plan, const topology& graph,
                                  const run_config& config) {
  return plan.kind == actor_kind::optimizer &&
         (plan.replica <= 0 || optimizer_is_sharded(plan, graph, config) ||
          config.parallel.rule == averaging_rule::local_sgd ||
          config.parallel.rule == averaging_rule::diloco);
}

optimizer_actor::optimizer_actor(caf::actor_config& config, optimizer_actor_settings settings)
    : device_actor(config, settings.name, settings.on), settings_(std::move(settings)) {
  auto type = settings_.on->id().type;
  sgd_ = kernels::lookup<kernels::ops::sgd_update>(type);
  adam_ = kernels::lookup<kernels::ops::adam_update>(type);
  axpy_ = kernels::lookup<kernels::ops::axpy>(type);
  scale_ = kernels::lookup<kernels::ops::scale>(type);
  // Parameters and optimizer state each live in one buffer, the parameters in order, so
  // that the sharded update can address them by flat offsets.
  const auto& id = settings_.on->id();
  std::int64_t n = 0;
  for (const auto& spec : settings_.params)
    n += element_count(spec.shape);
  params_flat_ = tensor::empty({n}, dtype::f32, id);
  momentum_flat_ = tensor::zeros({n}, dtype::f32, id);
  if (is_adam_family(settings_.optimizer.type))
    second_flat_ = tensor::zeros({n}, dtype::f32, id);
  // A tensor of the start (a checkpoint, init_from) into `to`, if it has one of that name.
  auto take_start = [&](const std::string& name, const tensor& to) {
    if (settings_.start == nullptr)
      return false;
    auto found = settings_.start->find(replica_tensor_name(own_copy_replica(), name));
    if (found == settings_.start->end())
      found = settings_.start->find(name);
    if (found == settings_.start->end())
      return false;
    TROUPE_CHECK(static_cast<std::int64_t>(found->second.size()) == to.numel(),
                 settings_.name << ": start tensor '" << name << "' has " << found->second.size()
                                << " values for " << to.numel());
    std::copy(found->second.begin(), found->second.end(), to.f32());
    return true;
  };
  // Written on the host: a GPU's state is made in host memory, then copied over once.
  const bool on_gpu = id.type == device_type::cuda;
  auto staged = [&](const tensor& t) {
    return on_gpu && t.defined()
               ? tensor::zeros(t.shape(), dtype::f32, device_id{device_type::cpu, 0, id.node})
               : t;
  };
  if (diloco()) {
    outer_flat_ = tensor::empty({n}, dtype::f32, id);
    if (settings_.local.outer_momentum != 0)
      outer_momentum_flat_ = tensor::zeros({n}, dtype::f32, id);
  }
  const auto params_host = staged(params_flat_);
  const auto states = state_names();
  const auto buffers = state_buffers();  // states[s] lives in buffers[s]
  std::vector<tensor> hosts;
  for (const auto& b : buffers)
    hosts.push_back(staged(b));
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < settings_.params.size(); ++i) {
    const auto& spec = settings_.params[i];
    auto p = params_host.view(offset, spec.shape);
    if (!take_start(spec.name, p))
      initialise_parameter(spec, settings_.seed, settings_.layer_index,
                           static_cast<std::int64_t>(i), p.f32());
    params_.push_back(params_flat_.view(offset, spec.shape));
    momentum_.push_back(momentum_flat_.view(offset, spec.shape));
    if (second_flat_.defined())
      second_.push_back(second_flat_.view(offset, spec.shape));
    for (std::size_t k = 0; k < states.size(); ++k) {
      auto state = hosts[k].view(offset, spec.shape);
      // DiLoCo's outer parameters start as the parameters (Note [DiLoCo]).
      if (!take_start(spec.name + "." + states[k], state) && states[k] == outer_params_state)
        std::copy(p.f32(), p.f32() + p.numel(), state.f32());
    }
    offset += element_count(spec.shape);
  }
  if (on_gpu) {
    gpu::require_backend().copy_now(params_flat_.raw(), params_host.raw(), params_flat_.bytes());
    for (std::size_t k = 0; k < buffers.size(); ++k)
      gpu::require_backend().copy_now(buffers[k].raw(), hosts[k].raw(), buffers[k].bytes());
  }
  version_ = settings_.start_version;
  settings_.start = nullptr;  // read once
}

std::vector<std::string> optimizer_actor::state_names() const {
  auto names = optimizer_state_names(settings_.optimizer.type, settings_.optimizer.momentum);
  if (diloco())
    for (auto& name : outer_state_names(settings_.local.outer_momentum))
      names.push_back(std::move(name));
  return names;
}

std::vector<tensor> optimizer_actor::state_buffers() const {
  const auto inner = optimizer_state_names(settings_.optimizer.type, settings_.optimizer.momentum);
  std::vector<tensor> out;
  if (!inner.empty())
    out.push_back(momentum_flat_);
  if (inner.size() > 1)
    out.push_back(second_flat_);
  if (outer_flat_.defined())
    out.push_back(outer_flat_);
  if (outer_momentum_flat_.defined())
    out.push_back(outer_momentum_flat_);
  return out;
}

void optimizer_actor::connect(const wiring_msg& wiring) {
  for (const auto& end : wiring.out("params")) {
    subscribers_.push_back(end.peer);
    subscriber_tracks_.push_back(end.peer_track);
  }
  for (const auto& end : wiring.in("grads")) {
    sources_ += (sources_.empty() ? "" : ", ") + end.peer_name;
    averager_ = end.peer;
    averager_track_ = end.peer_track;
  }
  grads_expected_ = static_cast<std::int32_t>(wiring.in("grads").size());
  TROUPE_CHECK(grads_expected_ >= 1 && !subscribers_.empty(),
               settings_.name << " needs grads wires in and params wires out");
  if (serves_async())
    connect_async(wiring);
}

void optimizer_actor::release_peers() {
  subscribers_.clear();
  averager_ = nullptr;
  settings_.checkpoints.writer = nullptr;
}

std::string optimizer_actor::waiting_for() const {
  if (serves_async())
    return async_waiting_for();
  if (averaging_)
    return ": parameter version " + std::to_string(version_) + "; waits for the replicas' " +
           "average of version " + std::to_string(version_ + 1) + " (" +
           (diloco() ? "DiLoCo" : "local SGD") + ", from " + sources_ + ")";
  return ": parameter version " + std::to_string(version_) + "; has " +
         std::to_string(grads_received_) + " of " + std::to_string(grads_expected_) +
         " gradient message(s) for step " + std::to_string(version_) + " (from " + sources_ + ")";
}

caf::message_handler optimizer_actor::handlers() {
  return {
      [this](start_atom) { publish(); },
      grads_handler([this](weight_grads_msg& message) {
        if (serves_async())
          receive_async(message);
        else
          receive_grads(message);
      }),
      [this](staleness_atom) { return async_.staleness; },
      [this](shard_msg& message) {
        if (deferred_until_ready(message, {&message.flat}))
          return;
        const char* stages[] = {"reduced", "updated", "gathered", "average", "averaged"};
        const bool known = message.stage >= 0 && message.stage <= shard_msg::averaged;
        auto span = handling_span(known ? stages[message.stage] : "shard", message.trace,
                                  message.step, 0, bytes_of(message.flat));
        if (message.stage == shard_msg::reduced)
          update_shard(message);
        else if (message.stage == shard_msg::gathered)
          take_gathered(message);
        else if (message.stage == shard_msg::averaged && settings_.local.sync_every > 0)
          take_average(message);
        else
          throw std::logic_error(settings_.name + ": unexpected shard message (stage " +
                                 std::to_string(message.stage) + ")");
      },
      // An interrupted run's checkpoint after `version` steps (the trainer's request): now,
      // or once this optimizer gets there.
      [this](checkpoint_atom, std::int64_t version) {
        if (!settings_.writes_checkpoints)
          return;
        TROUPE_CHECK(version >= version_, settings_.name << ": a checkpoint of version " << version
                                                         << " asked for at version " << version_);
        if (version == version_) {
          checkpoint(version);
        } else {
          requested_checkpoint_ = version;
          if (serves_async())
            apply_async();  // replicas at the stop bound nothing now
        }
      },
      // The parameters once they have reached `version` (the end of a run, tests,
      // checkpoints): answered at once, or as soon as that update has been submitted.
      // The caller waits for readiness.
      [this](caf::get_atom, std::int64_t version) -> caf::result<std::vector<tensor>> {
        if (version_ >= version)
          return params_;
        auto promise = make_response_promise<std::vector<tensor>>();
        waiting_for_version_.emplace_back(version, promise);
        return promise;
      },
  };
}

void optimizer_actor::publish() {
  // The version as its layers compute with it: rounded once for all of them.
  const auto sent = in_layer_precision(params_, settings_.bf16_params, 0, *settings_.on,
                                       job_for_step(job_kind::convert, version_));
  for (std::size_t i = 0; i < subscribers_.size(); ++i) {
    params_msg out{version_, settings_.layer_index, sent};
    stamp_send(out, subscriber_tracks_[i], "params", bytes_of(out.params));
    send_written(subscribers_[i], std::move(out));  // to another node: once written
  }
}

void optimizer_actor::receive_grads(weight_grads_msg& message) {
  TROUPE_CHECK(message.step == version_,
               settings_.name << " got gradients of step " << message.step << " at version "
                              << version_);
  TROUPE_CHECK(message.grads.size() == params_.size(),
               settings_.name << " got " << message.grads.size() << " gradients for "
                              << params_.size() << " parameters");
  auto& work = settings_.on->work();
  message.grads = arrive(message.grads, *settings_.on);
  if (grads_received_ == 0) {
    // Handed over by the sender (see weight_grads_msg), or copied here on arrival: the
    // first message's buffers are ours to sum the others into.
    grad_sum_ = std::move(message.grads);
  } else {
    work.submit([axpy = axpy_, context = settings_.on->context(), sum = grad_sum_,
                 add = std::move(message.grads)] {
      for (std::size_t i = 0; i < sum.size(); ++i)
        axpy(context, sum[i].numel(), 1.0f, add[i].f32(), sum[i].f32());
    });
  }
  if (++grads_received_ < grads_expected_)
    return;
  grads_received_ = 0;
  update(message.step);
}

std::vector<tensor> optimizer_actor::updated_params(std::int64_t step, std::int64_t applied,
                                                    std::vector<tensor> grads, tensor* flat,
                                                    std::int32_t replica) {
  std::vector<tensor> next;
  std::vector<piece> pieces;
  if (flat != nullptr)
    *flat = tensor::empty({parameter_count()}, dtype::f32, settings_.on->id());
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    next.push_back(flat != nullptr
                       ? flat->view(offset, params_[i].shape())
                       : tensor::empty(params_[i].shape(), dtype::f32, settings_.on->id()));
    offset += params_[i].numel();
    pieces.push_back(piece{params_[i].f32(), next[i].f32(), grads[i].f32(), momentum_[i].f32(),
                           second_.empty() ? nullptr : second_[i].f32(), params_[i].numel()});
  }
  std::vector<tensor> keep = params_;
  keep.insert(keep.end(), next.begin(), next.end());
  keep.insert(keep.end(), grads.begin(), grads.end());
  keep.push_back(momentum_flat_);  // the state too: the job may outlive this actor
  keep.push_back(second_flat_);
  auto done = submit_update(step, std::move(pieces), std::move(keep), applied, replica);
  for (auto& p : next)
    p.set_ready(done);
  if (flat != nullptr)
    flat->set_ready(done);
  params_flat_ = tensor{};  // the parameters are separate buffers from now on
  return next;
}

void optimizer_actor::update(std::int64_t step) {
  // Averaged next: written into one buffer, which the averager's backend sums in place.
  const bool sync = syncs_after(step);
  tensor next_flat;
  auto next = updated_params(step, step, std::move(grad_sum_), sync ? &next_flat : nullptr);
  grad_sum_.clear();
  if (sync) {
    if (diloco())  // Note [DiLoCo]: the replicas average their deltas, not their parameters
      next_flat.set_ready(settings_.on->work().submit(
          [axpy = axpy_, scale = scale_, context = settings_.on->context(), outer = outer_flat_,
           delta = next_flat] {
            scale(context, delta.numel(), -1.0f, delta.f32());
            axpy(context, delta.numel(), 1.0f, outer.f32(), delta.f32());
          },
          job_for_step(job_kind::update, step)));
    averaging_ = true;
    shard_msg out{step, settings_.layer_index, shard_msg::average, std::move(next_flat),
                  {},   trace_stamp{}};
    stamp_send(out, averager_track_, "average", bytes_of(out.flat));
    send(averager_, std::move(out));
    return;
  }
  set_version(step + 1, std::move(next));
}

std::int32_t optimizer_actor::own_copy_replica() const {
  return settings_.local.sync_every > 0 ? std::max(settings_.replica, 0) : 0;
}

bool optimizer_actor::syncs_after(std::int64_t step) const {
  const auto& l = settings_.local;
  if (l.sync_every <= 0)
    return false;
  const auto done = step + 1;  // steps taken once this one is
  return done % l.sync_every == 0 || done == l.total_steps ||
         (l.epoch_steps > 0 && done % l.epoch_steps == 0);
}

std::int64_t optimizer_actor::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : params_)
    n += p.numel();
  return n;
}

void optimizer_actor::take_average(shard_msg& averaged) {
  TROUPE_CHECK(
      averaging_ && averaged.step == version_ && averaged.flat.numel() == parameter_count(),
      settings_.name << ": averaged parameters of step " << averaged.step << " at version "
                     << version_);
  averaging_ = false;
  if (diloco())
    params_flat_ = outer_step(averaged.step, averaged.flat);
  else
    params_flat_ = averaged.flat;
  set_version(averaged.step + 1, unflatten(params_flat_));
}

// Note [DiLoCo]
// averaging = "diloco" (Douillard et al. 2023) is local SGD (Note [local SGD] in
// actors/averaging/allreduce_averager_actor.cpp) whose sync is an optimizer step of its own.
// Each replica keeps the outer parameters theta (the parameters after the last sync; at the
// start, the initial ones) and, at a sync after step k, sends its averager the delta
// theta - w_r of its inner parameters w_r instead of w_r. The mean delta is the outer
// gradient: theta' = SGD(theta, mean delta) with [parallel] outer_lr and outer_momentum,
// Nesterov's by default (the paper's 0.7 and 0.9), run by the same sgd_update kernel as the
// inner SGD. Every replica computes the same theta' from the same bits, which becomes both
// the next version of the parameters and the next theta; inner optimizer state stays each
// replica's. With outer SGD at lr 1 and no momentum theta' = mean w_r: local SGD, and so at
// sync_every = 1 with inner SGD synchronous data parallelism (tests/actors/averaging/
// local_sgd_test.cpp). theta and the outer momentum are optimizer state like any other:
// checkpointed as "i.p.outer_params" and "i.p.outer_momentum", restored where present.
tensor optimizer_actor::outer_step(std::int64_t step, const tensor& mean_delta) {
  const auto& l = settings_.local;
  auto next = tensor::empty({parameter_count()}, dtype::f32, settings_.on->id());
  kernels::sgd_hyper hyper{static_cast<float>(l.outer_lr),
                           static_cast<float>(l.outer_momentum),
                           0.0f,  // dampening
                           0.0f,  // weight decay: the inner optimizer's
                           l.outer_nesterov,
                           false};  // a zero buffer's first step is the same (dampening 0)
  auto& work = settings_.on->work();
  work.wait_for(mean_delta.ready());
  next.set_ready(work.submit(
      [sgd = sgd_, context = settings_.on->context(), outer = outer_flat_, next, delta = mean_delta,
       momentum = outer_momentum_flat_, hyper] {
        sgd(context, next.numel(), outer.f32(), next.f32(), delta.f32(),
            momentum.defined() ? momentum.f32() : nullptr, hyper);
      },
      job_for_step(job_kind::update, step)));
  outer_flat_ = next;  // read only from now on, as every version is
  return next;
}

// Note [sharded optimizer] in actors/averaging/grad_averager_actor.cpp: we update only the spans
// our averager owns, into a new buffer that the averager then all-gathers.
void optimizer_actor::update_shard(shard_msg& reduced) {
  TROUPE_CHECK(reduced.step == version_, settings_.name << " got reduced gradients of step "
                                                        << reduced.step << " at version "
                                                        << version_);
  TROUPE_CHECK(params_flat_.defined() && reduced.flat.numel() == params_flat_.numel() &&
                   reduced.spans.size() % 2 == 0,
               settings_.name << ": reduced gradients of " << reduced.flat.numel()
                              << " floats for " << params_flat_.numel() << " parameters");
  auto next = tensor::empty({params_flat_.numel()}, dtype::f32, settings_.on->id());
  auto grads = arrive(std::vector<tensor>{reduced.flat}, *settings_.on).front();
  owned_spans_ = reduced.spans;
  std::vector<piece> pieces;
  for (std::size_t i = 0; i < reduced.spans.size(); i += 2) {
    auto offset = reduced.spans[i], n = reduced.spans[i + 1];
    TROUPE_CHECK(offset >= 0 && n >= 0 && offset + n <= params_flat_.numel(),
                 settings_.name << ": span [" << offset << ", " << offset + n << ") outside "
                                << params_flat_.numel() << " parameters");
    pieces.push_back(piece{params_flat_.f32() + offset, next.f32() + offset,
                           grads.f32() + offset, momentum_flat_.f32() + offset,
                           second_flat_.defined() ? second_flat_.f32() + offset : nullptr, n});
  }
  next.set_ready(submit_update(reduced.step, std::move(pieces),
                               {params_flat_, next, grads, momentum_flat_, second_flat_},
                               reduced.step));
  shard_msg out{reduced.step, settings_.layer_index, shard_msg::updated, std::move(next),
                std::move(reduced.spans)};
  stamp_send(out, averager_track_, "updated", bytes_of(out.flat));
  send(averager_, std::move(out));
}

void optimizer_actor::take_gathered(shard_msg& gathered) {
  TROUPE_CHECK(gathered.step == version_ && gathered.flat.numel() == params_flat_.numel(),
               settings_.name << ": gathered parameters of step " << gathered.step
                              << " at version " << version_);
  params_flat_ = gathered.flat;
  set_version(gathered.step + 1, unflatten(params_flat_));
}

std::vector<tensor> optimizer_actor::unflatten(const tensor& flat) const {
  std::vector<tensor> views;
  std::int64_t offset = 0;
  for (const auto& p : params_) {
    views.push_back(flat.view(offset, p.shape()));
    views.back().set_ready(flat.ready());
    offset += p.numel();
  }
  return views;
}

void optimizer_actor::set_version(std::int64_t version, std::vector<tensor> params) {
  params_ = std::move(params);
  version_ = version;
  if (settings_.writes_checkpoints &&
      (settings_.checkpoints.due(version_) || version_ == requested_checkpoint_))
    checkpoint(version_);
  deliver_waiting();
  publish();
}

void optimizer_actor::deliver_waiting() {
  for (auto it = waiting_for_version_.begin(); it != waiting_for_version_.end();) {
    if (it->first <= version_) {
      it->second.deliver(params_);
      it = waiting_for_version_.erase(it);
    } else {
      ++it;
    }
  }
}

// Note [who writes a checkpoint]
// A checkpoint holds each tensor once (Note [checkpoint names] in
// runtime/checkpoint/restore.hpp). Unsharded, the optimizers of one layer's replicas
// (ring averaging) are identical, so the first replica's writes the layer's shard (a
// central averager's optimizer serves every replica and writes it). Sharded (ZeRO-1), each
// replica's optimizer updated only the spans its averager owns: it writes those spans of
// the parameters and of its state as pieces, and the replicas' pieces cover each tensor
// once. The copy is one job on this device's stream, after the update that made the
// version and before any later one, so it sees exactly that version and its state; the
// writer's thread waits for it and writes the file, and training goes on meanwhile.
void optimizer_actor::checkpoint(std::int64_t version) {
  const auto states = state_names();
  std::vector<tensor> sources;  // what is copied, in the order of `names`
  std::vector<std::string> names;
  auto add = [&](const std::string& name, const tensor& source) {
    names.push_back(name);
    sources.push_back(source);
  };
  const auto buffers = state_buffers();
  auto states_of = [&](std::int64_t offset, std::int64_t n) {
    std::vector<tensor> out;
    for (const auto& b : buffers)
      out.push_back(b.view(offset, {n}));
    return out;
  };
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& spec = settings_.params[i];
    const auto name =
        replica_tensor_name(own_copy_replica(), parameter_name(settings_.layer_index, spec.name));
    const auto n = params_[i].numel();
    if (!settings_.sharded) {
      add(name, params_[i]);
      auto state = states_of(offset, n);
      for (std::size_t s = 0; s < state.size(); ++s)
        add(name + "." + states[s], state[s].reshaped(spec.shape));
    } else {
      // The owned spans, cut at this parameter's bounds [offset, offset + n).
      TROUPE_CHECK(params_flat_.defined(), settings_.name << ": sharded without a flat buffer");
      for (std::size_t k = 0; k + 1 < owned_spans_.size(); k += 2) {
        const auto begin = std::max(owned_spans_[k], offset);
        const auto end = std::min(owned_spans_[k] + owned_spans_[k + 1], offset + n);
        if (begin >= end)
          continue;
        add(piece_name(name, begin - offset), params_flat_.view(begin, {end - begin}));
        auto state = states_of(begin, end - begin);
        for (std::size_t s = 0; s < state.size(); ++s)
          add(piece_name(name + "." + states[s], begin - offset), state[s]);
      }
    }
    offset += n;
  }
  std::vector<tensor> copies;
  for (const auto& source : sources)
    copies.push_back(tensor::empty(source.shape(), dtype::f32, settings_.on->id()));
  auto copied = std::make_shared<std::atomic<bool>>(false);
  auto done = settings_.on->work().submit(
      [copy = kernels::lookup<kernels::ops::copy>(settings_.on->id().type),
       context = settings_.on->context(), sources, copies, copied] {
        for (std::size_t i = 0; i < sources.size(); ++i)
          copy(context, static_cast<std::int64_t>(sources[i].bytes()), sources[i].raw(),
               copies[i].raw());
        copied->store(true);
      },
      job_for_step(job_kind::checkpoint, version));
  for (auto& c : copies)
    c.set_ready(done);
  const auto file =
      "layer-" + std::to_string(settings_.layer_index) +
      (settings_.sharded ? "-part-" + std::to_string(settings_.replica) : "") +
      (own_copy_replica() > 0 ? "-replica-" + std::to_string(settings_.replica) : "") +
      ".safetensors";
  send(settings_.checkpoints.writer,
       checkpoint_shard_msg{version, file, std::move(names), std::move(copies), std::move(copied)});
}

event optimizer_actor::submit_update(std::int64_t step, std::vector<piece> pieces,
                                     std::vector<tensor> keep, std::int64_t applied,
                                     std::int32_t replica) {
  const auto& o = settings_.optimizer;
  const auto lr = static_cast<float>(settings_.schedule.at(step));
  const bool adam = is_adam_family(o.type);
  kernels::sgd_hyper sgd{lr,
                         static_cast<float>(o.momentum),
                         static_cast<float>(o.dampening),
                         static_cast<float>(o.weight_decay),
                         o.nesterov,
                         applied == 0};
  kernels::adam_hyper adam_hyper{lr,
                                 static_cast<float>(o.beta1),
                                 static_cast<float>(o.beta2),
                                 static_cast<float>(o.eps),
                                 static_cast<float>(o.weight_decay),
                                 o.type == optimizer_type::adamw,
                                 applied + 1};
  const bool momentum = o.momentum != 0;
  return settings_.on->work().submit(
      [=, context = settings_.on->context(), pieces = std::move(pieces), keep = std::move(keep),
       sgd_update = sgd_, adam_update = adam_] {
        // Out of place: one pass reads version step (which subscribers may still be
        // reading, so it is never written) and writes version step + 1 (include/troupe/ops.hpp,
        // Note [out-of-place updates]).
        for (const auto& p : pieces) {
          if (adam)
            adam_update(context, p.n, p.current, p.next, p.grad, p.first, p.second, adam_hyper);
          else
            sgd_update(context, p.n, p.current, p.next, p.grad, momentum ? p.first : nullptr, sgd);
        }
      },
      job_for_step(job_kind::update, step, replica));
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_BUILTIN_ACTOR_KIND(
    "optimizer", "owns one layer's parameters and optimizer state ([optimizer])",
    [](const actor_plan& plan, spawn_context& context) {
      optimizer_actor_settings s;
      s.name = plan.name;
      s.layer_index = plan.layer;
      const auto& model_layer = *std::find_if(
          context.graph.actors.begin(), context.graph.actors.end(),
          [&](const actor_plan& a) { return a.kind == actor_kind::layer && a.layer == plan.layer; });
      const auto& input_shape = context.graph.shapes.at(static_cast<std::size_t>(plan.layer));
      const auto math = create_layer(model_layer.math);
      s.params = math->parameters(input_shape);
      s.bf16_params = bf16_parameter_mask(*math, model_layer.math, input_shape, context.config);
      s.optimizer = context.config.optimizer;
      s.schedule = context.schedule;
      s.seed = context.config.run.seed;
      s.on = &context.devices.at(plan.device);
      auto start = context.start.layers.find(plan.layer);
      if (start != context.start.layers.end())
        s.start = &start->second;
      s.start_version = context.start.step;
      s.replica = plan.replica;
      s.sharded = optimizer_is_sharded(plan, context.graph, context.config);
      s.writes_checkpoints = optimizer_writes_checkpoints(plan, context.graph, context.config);
      if ((context.config.parallel.rule == averaging_rule::local_sgd ||
           context.config.parallel.rule == averaging_rule::diloco) &&
          plan.replica >= 0) {
        const bool averaged = std::any_of(
            context.graph.actors.begin(), context.graph.actors.end(), [&](const actor_plan& a) {
              return a.kind == actor_kind::averager && a.layer == plan.layer &&
                     a.replica == plan.replica;
            });
        if (!averaged)
          throw user_error(plan.name + ": [parallel] averaging = \"" +
                           to_string(context.config.parallel.rule) + "\" averages its " +
                           "parameters through its replica's averager of layer " +
                           std::to_string(plan.layer) + ", and the config has none");
        const auto& p = context.config.parallel;
        s.local.sync_every = p.sync_every;
        s.local.diloco = p.rule == averaging_rule::diloco;
        s.local.outer_nesterov = p.outer_nesterov;
        s.local.outer_lr = p.outer_lr;
        s.local.outer_momentum = s.local.diloco ? p.outer_momentum : 0;
        s.local.total_steps = context.plan.total_steps;
        if (context.plan.evaluate)
          s.local.epoch_steps = context.plan.steps_per_epoch;
      }
      if (context.config.parallel.rule == averaging_rule::async) {
        if (plan.replica >= 0)
          throw user_error(plan.name + ": [parallel] averaging = \"async\" has one optimizer " +
                           "a layer (its server) for every replica, and this one is replica " +
                           std::to_string(plan.replica) + "'s");
        s.async.max_staleness = context.config.parallel.max_staleness;
        s.async.total_steps = context.plan.total_steps;
        if (context.plan.evaluate)
          s.async.epoch_steps = context.plan.steps_per_epoch;
      }
      s.checkpoints = context.checkpoints;
      return context.system.spawn<optimizer_actor>(std::move(s));
    });

}  // namespace troupe
