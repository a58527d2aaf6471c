// device_actor.hpp: the base of every actor placed on a device: the protocol, once.
//
// Every troupe actor speaks the same protocol around its math: it receives its wires in a
// wiring_msg before the run, reports an exception in a handler to the trainer, answers the
// watchdog's status question, quits on finish, puts a message aside until its tensors
// from another device are written (Note [no blocking waits] in include/troupe/inputs.hpp), and
// traces what it sends, handles and submits. This class owns all of that, so a derived
// actor is its math and its wiring (like OneFlow's actor base):
//
//     class doubler final : public troupe::device_actor {
//      public:
//       doubler(caf::actor_config& c, std::string name, troupe::device* on)
//           : device_actor(c, std::move(name), on) {}
//      protected:
//       caf::message_handler handlers() override {
//         return {[this](troupe::weight_grads_msg& m) {
//           if (deferred_until_ready(m, m.grads)) return;   // back when written
//           auto span = handling_span(m);
//           ... submit the math with job_for_step("double", m.step, m.replica) ...
//           stamp_send(m, sink_track_, "grads", troupe::bytes_of(m.grads));
//           send(sink_, std::move(m));
//         }};
//       }
//       void connect(const troupe::wiring_msg& w) override {   // its neighbours only
//         auto out = single_end(w.out("grads"), "grads wire out");
//         sink_ = out.peer;
//         sink_track_ = out.peer_track;
//       }
//       void release_peers() override { sink_ = nullptr; }
//       caf::actor sink_;
//       std::uint32_t sink_track_ = 0;
//     };
//
// Not here: credits (actors/base/credit_outbox.hpp, a member of the actors that send
// activations), the placement on a device thread (the session does it,
// actors/base/device_scheduler.hpp), and anything about a particular message but the common
// tracing fields. An actor that is not on a device (the data loader runs on the host)
// passes no device and may not use the readiness helpers.
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "troupe/detail/posting.hpp"
#include "troupe/device.hpp"
#include "troupe/inputs.hpp"
#include "troupe/messages.hpp"
#include "troupe/traced.hpp"

namespace troupe {

/// A job's label for the trace: one micro-batch's pass (forward, backward, loss, load).
inline job_label micro_batch_job(const char* name, std::uint32_t track, const micro_tag& tag,
                                 std::int64_t bytes = 0) {
  job_label label;
  label.name = name;
  label.actor = track;
  label.step = tag.step;
  label.microbatch = tag.microbatch;
  label.replica = tag.replica;
  label.phase = static_cast<std::uint8_t>(tag.stage);
  label.bytes = bytes;
  return label;
}

/// A job's label for the trace: work on a whole step (an update, a reduction); step -1
/// when it belongs to no step, replica -1 when to no replica. Always the train phase.
inline job_label step_job(const char* name, std::uint32_t track, std::int64_t step,
                          std::int32_t replica = -1) {
  job_label label;
  label.name = name;
  label.actor = track;
  label.step = step;
  label.microbatch = -1;
  label.replica = replica;
  return label;
}

/// The tensors a message carries, for send_written (none for a message without any).
inline std::vector<tensor*> tensors_sent(activation_msg& m) { return {&m.x}; }
inline std::vector<tensor*> tensors_sent(gradient_msg& m) { return {&m.dx}; }
inline std::vector<tensor*> tensors_sent(labels_msg& m) { return {&m.labels}; }
inline std::vector<tensor*> tensors_sent(weight_grads_msg& m) {
  std::vector<tensor*> out;
  for (auto& g : m.grads)
    out.push_back(&g);
  return out;
}
inline std::vector<tensor*> tensors_sent(params_msg& m) {
  std::vector<tensor*> out;
  for (auto& p : m.params)
    out.push_back(&p);
  return out;
}
template <class Message>
std::vector<tensor*> tensors_sent(Message&) {
  return {};
}

class device_actor : public caf::event_based_actor {
 public:
  /// `name` is the actor's [[actor]] name (failures and status name it); `on` the device
  /// whose stream runs its jobs (it outlives the actor), or nullptr for a host actor.
  device_actor(caf::actor_config& config, std::string name, device* on);

  /// The protocol's handlers after the derived actor's own (final: derive handlers()).
  caf::behavior make_behavior() final;

  /// The actor's name, for CAF's diagnostics too.
  const char* name() const override { return name_.c_str(); }

