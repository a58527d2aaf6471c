// loss_actor.hpp: the loss at the end of one replica's model ([model] loss, troupe/loss.hpp).
//
// It pairs the output of a micro-batch (from the last layer) with its targets (from the
// data loader), in whichever order they arrive, runs the loss kind's job on its device (the
// loss and its metrics' sums) and, for training micro-batches, sends the output's gradient
// (scaled by 1 / the global batch's terms) back to the
// last layer, which also returns that wire's credit. With `flush` (GPipe) it holds the
// dlogits of a step until all M micro-batches of the step have their loss, then sends
// them in micro-batch order: all forwards, then all backwards. When the last loss job of a
// step has run it reports the step's loss and metric sums to the trainer (an evaluation
// batch's job, that batch's). The protocol around that (wiring, failures,
// status, finish, readiness, tracing) is device_actor's.
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/loss.hpp"
#include "troupe/messages.hpp"

namespace troupe {

struct loss_actor_settings {
  std::string name = "loss";
  std::shared_ptr<const loss_function> loss;  // made for the device's type
  std::int64_t width = 10;  // the output's last dimension: classes, or outputs a sample
  std::int32_t microbatches = 1;  // M
  bool flush = false;             // GPipe: backward only after all M forwards of a step
  device* on = nullptr;
};

class loss_actor : public device_actor {
 public:
  loss_actor(caf::actor_config& config, loss_actor_settings settings);

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string waiting_for() const override;

 private:
  using key = std::tuple<std::uint8_t, std::int64_t, std::int32_t, std::int32_t>;
  static key key_of(const micro_tag& tag) {
    return {static_cast<std::uint8_t>(tag.stage), tag.step, tag.microbatch, tag.replica};
  }

  void compute(const micro_tag& tag, const tensor& logits, const labels_msg& labels);
  void send_back(gradient_msg message);

  loss_actor_settings settings_;
  loss_spec spec_;
  caf::actor last_layer_;
  std::string last_layer_name_;
  std::uint32_t last_layer_track_ = 0;
  std::map<key, tensor> logits_;      // logits waiting for labels
  std::map<key, labels_msg> labels_;  // labels waiting for logits
  std::map<std::int64_t, std::vector<gradient_msg>> held_;  // flush: per step

  // Note [one report a step] in loss_actor.cpp.
  struct step_sums {  // written only by the step's loss jobs
    loss_report_msg report;
    std::int32_t done = 0;  // loss jobs that have added theirs
  };
  struct step_entry {
    std::shared_ptr<step_sums> sums;
    std::int32_t submitted = 0;  // loss jobs submitted for the step
  };
  std::map<std::int64_t, step_entry> step_sums_;  // training steps with jobs still to submit
};

}  // namespace troupe
