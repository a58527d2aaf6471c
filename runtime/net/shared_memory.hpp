// shared_memory.hpp: tensors between two nodes of one machine through shared memory
// instead of through CAF's TCP link (Note [tensors through shared memory] in the .cpp).
//
// A node that receives from another node of its machine makes an inbox for it: an
// anonymous memory file (memfd) it maps, whose descriptor the writer opens through
// /proc/<pid>/fd once it has asked for it (shm_offer). The writer copies a tensor's bytes
// into a slot of that inbox and sends, over CAF as before, a message whose tensor says
// where the bytes lie (tensor_inspect.hpp); the reader copies them out when it loads the
// message and frees the slot. Some messages are left in the inbox's queue whole instead
// (post, poll: Note [messages through shared memory]), those whose receivers take them in
// any order; the rest still cross CAF's link, in its order.
//
// Not here: when an actor asks for an inbox and which tensors it stages (send_written in
// include/troupe/device_actor.hpp), the wire format (include/troupe/detail/tensor_inspect.hpp),
// the config key ([cluster] shared_memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

namespace troupe::net {

/// What a writer needs to map a reader's inbox: the reader's machine (its boot id), its
/// process and descriptor, and the inbox's key and size.
struct shm_offer {
  std::string boot_id;
  std::int32_t pid = 0;
  std::int32_t fd = -1;
  std::uint64_t key = 0;
  std::uint64_t capacity = 0;  // bytes of slots
};

/// Where a staged tensor's bytes lie: the reader's inbox and the offset in it.
struct shm_place {
  std::uint64_t key = 0;
  std::uint64_t offset = 0;
};

/// This machine's boot id (/proc/sys/kernel/random/boot_id); empty if it cannot be read.
std::string boot_id();

/// Says on stderr why something another process left in shared memory was refused (a
/// queue entry, a message, a staged tensor): the first few times in this process, so that
/// a writer that keeps at it cannot flood the log. Returns `why`; says nothing if empty.
std::string said_refused(std::string why);

class shm_segment;

/// The shared-memory links of this process: its inboxes (one per writing node) and the
/// inboxes of other nodes it writes into. Thread-safe: actors on every device thread
/// stage, and CAF's network thread loads.
class shm_links {
 public:
  /// Tensors smaller than this cross inline; a slot's bookkeeping would cost more.
  static constexpr std::size_t min_bytes = 512;
  /// The bytes of an inbox's slots: reserved (RAM) for each node that writes to this one.
  static constexpr std::uint64_t default_capacity = std::uint64_t{32} << 20;

  /// `capacity`: the bytes of each inbox; `max_inboxes`: how many writers this process
  /// accepts (a writer that asks past it is told no and sends inline).
  explicit shm_links(std::uint64_t capacity = default_capacity, std::size_t max_inboxes = 64);
  ~shm_links();
  shm_links(const shm_links&) = delete;
  shm_links& operator=(const shm_links&) = delete;

  /// The links of this process while a run over several nodes uses them; nullptr else.
  static shm_links* current();
  /// Makes `links` current for its lifetime (the session's, around its actor system).
  class scope {
   public:
    explicit scope(shm_links& links);
    ~scope();
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    shm_links& links_;
  };

  // ---- the reader's side ----

  /// The inbox for tensors from node `from` (any text naming it), made the first time:
  /// what the writer maps; or why there is none (no memfd, no memory, too many writers).
  std::variant<shm_offer, std::string> offer(const std::string& from);
  /// Why `place` is not a written slot of one of this process's inboxes holding exactly
  /// `bytes`; empty if it is (then take() copies it, unless it changed meanwhile). The
  /// loader asks before it allocates.
  std::string check(const shm_place& place, std::uint64_t bytes) const;
  /// The bytes of each of this process's inboxes: what one writer has in flight at most.
  std::uint64_t capacity() const { return capacity_; }
  /// Copies the `bytes` at `place` into `to` and frees the slot; an error text (nothing
  /// copied) unless check() holds.
  std::string take(const shm_place& place, std::uint64_t bytes, void* to);

  // ---- the writer's side ----

