// loss_actor.cpp: pairing logits with labels, the loss job and its report.
#include "actors/training/loss_actor.hpp"

#include <algorithm>
#include <cstring>

#include "actors/base/actor_kinds.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/stream_state.hpp"
#include "runtime/core/transfer.hpp"
#include "runtime/model/loss.hpp"
#include "troupe/error.hpp"

namespace troupe {

loss_actor::loss_actor(caf::actor_config& config, loss_actor_settings settings)
    : device_actor(config, settings.name, settings.on),
      settings_(std::move(settings)),
      spec_(settings_.loss->spec()) {}

namespace {

// Logits and labels of a micro-batch come in either order: what arrives (`item`) either
// meets its partner, waiting in `partners`, and `then(partner)` runs before the partner is
// dropped, or it waits in `waiting` for the partner.
template <class Key, class Item, class Partner, class Then>
void pair_up(const Key& k, Item& item, std::map<Key, Item>& waiting,
             std::map<Key, Partner>& partners, Then then) {
  auto it = partners.find(k);
  if (it == partners.end()) {
    waiting.emplace(k, std::move(item));
    return;
  }
  then(it->second);
  partners.erase(it);
}

}  // namespace

caf::message_handler loss_actor::handlers() {
  return {
      [this](activation_msg& message) {
        if (deferred_until_ready(message, {&message.x}))
          return;
        auto span = handling_span("forward", message.trace, message.tag, bytes_of(message.x));
        pair_up(key_of(message.tag), message.x, logits_, labels_,
                [&](const labels_msg& labels) { compute(message.tag, message.x, labels); });
      },
      [this](labels_msg& message) {
        if (deferred_until_ready(message, {&message.labels}))
          return;
        auto span = handling_span("labels", message.trace, message.tag, bytes_of(message.labels));
        pair_up(key_of(message.tag), message, labels_, logits_,
                [&](const tensor& logits) { compute(message.tag, logits, message); });
      },
  };
}

void loss_actor::connect(const wiring_msg& wiring) {
  auto in = wiring.in("activations");
  TROUPE_CHECK(in.size() == 1, settings_.name << " needs one activations wire in");
  last_layer_ = in[0].peer;
  last_layer_name_ = in[0].peer_name;
  last_layer_track_ = in[0].peer_track;
}

void loss_actor::release_peers() {
  last_layer_ = nullptr;
}

std::string loss_actor::waiting_for() const {
  std::string s;
  for (const auto& [step, held] : held_)
    s += "; holds " + std::to_string(held.size()) + " of " +
         std::to_string(settings_.microbatches) + " gradients of step " + std::to_string(step) +
         " for the GPipe flush (waiting for the logits of the other micro-batches from " +
         last_layer_name_ + ")";
  if (!logits_.empty())
    s += "; " + std::to_string(logits_.size()) + " logits waiting for their labels from the loader";
  if (!labels_.empty())
    s += "; " + std::to_string(labels_.size()) + " labels waiting for their logits from " +
         last_layer_name_;
  return s;
}

// Note [one report a step]
// The trainer lives on the host thread (Note [actors on device threads] in
// device_scheduler.cpp), and each report it handles is a turn of that thread: on a machine
// whose cores all run devices, its wake-up, handler and sleep take a device's core (about
// 11 us of CPU a turn for the shipped MLP here, Note [what a host turn costs] in
// calibrate.cpp). A report per micro-batch made that R x M turns a step where the trainer
// needs R. So the loss jobs of a training step add their sums into one step_sums, and the
// job that adds the step's last (the M-th, whichever micro-batch it is: a stream runs its
// jobs one at a time, in the order submitted) sends them as one report. The trainer's
// totals are the same sums in the same order (for one replica, bit for bit). An evaluation
// batch is one micro-batch and reports at once. Where a step's losses run back to back
// (GPipe) one wake-up of the host handled them all anyway: its host thread used the same
// CPU time before and after (0.29 s in 3000 steps); 1F1B's losses are spread over the step.
void loss_actor::compute(const micro_tag& tag, const tensor& arrived_logits,
                         const labels_msg& labels) {
  auto& device = *settings_.on;
  auto& work = device.work();
  // A model whose last layer keeps bf16 activations (a relu, a flatten) sends them so: the
  // loss reads f32 (Note [bf16 activations] in actors/training/layer_actor.cpp).
  auto logits =
      in_dtype(arrive(arrived_logits, device), dtype::f32, device, job_for(job_kind::convert, tag));
  auto y = arrive(labels.labels, device);
  // Rows: samples, or every position of every sample (logits (b, T, classes), labels
  // (b, T)); the loss is the mean over its terms, as torch's losses over (b T) rows.
  const auto width = settings_.width;
  TROUPE_CHECK(logits.shape().back() == width,
               settings_.name << ": the output has " << logits.shape().back()
                              << " values a row, expected " << width);
  const auto rows = logits.numel() / width;
  const bool ids = spec_.targets == target_kind::class_ids;
  TROUPE_CHECK(y.numel() == (ids ? rows : logits.numel()) &&
                   y.type() == (ids ? dtype::i32 : dtype::f32),
               settings_.name << ": " << rows << " output rows of " << width << " but "
                              << y.numel() << " targets of the wrong kind");
  const bool training = tag.stage == phase::train;
  tensor dlogits;
  if (training)
    dlogits = tensor::empty(logits.shape(), dtype::f32, device.id());
  constexpr std::int64_t sum_count = 2 + loss_job::max_metrics;
  auto sums = tensor::empty({sum_count}, dtype::f32, device.id());
  const float scale =
      labels.global_terms > 0 ? 1.0f / static_cast<float>(labels.global_terms) : 0.0f;
  // Note [one report a step]: the step's sums, shared by its loss jobs.
  std::shared_ptr<step_sums> step;
  if (training) {
    auto& entry = step_sums_[tag.step];
    if (entry.sums == nullptr)
      entry.sums = std::make_shared<step_sums>();
    step = entry.sums;
    if (++entry.submitted == settings_.microbatches)
      step_sums_.erase(tag.step);  // the jobs hold the sums from here
  }

  // What the step's last loss job reports: the sums of its micro-batches (read on the
  // host, once the values are written).
  // The trainer is node0's: from another node the report crosses (a simulation prices it).
  auto* crossing = device.id().node != 0 ? &work : nullptr;
  auto report = [tag, rows, step, metrics = spec_.metrics.size(),
                 microbatches = settings_.microbatches, report_to = trainer(),
                 track = track(), crossing](const float* values) {
    loss_report_msg report;
    report.tag = tag;
    report.loss_sum = values[0];
    report.terms = values[1];
    for (std::size_t m = 0; m < metrics; ++m)
      report.metric_sums[m] = values[2 + m];
    report.samples = rows;
    if (step != nullptr) {  // the jobs of one stream end one at a time, in order
      auto& total = step->report;
      total.loss_sum += report.loss_sum;
      total.terms += report.terms;
      for (std::size_t m = 0; m < report.metric_sums.size(); ++m)
        total.metric_sums[m] += report.metric_sums[m];
      total.samples += report.samples;
      if (++step->done < microbatches)
        return;
      report = total;
      report.tag = tag;
      report.microbatches = microbatches;
    }
    stamp(report, track, 0, "report", 0);
    if (crossing != nullptr)
      crossing->sent_to_network(0, true);
    const node_send_scope sending{node_send::posted};
    // A trainer in another process of this machine takes it from shared memory.
    if (!detail::post_message(caf::actor_cast<caf::actor>(report_to), report, track))
      caf::anon_send(report_to, std::move(report));  // typed: only what a trainer takes
  };
  auto* gpu = gpu_queue_of(work);
  // On a GPU the job only issues the kernels: the sums come to the host by an asynchronous
  // copy, and are reported when the GPU has run it (Note [GPU streams]).
  tensor host_sums;
  if (gpu != nullptr)
    host_sums = tensor::empty_pinned({sum_count});
  // The job captures everything by value: it may run after this actor has quit.
  auto done = work.submit(
      [loss = settings_.loss, context = device.context(), width, logits, y, dlogits, sums, scale,
       rows, ids, training, gpu, host_sums, report] {
        if (gpu == nullptr)
          std::fill_n(sums.f32(), sum_count, 0.0f);
        loss_job job;
        job.rows = rows;
        job.width = width;
        job.output = logits.f32();
        job.class_ids = ids ? y.i32() : nullptr;
        job.values = ids ? nullptr : y.f32();
        job.grad_scale = scale;
        job.sums = sums.f32();
        job.doutput = training ? dlogits.f32() : nullptr;
        loss->compute(context, job);
        if (gpu == nullptr) {  // a CPU stream's values are final here
          report(sums.f32());
          return;
        }
        gpu->copy(host_sums.raw(), sums.raw(), sum_count * sizeof(float));
      },
      job_for(job_kind::loss, tag));
  if (gpu != nullptr)
    done.then([host_sums, report] { report(host_sums.f32()); });
  if (!training) {
    release_msg release{tag};
    stamp_send(release, last_layer_track_, "release", 0);
    send<caf::message_priority::high>(last_layer_, std::move(release));
    return;
  }
  dlogits.set_ready(done);
  send_back(gradient_msg{tag, std::move(dlogits)});
}

void loss_actor::send_back(gradient_msg message) {
  stamp_send(message, last_layer_track_, "backward", bytes_of(message.dx));
  if (!settings_.flush || settings_.microbatches == 1) {
    send_written<caf::message_priority::high>(last_layer_, std::move(message));
    return;
  }
  const auto step = message.tag.step;
  auto& held = held_[step];
  held.push_back(std::move(message));
  if (static_cast<std::int32_t>(held.size()) < settings_.microbatches)
    return;
  std::sort(held.begin(), held.end(), [](const gradient_msg& a, const gradient_msg& b) {
    return a.tag.microbatch < b.tag.microbatch;
  });
  for (auto& m : held)
    send_written<caf::message_priority::high>(last_layer_, std::move(m));
  held_.erase(step);
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_BUILTIN_ACTOR_KIND("loss",
                                   "the [model] loss after a replica's last layer (softmax "
                                   "cross-entropy, mse, ...; at every position of a sequence)",
                                   [](const actor_plan& plan, spawn_context& context) {
                                     loss_actor_settings s;
                                     s.name = plan.name;
                                     s.on = &context.devices.at(plan.device);
                                     s.loss = create_loss(context.config.model, s.on->id().type);
                                     s.width = context.data->train.target_width();
                                     s.microbatches =
                                         static_cast<std::int32_t>(context.plan.microbatches);
                                     s.flush = context.graph.schedule == pipeline_schedule::gpipe;
                                     return context.system.spawn<loss_actor>(std::move(s));
                                   });

}  // namespace troupe
