// inputs.hpp: submitting work only once its inputs from other devices are ready.
//
// Note [no blocking waits]
// A device stream runs its jobs in order. If an actor submitted "wait for that tensor
// from the other device, then compute", everything submitted after it would wait too,
// even work that is ready: a pipeline stage would not run micro-batch 0's backward until
// micro-batch 3's gradient arrived, and a replica would not compute an early layer's
// backward while its ring all-reduce waits for the other replica. So an actor that gets
// a message whose tensors come from another device and are not written yet puts the
// message aside: the producing stream sends it back to the actor once the tensor is
// ready (event::then), and only then does the actor copy it over and submit. Tensors on
// the actor's own device need nothing: its stream's order covers them.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <initializer_list>

#include "troupe/device.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// The first tensor of `inputs` that lives on another device than `here` and is not
/// written yet, or nullptr.
inline const tensor* pending_input(const device_id& here,
                                   std::initializer_list<const tensor*> inputs) {
  for (const auto* t : inputs)
    if (t->defined() && t->device() != here && !t->ready().reached())
      return t;
  return nullptr;
}

inline const tensor* pending_input(const device_id& here, const std::vector<tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.device() != here && !t.ready().reached())
      return &t;
  return nullptr;
}

/// If `pending` is not null, arranges for `message` to come back to `self` once that
/// tensor is ready (the handler then checks the rest) and returns true: the caller
/// returns and handles the message then. Returns false when nothing is pending.
/// `here`, the stream `self` handles its messages on, if it has one, is told the message
/// is on its way (stream::expect; `wanted` as there).
template <caf::message_priority Priority = caf::message_priority::normal, class Message>
bool come_back_when_ready(caf::event_based_actor* self, const tensor* pending, Message& message,
                          stream* here = nullptr, std::function<bool()> wanted = {}) {
  if (pending == nullptr)
    return false;
  auto me = caf::actor_cast<caf::actor>(self);
  // The event is copied out first: `pending` points into `message`, which moves into the
  // callback below.
  const event written = pending->ready();
  auto coming = here != nullptr ? here->expect(written, std::move(wanted)) : stream::expectation{};
  written.then([me, message = std::move(message), coming = std::move(coming)]() mutable {
    caf::anon_send<Priority>(me, std::move(message));
    coming.done();  // after: the message is in the mailbox, its handling posted
  });
  return true;
}

}  // namespace troupe
