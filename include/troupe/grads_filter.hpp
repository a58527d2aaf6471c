// grads_filter.hpp: the base of actors that transform one layer's gradients on a grads
// wire (a clipper, a scaler, a compressor): one grads wire in, one out.
//
// Everything but the transformation is here, on top of device_actor: gradients from
// another device come back once written and are copied over (arrive), a message without
// tensors or with a tensor that is not f32 is an error naming the actor and the step, the
// transformed gradients go on (stamped) to the one sink, ready when the transformation's
// last job has run, and the status line counts the steps passed on. A derived filter
// submits its math in transform() and names itself in role():
//
//     troupe::event transform(std::vector<troupe::tensor>& grads,
//                             const troupe::weight_grads_msg& message) override {
//       return on().work().submit([grads, ...] { ... scale grads in place ... },
//                                 job_for_step("scale", message.step, message.replica));
//     }
//
// The gradients it gets are its own to write: weight_grads_msg hands them over, or they
// are this device's copies (include/troupe/messages.hpp).
#pragma once

#include <string>
#include <vector>

#include "troupe/device_actor.hpp"

namespace troupe {

class grads_filter : public device_actor {
 public:
  /// `verb` says what it did in the status line: "clipped 3 step(s) of gradients from ...".
  grads_filter(caf::actor_config& config, std::string name, device* on, std::string verb);

 protected:
  /// Submits the transformation of `grads` (on this device, ours to write) to the device's
  /// stream and returns the event of its last job.
  virtual event transform(std::vector<tensor>& grads, const weight_grads_msg& message) = 0;

  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string waiting_for() const override;

 private:
  void pass_on(weight_grads_msg& message);

  std::string verb_;
  caf::actor sink_;  // the optimizer (or averager) the gradients go on to
  std::uint32_t sink_track_ = 0;
  std::string source_;  // the grads wire's sender, for the watchdog
  std::int64_t steps_ = 0;
};

}  // namespace troupe
