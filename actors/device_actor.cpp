// device_actor.cpp: the protocol every device-placed actor shares (see the header).
#include "troupe/device_actor.hpp"

#include <atomic>

#include "actors/failures.hpp"
#include "troupe/check.hpp"

namespace troupe {

namespace {
std::atomic<std::uint32_t> sources{0};
}  // namespace

device_actor::device_actor(caf::actor_config& config, std::string name, device* on)
    : caf::event_based_actor(config),
      name_(std::move(name)),
      on_(on),
      source_(sources.fetch_add(1, std::memory_order_relaxed) + 1) {}

caf::behavior device_actor::make_behavior() {
  // An exception in any handler (or in connect) ends the run through the trainer, naming
  // this actor; the actor then exits with that error (actors/failures.hpp).
  set_exception_handler([this](std::exception_ptr& error) -> caf::error {
    auto what = describe_exception(error);
    if (trainer_)
      send(trainer_, failure_msg{name_, what});
    return caf::make_error(caf::sec::runtime_error, what);
  });
  attach_functor([this] {
    trainer_ = nullptr;
    other_nodes_.clear();
    held_for_network_.clear();
    release_peers();
  });
  return caf::behavior{handlers().or_else(
      [this](const wiring_msg& wiring) {
        // The trainer takes failures and loss reports, whatever else it handles: the
        // typed handle says so at every send (Note [typed handles] in messages.hpp).
        trainer_ = caf::actor_cast<trainer_handle>(wiring.trainer);
        track_ = wiring.track;
        const int here = on_ != nullptr ? on_->id().node : this_node();
        for (const auto* ends : {&wiring.outgoing, &wiring.incoming})
          for (const auto& end : *ends) {
            device_id peer;
            if (device_id::parse(end.peer_device, peer) && peer.node != here && end.peer)
              other_nodes_.push_back(end.peer);
          }
        connect(wiring);
      },
      [this](status_atom) { return status(); }, [this](finish_atom) { quit(); },
      [this](remote_flush_atom) {
        network_flush_asked_ = false;
        send_to_network();
      })};
}

// Note [nothing unwritten to the network]
// A message to an actor of another node is serialised by CAF's network thread of this
// process (the BASP broker on the multiplexer), and serialising a tensor waits until it
// is written (include/troupe/tensor_inspect.hpp). Sent as soon as its job was submitted,
// an activation made the network thread wait for that job: 3783 of 4000 tensors a run
// of config/fashion_mlp_pp2_2nodes.toml's first node sent, 657 ms of its 2.8 s, during
// which that one thread (middleman.workers = 0) read and wrote nothing else for this
// process. So a message to another node is held here until its tensors are written (the
// producing job's event calls back), and what this actor sends to other nodes keeps its
// order behind it. Messages within the process go at once, as
// before: their receivers wait on the events themselves (Note [no blocking waits]).
void device_actor::send_to_network() {
  while (!held_for_network_.empty()) {
    auto& head = held_for_network_.front();
    auto& waits = head.unwritten;
    while (!waits.empty() && waits.back().reached())
      waits.pop_back();
    if (!waits.empty()) {
      if (!network_flush_asked_) {
        network_flush_asked_ = true;
        waits.back().then([me = caf::actor_cast<caf::actor>(this)] {
          caf::anon_send<caf::message_priority::high>(me, remote_flush_atom::value);
        });
      }
      return;
    }
    auto send = std::move(head.send);
    held_for_network_.pop_front();
    send();
  }
}

void device_actor::connect(const wiring_msg&) {}

void device_actor::release_peers() {}

std::string device_actor::role() const { return {}; }

std::string device_actor::waiting_for() const { return {}; }

std::string device_actor::status() const {
  const auto what = role();
  return name_ + " (" + (what.empty() ? "" : what + " ") + "on " +
         (on_ != nullptr ? on_->id().to_string() : std::string{"the host"}) + ")" + waiting_for();
}

wire_end device_actor::single_end(const std::vector<wire_end>& ends, const char* what) const {
  TROUPE_CHECK(ends.size() == 1, name_ << " needs one " << what << ", has " << ends.size());
  return ends.front();
}

device& device_actor::on() const {
  TROUPE_CHECK(on_ != nullptr, name_ << " runs on the host and has no device");
  return *on_;
}

}  // namespace troupe
