// device_actor.cpp: the protocol every device-placed actor shares (see the header).
#include "troupe/device_actor.hpp"

#include <algorithm>
#include <atomic>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <cstdio>
#include <optional>
#include <type_traits>

#include "actors/batch_assembler_actor.hpp"
#include "actors/failures.hpp"
#include "actors/shm_delivery.hpp"
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
  // this actor; the actor then exits with that error (actors/failures.hpp).
  set_exception_handler([this](std::exception_ptr& error) -> caf::error {
    auto what = describe_exception(error);
    if (trainer_)
      send(trainer_, failure_msg{name_, what});
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

namespace detail {

bool may_post(const caf::actor& peer) {
  // A simulated run's nodes share a process: its peers are all this system's.
  return net::shm_links::current() != nullptr && peer && peer->node() != peer->home_system().node();
}

bool post_bytes(const caf::actor& peer, const std::vector<char>& bytes, std::uint32_t track) {
  auto* links = net::shm_links::current();
  if (links == nullptr || !may_post(peer))
    return false;
  const auto posted = links->post(to_string(peer->node()), peer->id(), bytes.data(), bytes.size());
  if (posted == net::shm_links::posted::no)
    return false;
  if (posted == net::shm_links::posted::wake)
    caf::anon_send(peer, shm_poll_atom::value);  // no thread of that node polls now
  if (trace::enabled())
    trace_counter("shared memory messages", track, 0, links->count_posted(track));
  return true;
}

// The two ends of a staged tensor's crossing (include/troupe/tensor_inspect.hpp).

bool staged_place(const void* data, std::size_t bytes, std::uint64_t& key, std::uint64_t& offset) {
  auto* links = net::shm_links::current();
  if (links == nullptr || bytes < net::shm_links::min_bytes)
    return false;
  auto place = links->place_of(data, bytes);
  if (!place)
    return false;
  key = place->key;
  offset = place->offset;
  return true;
}

// A staged tensor refused is a message CAF drops without a word (it logs, and troupe runs
// without CAF's log), which the run would then wait for: the first few say so on stderr.
using net::said_refused;

caf::error refused_tensor(std::string why) {
  static std::atomic<int> said{0};
  if (said.fetch_add(1, std::memory_order_relaxed) < 3)
    std::fprintf(stderr, "troupe: refused a message from another process: %s\n", why.c_str());
  return caf::make_error(caf::sec::invalid_argument, std::move(why));
}

namespace {
// The staged bytes loaded on this thread within the outermost staged_message_scope;
// unset outside one.
thread_local std::optional<std::uint64_t> staged_in_message;
}  // namespace

staged_message_scope::staged_message_scope() : outermost_(!staged_in_message) {
  if (outermost_)
    staged_in_message = 0;
}

staged_message_scope::~staged_message_scope() {
  if (outermost_)
    staged_in_message.reset();
}

std::string check_staged(std::uint64_t key, std::uint64_t offset, std::uint64_t bytes) {
  auto* links = net::shm_links::current();
  if (links == nullptr)
    return said_refused("a tensor in shared memory, but this process has no shared-memory links");
  if (auto why = links->check(net::shm_place{key, offset}, bytes); !why.empty())
    return said_refused(why);
  if (staged_in_message) {
    if (bytes > links->capacity() - std::min(*staged_in_message, links->capacity()))
      return said_refused(
          "the tensors of one message claim more than " + std::to_string(links->capacity()) +
          " bytes of shared memory, its inbox's size (" + std::to_string(*staged_in_message) +
          " before one of " + std::to_string(bytes) + ")");
    *staged_in_message += bytes;
  }
  return {};
}

std::string take_staged(std::uint64_t key, std::uint64_t offset, std::uint64_t bytes, void* to) {
  auto* links = net::shm_links::current();
  if (links == nullptr)
    return said_refused("a tensor in shared memory, but this process has no shared-memory links");
  return said_refused(links->take(net::shm_place{key, offset}, bytes, to));
}

}  // namespace detail

namespace {

// The streams' poller of a process with shared-memory links, set for its lifetime.
class shared_memory_poller final : public stream_poller {
 public:
  explicit shared_memory_poller(net::shm_links& links) : links_(links) { set_stream_poller(this); }
  ~shared_memory_poller() override {
    links_.set_delivery(nullptr);  // writers stop leaving messages first
    set_stream_poller(nullptr);
  }
  shared_memory_poller(const shared_memory_poller&) = delete;
  shared_memory_poller& operator=(const shared_memory_poller&) = delete;
  void poll() override { links_.poll(); }
  bool before_sleep() override { return links_.before_sleep(); }
  void after_wake() override { links_.after_wake(); }

 private:
  net::shm_links& links_;
};

// A message of type Message, whole: nothing after it.
template <class Message>
std::optional<caf::message> load_posted_as(caf::actor_system& system,
                                           caf::binary_deserializer& source, const char* what) {
  Message message;
  if (auto error = source(message)) {
    detail::said_refused(std::string{what} + " that does not load: " + system.render(error));
    return std::nullopt;
  }
  if (source.remaining() != 0) {
    detail::said_refused(std::string{what} + " with " + std::to_string(source.remaining()) +
                         " bytes after it");
    return std::nullopt;
  }
  if constexpr (std::is_same<Message, batch_rows_msg>::value)
    if (!message.first_layer) {  // an actor id this node has not, or another node's
      detail::said_refused("the rows of a batch for a first layer this node has not");
      return std::nullopt;
    }
  return caf::make_message(std::move(message));
}

}  // namespace

std::optional<caf::message> load_posted(caf::actor_system& system, const char* data,
                                        std::size_t bytes) {
  caf::binary_deserializer source{system, data, bytes};
  std::uint8_t kind = 0;
  if (source(kind)) {
    detail::said_refused("an empty message");
    return std::nullopt;
  }
  switch (kind) {
    case posted_kind<ring_msg>::value:
      return load_posted_as<ring_msg>(system, source, "a ring message");
    case posted_kind<labels_msg>::value:
      return load_posted_as<labels_msg>(system, source, "labels");
    case posted_kind<release_msg>::value:
      return load_posted_as<release_msg>(system, source, "a release");
    case posted_kind<loss_report_msg>::value:
      return load_posted_as<loss_report_msg>(system, source, "a loss report");
    case posted_kind<batch_rows_msg>::value:
      return load_posted_as<batch_rows_msg>(system, source, "the rows of a batch");
    default:
      detail::said_refused("a message of unknown kind " + std::to_string(kind));
      return std::nullopt;
  }
}

std::unique_ptr<stream_poller> deliver_shared_memory(caf::actor_system& system,
                                                     net::shm_links& links) {
  links.set_delivery([&system](std::uint64_t dest, const char* data, std::size_t bytes) {
    // Only the kinds of posted_kind are left there, each loaded as its type alone: no type
    // names, no nesting (CAF's generic loading has holes: docs/guide/nodes.md), tensors checked.
    auto message = load_posted(system, data, bytes);
    if (!message)
      return;
    auto to = system.registry().get(static_cast<caf::actor_id>(dest));
    if (!to) {  // gone (the run ends), or never here
      detail::said_refused("a message for actor " + std::to_string(dest) +
                           ", which this node has not");
      return;
    }
    // A credit goes ahead of other work, as through CAF (layer_actor's send_release), and
    // only to an actor that takes credits without a sender.
    const bool credit = message->match_element<release_msg>(0);
    if (credit) {
      auto* receiver = dynamic_cast<device_actor*>(caf::actor_cast<caf::abstract_actor*>(to));
      if (receiver == nullptr || !receiver->takes_posted_releases()) {
        detail::said_refused("a credit for actor " + std::to_string(dest) +
                             ", which takes none from shared memory");
        return;
      }
    }
    const auto priority = credit ? caf::message_priority::high : caf::message_priority::normal;
    to->enqueue(
        caf::make_mailbox_element(nullptr, caf::make_message_id(priority), {}, std::move(*message)),
        nullptr);
  });
  return std::make_unique<shared_memory_poller>(links);
}

}  // namespace troupe