  enum class link { unknown, asked, ready, refused };
  /// The link to node `to`; an unknown one becomes asked (the caller asks for an offer).
  link claim(const std::string& to);
  /// Maps the inbox `offer` describes as the link to `to`: empty if it did, else why not
  /// (another machine, a descriptor that is not that inbox or not sealed at its size, an
  /// inbox larger than this process's own capacity, ...); the link is then refused, and
  /// what goes to `to` crosses inline.
  std::string connect(const std::string& to, const shm_offer& offer);
  /// The link to `to` stays inline (its node could not make an offer).
  void refuse(const std::string& to);
  /// A slot of the link to `to` holding a copy of `bytes` bytes at `data`: its memory,
  /// kept mapped while the returned owner lives. None when the link is not ready or its
  /// inbox has no room now (the reader has not taken enough yet): send inline then.
  struct staged {
    void* data = nullptr;
    std::shared_ptr<void> owner;
  };
  std::optional<staged> stage(const std::string& to, const void* data, std::size_t bytes);
  // ---- messages (Note [messages through shared memory]) ----

  /// What hands a message left in an inbox to its actor: the actor's id on this node, the
  /// message's serialised bytes (which the call must copy or deserialise at once). Until
  /// one is set (and after an empty one), writers leave this process no messages.
  using delivery = std::function<void(std::uint64_t, const char*, std::size_t)>;
  void set_delivery(delivery deliver);
  /// Leaves the serialised message `data` for actor `dest` of node `to` in its inbox's
  /// queue: no when it cannot (no link, no room: send it through CAF), yes, or wake when
  /// no thread of that node polls now (send it a wake-up through CAF).
  enum class posted { no, yes, wake };
  posted post(const std::string& to, std::uint64_t dest, const void* data, std::size_t bytes);
  /// Delivers the messages waiting in this process's inboxes (a stream thread between its
  /// jobs, runtime/core/stream_poller.hpp); how many. The first call of a polling thread
  /// counts it as awake (until its before_sleep); a wake-up's handler is not one.
  std::size_t poll(bool polling_thread = true);
  /// A polling thread is about to sleep: false if messages wait (delivered; it stays
  /// awake). After true, writers ask for a wake-up while no thread of this process is awake.
  bool before_sleep();
  /// That thread woke.
  void after_wake();
  /// Where [data, data + bytes) lies if it is a slot that stage() returned.
  std::optional<shm_place> place_of(const void* data, std::size_t bytes) const;
  /// Adds `bytes` to what the actor of trace track `track` staged: its running total, for
  /// the trace's "shared memory" counter.
  std::int64_t count_staged(std::uint32_t track, std::int64_t bytes);
  /// Adds one to the tensors that actor sent inline because the inbox had no room (a slot
  /// its reader never took holds up every later one): its running total, for the trace's
  /// "shared memory full" counter.
  std::int64_t count_inline(std::uint32_t track);
  /// Adds one to the messages that actor left in shared memory (post): its running total,
  /// for the trace's "shared memory messages" counter.
  std::int64_t count_posted(std::uint32_t track);

 private:
  struct outbox;
  void count_awake(int change);
  std::shared_ptr<shm_segment> inbox(std::uint64_t key) const;  // of this process, by key
  bool waiting() const;
  static std::string check(const shm_segment& segment, std::uint64_t offset, std::uint64_t bytes);
  std::uint64_t capacity_;
  std::size_t max_inboxes_;
  std::uint64_t generation_;  // unique among this process's links
  int awake_ = 0;             // polling threads not asleep
  std::shared_ptr<delivery> deliver_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<shm_segment>> inboxes_;  // by writing node
  std::map<std::uint64_t, std::shared_ptr<shm_segment>> by_key_;
  std::map<std::string, std::shared_ptr<outbox>> outboxes_;  // by reading node
  std::map<std::uint32_t, std::int64_t> staged_by_track_;
  std::map<std::uint32_t, std::int64_t> inline_by_track_;
  std::map<std::uint32_t, std::int64_t> posted_by_track_;
};

}  // namespace troupe::net
