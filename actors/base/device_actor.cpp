// device_actor.cpp: the protocol every device-placed actor shares (see the header).
#include "troupe/device_actor.hpp"

#include <algorithm>
#include <atomic>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <type_traits>

#include "actors/base/failures.hpp"
#include "actors/base/network_atoms.hpp"
#include "runtime/net/link_model.hpp"
#include "runtime/net/shared_memory.hpp"
#include "troupe/check.hpp"

namespace troupe {

namespace {
std::atomic<std::uint32_t> sources{0};
}  // namespace

device_actor::device_actor(caf::actor_config& config, std::string name, device* on)
    : caf::event_based_actor(config),
      name_(std::move(name)),
      on_(on),
      source_(sources.fetch_add(1, std::memory_order_relaxed) + 1) {
  // Found by its id by what other processes of this machine leave in shared memory (Note
  // [messages through shared memory]), from its first moment: a peer may post to it
  // before it is wired.
  if (net::shm_links::current() != nullptr)
    system().registry().put(id(), ctrl());
}

caf::behavior device_actor::make_behavior() {
  // An exception in any handler (or in connect) ends the run through the trainer, naming
  // this actor; the actor then exits with that error (actors/base/failures.hpp).
  set_exception_handler([this](std::exception_ptr& error) -> caf::error {
    auto failure = failure_of(name_, error);
    auto what = failure.what;
    if (trainer_)
      send(trainer_, std::move(failure));
    return caf::make_error(caf::sec::runtime_error, what);
  });
  attach_functor([this, &registry = system().registry(), me = id()] {
    registry.erase(me);
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
        link_wait_armed_ = false;
        send_to_network();
      },
      [](shm_poll_atom) {
        if (auto* links = net::shm_links::current())
          links->poll(false);
      },
      [this](shm_offer_atom)
          -> caf::result<std::string, std::int32_t, std::int32_t, std::uint64_t, std::uint64_t> {
        auto* links = net::shm_links::current();
        const auto& sender = current_sender();
        if (links == nullptr || !sender || sender->node() == node())
          return caf::make_error(caf::sec::runtime_error, "no shared memory between these nodes");
        // Any node that asks: the one sending may not be the one this actor's wire names
        // (a relay). A peer that asks under invented node names takes the inboxes (at
        // most nodes - 1) and the real writers send over TCP; without tls it could forge
        // worse (docs/guide/nodes.md, "Security"), with it it cannot connect.
        auto offer = links->offer(to_string(sender->node()));
        if (const auto* why = std::get_if<std::string>(&offer))
          return caf::make_error(caf::sec::runtime_error, *why);
        const auto& o = std::get<net::shm_offer>(offer);
        return {o.boot_id, o.pid, o.fd, o.key, o.capacity};
      })};
}

namespace {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Note [nothing unwritten to the network]
// A message to an actor of another node is serialised by CAF's network thread of this
// process (the BASP broker on the multiplexer), and serialising a tensor waits until it
// is written (include/troupe/detail/tensor_inspect.hpp). Sent as soon as its job was submitted,
// an activation made the network thread wait for that job: 3783 of 4000 tensors a run
// of config/fashion_mlp_pp2_2nodes.toml's first node sent, 657 ms of its 2.8 s, during
// which that one thread (middleman.workers = 0) read and wrote nothing else for this
// process. So a message to another node is held here until its tensors are written (the
// producing job's event calls back), and what this actor sends to other nodes keeps its
// order behind it. Messages within the process go at once, as
// before: their receivers wait on the events themselves (Note [no blocking waits]). With
// an emulated link a written message also waits here until the link would deliver it.
void device_actor::send_to_network() {
  // Note [an emulated link] in runtime/net/link_model.cpp: a message is handed to the link
  // once it and every message before it are written, whether or not those have arrived
  // yet: their latencies overlap, only their bytes queue.
  for (auto& held : held_for_network_) {
    auto& waits = held.unwritten;
    while (!waits.empty() && waits.back().reached())
      waits.pop_back();
    if (!waits.empty())
      break;
    if (!held.link.empty() && held.due_ns < 0)
      held.due_ns = net::emulated_arrival_ns(held.link, held.bytes, steady_now_ns());
  }
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
    if (!head.link.empty()) {
      const auto now = steady_now_ns();
      if (head.due_ns < 0)  // written since the pass above
        head.due_ns = net::emulated_arrival_ns(head.link, head.bytes, now);
      if (now < head.due_ns) {
        if (!link_wait_armed_) {
          link_wait_armed_ = true;
          delayed_send(this, std::chrono::nanoseconds(head.due_ns - now), remote_flush_atom::value);
        }
        return;
      }
    }
    auto send = std::move(head.send);
    held_for_network_.pop_front();
    send();
  }
}

std::string device_actor::emulated_link_to(const caf::actor& peer) const {
  return net::link_emulated() ? to_string(peer->node()) : std::string{};
}

void device_actor::stage_for(const caf::actor& peer, const std::vector<tensor*>& tensors) {
  auto* links = net::shm_links::current();
  if (links == nullptr || peer->node() == node())  // a simulated run's nodes share a process
    return;
  auto to = to_string(peer->node());
  switch (links->claim(to)) {
    case net::shm_links::link::unknown:
      // What goes before the answer crosses inline, in order with what follows.
      request(peer, caf::infinite, shm_offer_atom::value)
          .then(
              [to](const std::string& boot_id, std::int32_t pid, std::int32_t fd, std::uint64_t key,
                   std::uint64_t capacity) {
                auto* links = net::shm_links::current();
                if (links == nullptr)
                  return;
                auto why = links->connect(to, net::shm_offer{boot_id, pid, fd, key, capacity});
                // Refused on one machine is worth a word: it costs every step its copies.
                if (!why.empty() && boot_id == net::boot_id())
                  std::fprintf(stderr,
                               "note: tensors to another node of this machine cross over TCP, "
                               "not shared memory: %s\n",
                               why.c_str());
              },
              [to, name = actor_name()](const caf::error& error) {
                auto* links = net::shm_links::current();
                if (links == nullptr)
                  return;
                links->refuse(to);
                std::fprintf(stderr,
                             "note: tensors from %s to another node cross over TCP, not shared "
                             "memory: that node offers none (%s)\n",
                             name.c_str(), to_string(error).c_str());
              });
      return;
    case net::shm_links::link::asked:
    case net::shm_links::link::refused:
      return;
    case net::shm_links::link::ready:
      break;
  }
  std::int64_t bytes = 0;
  for (auto* t : tensors) {
    if (!t->defined() || t->bytes() < net::shm_links::min_bytes ||
        t->device().type != device_type::cpu)
      continue;
    auto staged = links->stage(to, t->raw(), t->bytes());
    if (!staged) {  // the inbox is full for now (or too small): this one crosses inline
      if (trace::enabled())
        trace_counter("shared memory full", track_, 0, links->count_inline(track_));
      continue;
    }
    bytes += static_cast<std::int64_t>(t->bytes());
    *t = tensor::borrowing(staged->data, t->shape(), t->type(), t->device(),
                           std::move(staged->owner));
  }
  if (bytes > 0 && trace::enabled())
    trace_counter("shared memory", track_, 0, links->count_staged(track_, bytes));
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