  /// True if it takes credits (release_msg) left in shared memory by another process,
  /// which come without a sender: only the data loader, which counts them by replica. A
  /// layer finds a credit's wire by its sender, so one left for it there is refused
  /// (Note [messages through shared memory]). Of the class, not of the actor's state: the
  /// thread that delivers may ask it.
  virtual bool takes_posted_releases() const { return false; }

 protected:
  // ---- what a derived actor provides ----

  /// Its own handlers: the messages it computes with.
  virtual caf::message_handler handlers() = 0;
  /// Takes its neighbours from the wiring. The trainer and the trace track are kept
  /// already (trainer(), track()), so an actor without neighbours needs nothing here.
  virtual void connect(const wiring_msg& wiring);
  /// Lets go of the handles it holds to other actors; called when it exits, so that
  /// actors holding each other (a ring) do not keep each other alive.
  virtual void release_peers();
  /// For the status line "name (role on device)": what it is, e.g. the layer's type.
  virtual std::string role() const;
  /// Appended to that line: what it waits for, e.g. "; 2 forward(s) waiting for ...".
  virtual std::string waiting_for() const;
  /// The whole answer to the watchdog's status question (the line above by default).
  virtual std::string status() const;

  // ---- what the base gives it ----

  const std::string& actor_name() const { return name_; }
  /// Its device (TROUPE_CHECKed: a host actor has none).
  device& on() const;
  bool on_device() const { return on_ != nullptr; }
  /// The trainer (empty before the wiring): failures and loss reports go there.
  const trainer_handle& trainer() const { return trainer_; }
  /// Its trace track (0 when not tracing).
  std::uint32_t track() const { return track_; }
  /// The one end among `ends` (e.g. wiring.out("grads")); TROUPE_CHECK fails, naming this
  /// actor and `what` ("grads wire out"), unless there is exactly one.
  wire_end single_end(const std::vector<wire_end>& ends, const char* what) const;

  /// Readiness: if one of `inputs` comes from another device and is not written yet, the
  /// message is put aside (moved from) and comes back to this actor once it is; returns
  /// true, and the handler returns at once. False: every input may be used now.
  template <caf::message_priority Priority = caf::message_priority::normal, class Message>
  bool deferred_until_ready(Message& message, std::initializer_list<const tensor*> inputs) {
    return come_back_when_ready<Priority>(this, pending_input(on().id(), inputs), message);
  }
  template <caf::message_priority Priority = caf::message_priority::normal, class Message>
  bool deferred_until_ready(Message& message, const std::vector<tensor>& inputs) {
    return come_back_when_ready<Priority>(this, pending_input(on().id(), inputs), message);
  }

  /// The handler of a grads wire: once the gradients of a weight_grads_msg are ready on
  /// this device, `handle(message)` runs inside the message's handling span.
  template <class Handle>
  auto grads_handler(Handle handle) {
    return [this, handle](weight_grads_msg& message) {
      if (deferred_until_ready(message, message.grads))
        return;
      auto span = handling_span(message);
      handle(message);
    };
  }

  /// Tracing: the span of handling a message tagged `tag` (ended by its destructor).
  trace::handler_span handling_span(const char* name, const trace_stamp& stamp,
                                    const micro_tag& tag, std::int64_t bytes) const {
    return handling(track_, name, stamp, tag, bytes);
  }
  /// ... of handling a message about a whole step (tagged with step and replica only).
  trace::handler_span handling_span(const char* name, const trace_stamp& stamp, std::int64_t step,
                                    std::int32_t replica, std::int64_t bytes) const {
    micro_tag tag;
    tag.step = step;
    tag.replica = replica;
    return handling(track_, name, stamp, tag, bytes);
  }
  /// ... of handling a layer's weight gradients ("grads", step and replica of the message).
  trace::handler_span handling_span(const weight_grads_msg& message) const {
    return handling(track_, message);
  }
  // (Public: credit_outbox sends for the actor that owns it.)
 public:
  /// Sends `message` to `peer`: at once to an actor of this process; to one on another
  /// node once every tensor it carries is written, keeping the order of what this actor
  /// sends to other nodes (Note [nothing unwritten to the network] in device_actor.cpp).
  template <caf::message_priority Priority = caf::message_priority::normal, class Message>
  void send_written(const caf::actor& peer, Message message) {
    if (!on_another_node(peer)) {
      this->template send<Priority>(peer, std::move(message));
      return;
    }
    std::vector<event> unwritten;
    std::int64_t bytes = 0;
    for (const tensor* t : tensors_sent(message))
      if (t->defined()) {
        bytes += static_cast<std::int64_t>(t->bytes());
        if (!t->ready().reached())
          unwritten.push_back(t->ready());
      }
    const auto link = emulated_link_to(peer);
    if (unwritten.empty() && held_for_network_.empty() && link.empty()) {
      send_to_node<Priority>(peer, message, bytes);
      return;
    }
    held_for_network_.push_back({std::move(unwritten),
                                 [this, peer, bytes, m = std::move(message)]() mutable {
                                   send_to_node<Priority>(peer, m, bytes);
                                 },
                                 link, bytes});
    send_to_network();
  }

