// traced.hpp: how actors stamp the messages they send and record what they handle.
//
// Sends: stamp() gives a message its flow id and the sender's track and records the
// send (the start of a flow arrow). Handling: a trace::handler_span around the handler.
// Both cost one relaxed atomic load when neither tracing nor --log-messages is on.
#pragma once

#include <vector>

#include "troupe/messages.hpp"
#include "troupe/trace.hpp"

namespace troupe {

inline std::int64_t bytes_of(const tensor& t) {
  return t.defined() ? static_cast<std::int64_t>(t.bytes()) : 0;
}

inline std::int64_t bytes_of(const std::vector<tensor>& ts) {
  std::int64_t total = 0;
  for (const auto& t : ts)
    total += bytes_of(t);
  return total;
}

/// Stamps `message` as sent by `track` and records the send; `receiver` may be 0.
template <class Message>
void stamp(Message& message, std::uint32_t track, std::uint32_t receiver, const char* name,
           std::int64_t bytes) {
  if (!trace::observing())
    return;
  message.trace.from = track;
  if (!trace::enabled())
    return;
  message.trace.flow = trace::next_flow();
  trace::event e;
  e.type = trace::event_type::send;
  e.start_ns = trace::now_ns();
  e.track = track;
  e.peer = receiver;
  e.flow = message.trace.flow;
  e.name = name;
  e.bytes = bytes;
  trace::record(e);
}

/// The span of handling a tagged message.
inline trace::handler_span handling(std::uint32_t track, const char* name, const trace_stamp& stamp,
                                    const micro_tag& tag, std::int64_t bytes) {
  return trace::handler_span{
      track,    name,           stamp.from,  stamp.flow,
      tag.step, tag.microbatch, tag.replica, static_cast<std::uint8_t>(tag.stage),
      bytes};
}

/// The span of handling a layer's gradients (step and replica from the message).
inline trace::handler_span handling(std::uint32_t track, const weight_grads_msg& message) {
  micro_tag tag;
  tag.step = message.step;
  tag.replica = message.replica;
  return handling(track, "grads", message.trace, tag, bytes_of(message.grads));
}

/// Records a counter (credits on a wire, micro-batches held) when tracing.
inline void trace_counter(const char* name, std::uint32_t track, std::uint32_t peer,
                          std::int64_t value) {
  if (!trace::enabled())
    return;
  trace::event e;
  e.type = trace::event_type::counter;
  e.start_ns = trace::now_ns();
  e.track = track;
  e.peer = peer;
  e.name = name;
  e.value = value;
  trace::record(e);
}

}  // namespace troupe
