// loss_actor.cpp: pairing logits with labels, the loss job and its report.
#include "actors/training/loss_actor.hpp"

#include <algorithm>
#include <cstring>

#include "actors/base/actor_kinds.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/stream_state.hpp"
#include "runtime/core/transfer.hpp"
#include "troupe/error.hpp"

namespace troupe {

loss_actor::loss_actor(caf::actor_config& config, loss_actor_settings settings)
    : device_actor(config, settings.name, settings.on), settings_(std::move(settings)) {
  auto type = settings_.on->id().type;
  softmax_xent_ = kernels::lookup<kernels::ops::softmax_xent>(type);
  accuracy_ = kernels::lookup<kernels::ops::accuracy>(type);
}

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
  auto logits = arrive(arrived_logits, device);
  auto y = arrive(labels.labels, device);
  // Rows: samples, or every position of every sample (logits (b, T, classes), labels
  // (b, T)); the loss is the mean over rows, as torch's cross_entropy over (b T) rows.
  TROUPE_CHECK(logits.shape().back() == settings_.classes,
               settings_.name << ": logits have " << logits.shape().back()
                              << " classes, expected " << settings_.classes);
  const auto rows = logits.numel() / settings_.classes;
  const auto positions = rows / logits.dim(0);
  TROUPE_CHECK(y.numel() == rows,
               settings_.name << ": " << rows << " logits rows but " << y.numel() << " labels");
  const bool training = tag.stage == phase::train;
  tensor dlogits;
  if (training)
    dlogits = tensor::empty(logits.shape(), dtype::f32, device.id());
  auto loss_sum = tensor::empty({1}, dtype::f32, device.id());
  auto correct = tensor::empty({1}, dtype::i32, device.id());
  const float scale = 1.0f / static_cast<float>(labels.global_batch * positions);
  // Note [one report a step]: the step's sums, shared by its loss jobs.
  std::shared_ptr<step_sums> sums;
  if (training) {
    auto& entry = step_sums_[tag.step];
    if (entry.sums == nullptr)
      entry.sums = std::make_shared<step_sums>();
    sums = entry.sums;
    if (++entry.submitted == settings_.microbatches)
      step_sums_.erase(tag.step);  // the jobs hold the sums from here
  }

  // What the step's last loss job reports: the sums of its micro-batches (read on the
  // host, once the values are written).
  auto report = [tag, rows, sums, microbatches = settings_.microbatches, report_to = trainer(),
                 track = track()](float loss, std::int32_t right) {
    loss_report_msg report{tag, static_cast<double>(loss), static_cast<std::int64_t>(right), rows};
    if (sums != nullptr) {  // the jobs of one stream end one at a time, in order
      sums->report.loss_sum += report.loss_sum;
      sums->report.correct += report.correct;
      sums->report.samples += report.samples;
      if (++sums->done < microbatches)
        return;
      report.loss_sum = sums->report.loss_sum;
      report.correct = sums->report.correct;
      report.samples = sums->report.samples;
      report.microbatches = microbatches;
    }
    stamp(report, track, 0, "report", 0);
    // A trainer in another process of this machine takes it from shared memory.
    if (!detail::post_message(caf::actor_cast<caf::actor>(report_to), report, track))
      caf::anon_send(report_to, std::move(report));  // typed: only what a trainer takes
  };
  auto* gpu = gpu_queue_of(work);
  // On a GPU the job only issues the kernels: the two sums come to the host by an
  // asynchronous copy, and are reported when the GPU has run it (Note [GPU streams]).
  tensor host_sums;
  if (gpu != nullptr)
    host_sums = tensor::empty_pinned({2});
  // The job captures everything by value: it may run after this actor has quit.
  auto done = work.submit(
      [xent = softmax_xent_, accuracy = accuracy_, context = device.context(),
       classes = static_cast<int>(settings_.classes), logits, y, dlogits, loss_sum, correct, scale,
       rows, training, gpu, host_sums, report] {
        const int n = static_cast<int>(rows);
        xent(context, n, classes, logits.f32(), y.i32(), scale, loss_sum.f32(),
             training ? dlogits.f32() : nullptr);
        accuracy(context, n, classes, logits.f32(), y.i32(), correct.i32());
        if (gpu == nullptr) {  // a CPU stream's values are final here
          report(*loss_sum.f32(), *correct.i32());
          return;
        }
        gpu->copy(host_sums.raw(), loss_sum.raw(), sizeof(float));
        gpu->copy(static_cast<char*>(host_sums.raw()) + sizeof(float), correct.raw(),
                  sizeof(std::int32_t));
      },
      job_for(job_kind::loss, tag));
  if (gpu != nullptr)
    done.then([host_sums, report] {
      std::int32_t right = 0;
      std::memcpy(&right, host_sums.f32() + 1, sizeof right);
      report(host_sums.f32()[0], right);
    });
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
                                   "softmax cross-entropy after a replica's last layer (at "
                                   "every position of a sequence's labels)",
                                   [](const actor_plan& plan, spawn_context& context) {
                                     loss_actor_settings s;
                                     s.name = plan.name;
                                     s.classes = context.data->train.classes;
                                     s.microbatches =
                                         static_cast<std::int32_t>(context.plan.microbatches);
                                     s.flush = context.graph.schedule == pipeline_schedule::gpipe;
                                     s.on = &context.devices.at(plan.device);
                                     return context.system.spawn<loss_actor>(std::move(s));
                                   });

}  // namespace troupe
