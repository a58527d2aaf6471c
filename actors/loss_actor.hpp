// loss_actor.hpp: softmax cross-entropy at the end of the model.
//
// It pairs the logits of a micro-batch (from the last layer) with its labels (from the
// data loader), in whichever order they arrive, computes loss and accuracy on its device
// and, for training micro-batches, sends dlogits (scaled by 1 / global batch) back to the
// last layer at once. When the loss job has run, it reports loss and accuracy to the
// trainer. It keeps no state across micro-batches beyond unpaired halves.
#pragma once

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <tuple>

#include "kernels/ops.hpp"
#include "runtime/device.hpp"
#include "runtime/messages.hpp"

namespace troupe {

struct loss_actor_settings {
  std::string name = "loss";
  std::int64_t classes = 10;
  device* on = nullptr;
  caf::actor last_layer;  // receives dlogits
  caf::actor trainer;     // receives loss reports and failures
};

class loss_actor : public caf::event_based_actor {
 public:
  loss_actor(caf::actor_config& config, loss_actor_settings settings);
  caf::behavior make_behavior() override;

 private:
  using key = std::tuple<std::uint8_t, std::int64_t, std::int32_t, std::int32_t>;
  static key key_of(const micro_tag& tag) {
    return {static_cast<std::uint8_t>(tag.stage), tag.step, tag.microbatch, tag.replica};
  }

  void compute(const micro_tag& tag, const tensor& logits, const labels_msg& labels);

  loss_actor_settings settings_;
  kernels::ops::softmax_xent::function softmax_xent_;
  kernels::ops::accuracy::function accuracy_;
  std::map<key, tensor> logits_;      // logits waiting for labels
  std::map<key, labels_msg> labels_;  // labels waiting for logits
};

}  // namespace troupe