 protected:
  /// Stamps `message` as sent by this actor to the actor on `receiver_track`.
  template <class Message>
  void stamp_send(Message& message, std::uint32_t receiver_track, const char* name,
                  std::int64_t bytes) const {
    stamp(message, track_, receiver_track, name, bytes);
  }
  /// Records a counter on this actor's track (credits towards `peer`, micro-batches held).
  void record_counter(const char* name, std::uint32_t peer, std::int64_t value) const {
    trace_counter(name, track_, peer, value);
  }
  /// Labels of the jobs it submits (see micro_batch_job and step_job above).
  job_label job_for(const char* name, const micro_tag& tag, std::int64_t bytes = 0) const {
    auto label = micro_batch_job(name, track_, tag, bytes);
    label.source = source_;
    return label;
  }
  job_label job_for_step(const char* name, std::int64_t step, std::int32_t replica = -1) const {
    auto label = step_job(name, track_, step, replica);
    label.source = source_;
    return label;
  }
  /// The same for troupe's own kinds of job (job_kind_name).
  job_label job_for(job_kind kind, const micro_tag& tag, std::int64_t bytes = 0) const {
    return job_for(job_kind_name(kind), tag, bytes);
  }
  job_label job_for_step(job_kind kind, std::int64_t step, std::int32_t replica = -1) const {
    return job_for_step(job_kind_name(kind), step, replica);
  }

 private:
  std::string name_;
  device* on_;
  trainer_handle trainer_;
  std::uint32_t track_ = 0;
  std::uint32_t source_;  // job_label::source, unique in the process

  /// Whether `peer` is an actor of another node: of another process, or placed on another
  /// node's device in a simulated run (all of whose nodes are in one process).
  bool on_another_node(const caf::actor& peer) const {
    return peer && (peer->node() != node() || std::find(other_nodes_.begin(), other_nodes_.end(),
                                                        peer) != other_nodes_.end());
  }
  std::vector<caf::actor> other_nodes_;  // its wires' peers on other nodes' devices
  /// Sends `message`, whose tensors are written, to `peer` on another node: left in its
  /// shared-memory queue when its kind may be, else through CAF (its tensors staged).
  template <caf::message_priority Priority, class Message>
  void send_to_node(const caf::actor& peer, Message& message, std::int64_t bytes) {
    constexpr bool posted = detail::posted_kind<Message>::value != 0;
    const node_send_scope sending{posted ? node_send::posted : node_send::through_caf};
    if (on_ != nullptr)
      on_->work().sent_to_network(bytes, posted);
    stage_for(peer, tensors_sent(message));
    if constexpr (posted)
      if (detail::post_message(peer, message, track_))
        return;
    this->template send<Priority>(peer, std::move(message));
  }
  /// Puts the written `tensors` of a message to `peer`, an actor of another process on
  /// this machine, into that node's shared-memory inbox, each replaced by a tensor over
  /// its slot (Note [tensors through shared memory] in runtime/net/shared_memory.cpp); the
  /// first time, asks `peer` for the inbox. Leaves them as they are when there is none.
  void stage_for(const caf::actor& peer, const std::vector<tensor*>& tensors);
  /// Sends the messages held for other nodes whose tensors are written, in order, and
  /// asks to be called again when the first one left is.
  void send_to_network();
  /// The node `peer` is on when the run emulates a link to it (Note [an emulated link] in
  /// runtime/net/link_model.cpp), else empty.
  std::string emulated_link_to(const caf::actor& peer) const;
  struct held_send {
    std::vector<event> unwritten;
    std::function<void()> send;
    std::string link;          // emulated_link_to the peer
    std::int64_t bytes = 0;    // its tensors'
    std::int64_t due_ns = -1;  // with a link: when the link delivers it (steady clock)
  };
  std::deque<held_send> held_for_network_;
  bool network_flush_asked_ = false;  // a remote_flush_atom is on its way
  bool link_wait_armed_ = false;      // a delayed remote_flush_atom is on its way
};

}  // namespace troupe
