// credit_outbox.hpp: the sending end of an activations wire with a capacity in credits.
//
// Note [credits]
// A sender may have at most `capacity` unreleased micro-batches on a wire; the receiver
// releases one by sending its gradient back (training) or a release_msg (forward-only,
// or a first layer that has no dx to send). Messages beyond the capacity wait here, in
// order. Credits bound memory (a receiver can never be flooded) and choose the pipeline
// schedule: capacity M on every stage with a flushing loss is GPipe; capacity P - s into
// stage s with gradients sent at high priority is 1F1B (DESIGN.md "Flow control").
// Capacity 0 means unbounded. The message is an activation_msg but for a data loader's
// wire to another node, where it is the rows the batch is made of (batch_rows_msg).
#pragma once

#include <caf/all.hpp>

#include <deque>
#include <type_traits>

#include "troupe/device_actor.hpp"
#include "troupe/error.hpp"
#include "troupe/messages.hpp"

namespace troupe {

template <class Message>
class basic_credit_outbox {
 public:
  void connect(const wire_end& end) {
    peer_ = end.peer;
    capacity_ = end.capacity;
  }

  bool connected() const { return static_cast<bool>(peer_); }
  const caf::actor& peer() const { return peer_; }
  std::int64_t in_flight() const { return in_flight_; }
  std::int64_t capacity() const { return capacity_; }
  std::size_t waiting() const { return waiting_.size(); }

  /// Sends now if a credit is free, else queues.
  template <class Self>
  void send(Self* self, Message message) {
    if (capacity_ == 0 || in_flight_ < capacity_) {
      ++in_flight_;
      send_now(self, std::move(message));
    } else {
      waiting_.push_back(std::move(message));
    }
  }

  /// One credit came back; sends the oldest waiting message if any.
  template <class Self>
  void release(Self* self) {
    TROUPE_CHECK(in_flight_ > 0, "a credit came back on a wire with none in flight");
    --in_flight_;
    if (!waiting_.empty()) {
      ++in_flight_;
      send_now(self, std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }

 private:
  // A device actor holds a message for another node until its tensors are written (Note
  // [nothing unwritten to the network] in actors/base/device_actor.cpp).
  template <class Self>
  void send_now(Self* self, Message message) {
    if constexpr (std::is_base_of_v<device_actor, Self>)
      self->send_written(peer_, std::move(message));
    else
      self->send(peer_, std::move(message));
  }

  caf::actor peer_;
  std::int64_t capacity_ = 0;
  std::int64_t in_flight_ = 0;
  std::deque<Message> waiting_;
};

using credit_outbox = basic_credit_outbox<activation_msg>;

}  // namespace troupe
