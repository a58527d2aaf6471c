// shm_delivery.cpp: messages and tensors through the shared memory of one machine's
// processes (see the header): what a device actor posts and stages there, checked and
// taken on the other side, and the delivery that hands each posted message to its actor.
//
// Not here: the queues and inboxes (runtime/net/shared_memory.cpp), the actor's side of a
// link (device_actor::stage_for, the offer and poll handlers in actors/base/device_actor.cpp).
#include "actors/base/collective_messages.hpp"
#include "actors/base/network_atoms.hpp"
#include "actors/transport/shm_delivery.hpp"

#include <algorithm>
#include <atomic>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <cstdio>
#include <optional>
#include <type_traits>

#include "actors/base/batch_rows.hpp"
#include "runtime/net/shared_memory.hpp"
#include "troupe/check.hpp"
#include "troupe/device_actor.hpp"

namespace troupe {

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

// The two ends of a staged tensor's crossing (include/troupe/detail/tensor_inspect.hpp).

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
    case detail::posted_kind<ring_msg>::value:
      return load_posted_as<ring_msg>(system, source, "a ring message");
    case detail::posted_kind<labels_msg>::value:
      return load_posted_as<labels_msg>(system, source, "labels");
    case detail::posted_kind<release_msg>::value:
      return load_posted_as<release_msg>(system, source, "a release");
    case detail::posted_kind<loss_report_msg>::value:
      return load_posted_as<loss_report_msg>(system, source, "a loss report");
    case detail::posted_kind<batch_rows_msg>::value:
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
