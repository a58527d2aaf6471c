// grads_filter.cpp: the protocol of an actor on a grads wire (see the header).
#include "troupe/grads_filter.hpp"

#include <stdexcept>

#include "runtime/core/transfer.hpp"

namespace troupe {

grads_filter::grads_filter(caf::actor_config& config, std::string name, device* on,
                           std::string verb)
    : device_actor(config, std::move(name), on), verb_(std::move(verb)) {
  static_cast<void>(this->on());  // TROUPE_CHECKs that it has a device
}

caf::message_handler grads_filter::handlers() {
  return {
      grads_handler([this](weight_grads_msg& message) { pass_on(message); }),
  };
}

void grads_filter::connect(const wiring_msg& wiring) {
  source_ = single_end(wiring.in("grads"), "grads wire in").peer_name;
  auto out = single_end(wiring.out("grads"), "grads wire out");
  sink_ = out.peer;
  sink_track_ = out.peer_track;
}

void grads_filter::release_peers() { sink_ = nullptr; }

std::string grads_filter::waiting_for() const {
  return ": " + verb_ + " " + std::to_string(steps_) + " step(s) of gradients from " + source_;
}

void grads_filter::pass_on(weight_grads_msg& message) {
  if (message.grads.empty())
    throw std::logic_error(actor_name() + ": gradients of step " + std::to_string(message.step) +
                           " hold no tensors");
  for (const auto& g : message.grads)
    if (!g.defined() || g.type() != dtype::f32)
      throw std::logic_error(actor_name() + ": every gradient must be a defined f32 tensor");
  // Same device: the tensors themselves (handed over). Another device: copies on ours,
  // ready after the copy job.
  auto grads = arrive(message.grads, on());
  auto done = transform(grads, message);
  for (auto& g : grads)
    g.set_ready(done);
  weight_grads_msg out{message.step, message.layer, message.replica, std::move(grads),
                       trace_stamp{}};
  stamp_send(out, sink_track_, "grads", bytes_of(out.grads));
  send(sink_, std::move(out));
  ++steps_;
}

}  // namespace troupe
