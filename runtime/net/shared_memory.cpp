// shared_memory.cpp: inboxes in memory files, slots in a ring (see the header).
#include "runtime/net/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

namespace troupe::net {

// Note [tensors through shared memory]
// Between two processes of one machine, a tensor over CAF's link is copied four times
// (into the BASP buffer, into the kernel, out of it, into the tensor) by threads that
// wait for each other: 1.2-1.5 GB/s (bench/link_bench.cpp), and the 400 KB of the bench
// MLP's largest gradient took 350-550 us each way of the ring, on the critical path of
// every step. Through shared memory it is copied twice (into a slot, out of it), each at
// memory speed, and the message that says where crosses CAF's link as before.
//
// The reader makes the inbox, so a writer learns at once whether it can use it: it asks
// (shm_offer), and maps the inbox only if the offer is of its machine (same boot id), the
// descriptor under /proc/<pid>/fd (opened as a path, checked, then opened through that) is
// a memory file named for the offer's key and sealed at the offered size, and the mapped
// header says that key. Anything else (another machine, another pid namespace, a process
// it may not read) refuses the link, and the tensors cross inline as before: the link is
// an optimisation that never changes what arrives. The memory file has no name in the
// file system, so nothing is left behind when a process dies, whatever kills it; sealed,
// neither side can shrink it under the other's copies.
//
// Measured (bench/nodes.py, DP2 over two processes of two cores, medians of 5 alternating
// runs): 1.13x-1.24x the samples/s over TCP (batch 512 to 128); 0.76x of one process at
// batch 512 where TCP gave 0.68x. What was left was the latency of the messages on CAF's
// path: Note [messages through shared memory].
//
// An inbox is a ring of slots, each a 64-byte header (state, magic, bytes) and the bytes.
// Only the writer allocates (in its order, reclaiming from the oldest slot the reader has
// freed); only the reader frees, in the order it loads, which may differ: a freed slot
// behind one still held waits for it. A full ring is not waited for: that tensor crosses
// inline. The reader trusts nothing in the memory but the bytes themselves: the place
// and size come with the message, are checked against the inbox, and the slot must say
// it holds exactly those bytes, written and not taken yet. A writer that changes the
// bytes while they are read changes only what it sent.

// Note [messages through shared memory]
// The bytes through shared memory left the small message that says where they lie on
// CAF's path: 110-130 us median from send to the receiver's network thread (p90 360 us,
// up to 1.3 ms while both cores compute, since that thread must wait for a core), twice a
// step on the critical path. So the ring's messages are left in the inbox too: the writer
// serialises the message (its tensor as a place) into a slot and appends (slot, actor id)
// to the inbox's queue (in the first 64 KiB of the memory file: head and tail at 64 and
// 72, the count of the reader's awake threads at 80, entries of 16 bytes from 128). Every
// stream thread of the reader's process polls the queues between its jobs and while it
// spins idle (runtime/core/stream_poller.hpp), loads each as the type its first byte
// names (posted_kind in include/troupe/device_actor.hpp; that type only, whole, so none
// of CAF's generic loading and its holes, docs/guide/nodes.md) and enqueues it to the actor
// (found by id in CAF's registry, where every device actor of a run with shared memory puts
// itself when it is made, and the trainer when it starts) as CAF's network thread would; in an
// idle process that is within microseconds, in a busy one when a job ends.
//
// Only messages whose receiver does not depend on their order against what still goes
// through CAF (sent before the link was made, or when the inbox had no room), nor on
// their sender (the reader enqueues them without one), are left there: the ring's (its
// averager keys them, pending_), a replica's labels (the loss pairs them by tag), a first
// layer's credits to the loader (counted by replica), loss reports (the trainer finishes
// steps in order: Note [finished in order] in actors/trainer/run_control.cpp) and the rows of a
// remote replica's batches (numbered: Note [rows in order] in
// actors/training/batch_assembler_actor.cpp). Every other message, a pipeline's activations,
// gradients and credits above all, keeps CAF's order and path. After the ring's messages,
// what a step still sent through CAF (the loader's rows and labels for node1's replica,
// node1's credit and loss report) cost the sending device thread 36-78 us a message (the
// network thread it woke took its core) besides the network threads' own time.
//
// A thread that goes to sleep (200 us idle) first takes itself off the awake count, then
// looks at the queues once more; a writer first publishes its entry, then reads the count,
// and when it is 0 sends the actor a wake-up through CAF (shm_poll_atom). Both sides use
// sequentially consistent operations, so one of them sees the other: a message is never
// left with every thread asleep. A full queue or inbox sends the message through CAF. An
// entry whose slot is not a written one is skipped (a hostile writer's word is checked as
// a tensor's place is, each word read once), a queue whose head is more than a queue ahead
// of its tail is emptied (else it would look busy for good and no stream would sleep),
// and a message that does not load as its kind is refused (load_posted in
// actors/transport/shm_delivery.hpp); each with a line on stderr (the first few), none reaching an
// actor.
//
// Measured (bench/nodes.py, medians of 5, docs/benchmarks.md): DP2 over two processes at batch 512
// from 0.76x to 0.82x of one process with the ring's messages, and to 0.94x-0.96x with
// the rest (two runs; at batch 128 0.56x, 0.70x, then 0.82x-0.85x).

namespace {

constexpr std::uint64_t segment_magic = 0x5452'4f55'5045'534dULL;  // "TROUPESM"
constexpr std::uint32_t slot_magic = 0x534c'4f54;                  // "SLOT"
constexpr std::uint64_t header_bytes = 64;                         // each slot's
constexpr std::uint64_t area_bytes = 65536;  // the segment's header and message queue
constexpr std::uint64_t queue_entries = (area_bytes - 128) / 16;
constexpr std::uint32_t slot_free = 0, slot_written = 1, slot_filling = 2;

struct segment_header {
  std::uint64_t magic;
  std::uint64_t key;
  std::uint64_t capacity;
};

struct slot_header {
  std::uint32_t state;  // slot_free, slot_written, slot_filling; atomically
  std::uint32_t magic;
  std::uint64_t bytes;
};

std::uint64_t round_up(std::uint64_t bytes) {
  return (bytes + header_bytes - 1) / header_bytes * header_bytes;
}

std::string memfd_name(std::uint64_t key) {
  char name[40];
  std::snprintf(name, sizeof name, "troupe-shm-%016llx", static_cast<unsigned long long>(key));
  return name;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string said_refused(std::string why) {
  static std::atomic<int> said{0};
  if (!why.empty() && said.fetch_add(1, std::memory_order_relaxed) < 3)
    std::fprintf(stderr, "troupe: refused from shared memory: %s\n", why.c_str());
  return why;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return in ? id : std::string{};
}

/// A mapped memory file: the inbox's header, then its slots.
class shm_segment {
 public:
  shm_segment(int fd, void* base, std::uint64_t size) : fd_(fd), base_(base), size_(size) {}
  ~shm_segment() {
    munmap(base_, size_);
    if (fd_ >= 0)
      close(fd_);
  }
  shm_segment(const shm_segment&) = delete;
  shm_segment& operator=(const shm_segment&) = delete;

  int fd() const { return fd_; }
  char* base() const { return static_cast<char*>(base_); }
  std::uint64_t size() const { return size_; }
  segment_header& header() const { return *reinterpret_cast<segment_header*>(base_); }
  std::uint64_t* queue_head() const { return reinterpret_cast<std::uint64_t*>(base() + 64); }
  std::uint64_t* queue_tail() const { return reinterpret_cast<std::uint64_t*>(base() + 72); }
  std::uint32_t* awake() const { return reinterpret_cast<std::uint32_t*>(base() + 80); }
  std::uint32_t* polled() const { return reinterpret_cast<std::uint32_t*>(base() + 84); }
  std::uint64_t* queue_entry(std::uint64_t i) const {
    return reinterpret_cast<std::uint64_t*>(base() + 128 + (i % queue_entries) * 16);
  }
  std::mutex reading;  // one reader thread at a time (the reader's side)
  slot_header& slot(std::uint64_t data_offset) const {
    return *reinterpret_cast<slot_header*>(base() + data_offset - header_bytes);
  }

 private:
  int fd_;  // the reader's (the writer's mapping needs none)
  void* base_;
  std::uint64_t size_;
};

struct shm_links::outbox {
  link state = link::unknown;
  std::shared_ptr<shm_segment> segment;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> live;  // [data offset, end), oldest first
  std::uint64_t head = area_bytes;                           // where the next slot's header goes

  /// The data offset of a new slot of `bytes`, or 0 when the ring has no room now.
  std::uint64_t allocate(std::uint64_t bytes) {
    while (!live.empty() &&
           __atomic_load_n(&segment->slot(live.front().first).state, __ATOMIC_ACQUIRE) == slot_free)
      live.pop_front();
    const std::uint64_t first = area_bytes, end = segment->size();
    if (bytes > end - first)
      return 0;
    const std::uint64_t need = header_bytes + round_up(bytes);
    if (need > end - first)
      return 0;
    std::uint64_t at = first;  // the new slot's header
    if (!live.empty()) {
      const std::uint64_t tail = live.front().first - header_bytes;  // the oldest slot's
      if (head > tail) {  // the live slots are [tail, head): room after them or before
        if (end - head >= need)
          at = head;
        else if (tail - first >= need)
          at = first;
        else
          return 0;
      } else if (tail - head >= need) {  // they wrap: [tail, end) and [first, head)
        at = head;
      } else {
        return 0;
      }
    }
    live.emplace_back(at + header_bytes, at + need);
    head = at + need;
    return at + header_bytes;
  }
};

namespace {
std::atomic<shm_links*> current_links{nullptr};
std::atomic<std::uint64_t> generations{0};
thread_local std::uint64_t awake_in = 0;  // the generation of links this thread counts in
}  // namespace

shm_links::shm_links(std::uint64_t capacity, std::size_t max_inboxes)
    : capacity_(capacity), max_inboxes_(max_inboxes), generation_(++generations) {}

shm_links::~shm_links() = default;

shm_links* shm_links::current() { return current_links.load(std::memory_order_acquire); }

shm_links::scope::scope(shm_links& links) : links_(links) {
  current_links.store(&links, std::memory_order_release);
}

shm_links::scope::~scope() {
  auto* mine = &links_;  // another scope's links stay current
  current_links.compare_exchange_strong(mine, nullptr, std::memory_order_acq_rel);
}

namespace {

/// A new inbox of `capacity` bytes of slots under `key`, mapped: a memory file reserved in
/// full and sealed at that size; or why not.
std::variant<std::shared_ptr<shm_segment>, std::string> make_inbox(std::uint64_t key,
                                                                   std::uint64_t capacity) {
  const std::uint64_t size = area_bytes + capacity;
  int fd = memfd_create(memfd_name(key).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return "memfd_create: " + errno_text();
  // Reserved now, so that a machine short of memory says so here, not with a SIGBUS when
  // a writer first touches a page; sealed, so that neither side can shrink it under the
  // other's copies (a SIGBUS too).
  int reserved = ftruncate(fd, static_cast<off_t>(size)) != 0
                     ? errno
                     : posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (reserved == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    reserved = errno;
  if (reserved != 0) {
    close(fd);
    return "cannot reserve " + std::to_string(size >> 20) +
           " MiB of shared memory: " + std::strerror(reserved);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    auto why = "mmap: " + errno_text();
    close(fd);
    return why;
  }
  auto segment = std::make_shared<shm_segment>(fd, base, size);
  segment->header() = segment_header{segment_magic, key, capacity};
  return segment;
}

}  // namespace

std::variant<shm_offer, std::string> shm_links::offer(const std::string& from) {
  const auto machine = boot_id();
  if (machine.empty())
    return std::string{"no boot id to tell this machine by"};
  std::shared_ptr<shm_segment> segment;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    auto found = inboxes_.find(from);
    if (found != inboxes_.end())
      segment = found->second;
    else if (inboxes_.size() >= max_inboxes_)
      return "this node has inboxes for " + std::to_string(max_inboxes_) + " writers already";
  }
  if (!segment) {  // made outside the lock: reserving 32 MiB takes milliseconds
    std::random_device random;
    const std::uint64_t key = ((std::uint64_t{random()} << 32) ^ random()) | 1;
    auto made = make_inbox(key, capacity_);
    if (auto* why = std::get_if<std::string>(&made))
      return *why;
    std::lock_guard<std::mutex> lock{mutex_};
    auto found = inboxes_.find(from);
    if (found != inboxes_.end())  // another thread made it meanwhile
      segment = found->second;
    else if (inboxes_.size() >= max_inboxes_ || by_key_.count(key) != 0)
      return "this node has inboxes for " + std::to_string(max_inboxes_) + " writers already";
    else {
      segment = inboxes_.emplace(from, std::get<std::shared_ptr<shm_segment>>(made)).first->second;
      __atomic_store_n(segment->awake(), static_cast<std::uint32_t>(awake_), __ATOMIC_SEQ_CST);
      __atomic_store_n(segment->polled(), deliver_ ? 1u : 0u, __ATOMIC_SEQ_CST);
    }
    by_key_.emplace(segment->header().key, segment);
  }
  return shm_offer{machine, static_cast<std::int32_t>(getpid()), segment->fd(),
                   segment->header().key, segment->header().capacity};
}

std::shared_ptr<shm_segment> shm_links::inbox(std::uint64_t key) const {
  std::lock_guard<std::mutex> lock{mutex_};
  auto found = by_key_.find(key);
  return found == by_key_.end() ? nullptr : found->second;
}

namespace {
std::string not_offered(std::uint64_t key) {
  return "a tensor in shared memory this node did not offer (inbox " + memfd_name(key) + ")";
}
}  // namespace

std::string shm_links::check(const shm_place& place, std::uint64_t bytes) const {
  auto segment = inbox(place.key);
  return segment ? check(*segment, place.offset, bytes) : not_offered(place.key);
}

std::string shm_links::check(const shm_segment& segment, std::uint64_t offset,
                             std::uint64_t bytes) {
  if (offset % header_bytes != 0 || offset < area_bytes + header_bytes || offset > segment.size() ||
      bytes > segment.size() - offset)
    return "a tensor of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
           " of a shared-memory inbox of " + std::to_string(segment.size()) +
           " bytes (out of it, or not at a slot)";
  auto& slot = segment.slot(offset);
  if (__atomic_load_n(&slot.state, __ATOMIC_ACQUIRE) != slot_written ||
      __atomic_load_n(&slot.magic, __ATOMIC_RELAXED) != slot_magic ||
      __atomic_load_n(&slot.bytes, __ATOMIC_RELAXED) != bytes)
    return "a tensor of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
           " of a shared-memory inbox, where no such tensor waits";
  return {};
}

std::string shm_links::take(const shm_place& place, std::uint64_t bytes, void* to) {
  auto segment = inbox(place.key);
  if (!segment)
    return not_offered(place.key);
  if (auto why = check(*segment, place.offset, bytes); !why.empty())
    return why;
  std::memcpy(to, segment->base() + place.offset, bytes);
  __atomic_store_n(&segment->slot(place.offset).state, slot_free, __ATOMIC_RELEASE);
  return {};
}

shm_links::link shm_links::claim(const std::string& to) {
  std::lock_guard<std::mutex> lock{mutex_};
  auto& box = outboxes_[to];
  if (!box)
    box = std::make_shared<outbox>();
  const auto was = box->state;
  if (was == link::unknown)
    box->state = link::asked;
  return was;
}

void shm_links::refuse(const std::string& to) {
  std::lock_guard<std::mutex> lock{mutex_};
  auto& box = outboxes_[to];
  if (!box)
    box = std::make_shared<outbox>();
  box->state = link::refused;
  box->segment.reset();
}

std::string shm_links::connect(const std::string& to, const shm_offer& offer) {
  auto why = [&]() -> std::string {
    if (offer.boot_id.empty() || offer.boot_id != boot_id())
      return "the node is on another machine";
    if (offer.capacity < 4 * header_bytes || offer.capacity > capacity_ || offer.pid <= 0 ||
        offer.fd < 0)
      return "a malformed offer (or an inbox larger than this node's, " +
             std::to_string(capacity_) + " bytes)";
    // Opened as a path only (no open of a device, no side effect), then every check on
    // what that descriptor holds, and the same inode opened for writing through it: the
    // peer cannot swap its descriptor between the checks and the open.
    const std::string path =
        "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
    const int at = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (at < 0)
      return path + " is not the offered inbox (another pid namespace?): " + errno_text();
    const std::string self = "/proc/self/fd/" + std::to_string(at);
    auto checked = [&]() -> std::string {
      const std::string want = "/memfd:" + memfd_name(offer.key) + " (deleted)";
      char target[128] = {};
      const auto length = readlink(self.c_str(), target, sizeof target - 1);
      if (length < 0 || std::string(target, static_cast<std::size_t>(length)) != want)
        return path + " is not the offered inbox (another pid namespace?)";
      return {};
    }();
    const int fd = checked.empty() ? open(self.c_str(), O_RDWR | O_CLOEXEC) : -1;
    close(at);
    if (!checked.empty())
      return checked;
    if (fd < 0)
      return "cannot open " + path + ": " + errno_text();
    // Sealed first, then sized: a size read before the seals could change before them (the
    // offering process shrinks its file, then seals it), and our writes past its end would
    // raise SIGBUS.
    const std::uint64_t size = area_bytes + offer.capacity;
    const int seals = fcntl(fd, F_GET_SEALS);
    const int needed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (seals < 0 || (seals & needed) != needed) {
      close(fd);
      return path + " is not sealed at its size";
    }
    struct stat about = {};
    if (fstat(fd, &about) != 0 || !S_ISREG(about.st_mode) ||
        static_cast<std::uint64_t>(about.st_size) != size) {
      close(fd);
      return path + " is not an inbox of the offered size";
    }
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
      return "mmap: " + errno_text();
    auto segment = std::make_shared<shm_segment>(-1, base, size);
    const auto& header = segment->header();
    if (header.magic != segment_magic || header.key != offer.key ||
        header.capacity != offer.capacity)
      return path + " does not hold the offered inbox";
    std::lock_guard<std::mutex> lock{mutex_};
    auto& box = outboxes_[to];
    if (!box)
      box = std::make_shared<outbox>();
    box->segment = std::move(segment);
    box->state = link::ready;
    return {};
  }();
  if (!why.empty())
    refuse(to);
  return why;
}

std::optional<shm_links::staged> shm_links::stage(const std::string& to, const void* data,
                                                  std::size_t bytes) {
  std::shared_ptr<shm_segment> segment;
  std::uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    auto found = outboxes_.find(to);
    if (found == outboxes_.end() || found->second->state != link::ready)
      return std::nullopt;
    auto& box = *found->second;
    offset = box.allocate(bytes);
    if (offset == 0)
      return std::nullopt;
    segment = box.segment;
    auto& slot = segment->slot(offset);
    slot.magic = slot_magic;
    slot.bytes = bytes;
    __atomic_store_n(&slot.state, slot_filling, __ATOMIC_RELAXED);
  }
  // The copy outside the lock: actors of other devices stage too.
  char* at = segment->base() + offset;
  std::memcpy(at, data, bytes);
  __atomic_store_n(&segment->slot(offset).state, slot_written, __ATOMIC_RELEASE);
  return staged{at, std::shared_ptr<void>(segment, at)};
}

std::optional<shm_place> shm_links::place_of(const void* data, std::size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock{mutex_};
  for (const auto& [node, box] : outboxes_) {
    if (!box->segment)
      continue;
    const char* base = box->segment->base();
    if (p >= base + area_bytes + header_bytes && p + bytes <= base + box->segment->size())
      return shm_place{box->segment->header().key, static_cast<std::uint64_t>(p - base)};
  }
  return std::nullopt;
}

std::int64_t shm_links::count_staged(std::uint32_t track, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock{mutex_};
  return staged_by_track_[track] += bytes;
}

std::int64_t shm_links::count_posted(std::uint32_t track) {
  std::lock_guard<std::mutex> lock{mutex_};
  return ++posted_by_track_[track];
}

std::int64_t shm_links::count_inline(std::uint32_t track) {
  std::lock_guard<std::mutex> lock{mutex_};
  return ++inline_by_track_[track];
}

void shm_links::set_delivery(delivery deliver) {
  std::lock_guard<std::mutex> lock{mutex_};
  deliver_ = deliver ? std::make_shared<delivery>(std::move(deliver)) : nullptr;
  // Writers leave messages only in the inboxes of a process that takes them.
  for (auto& [from, segment] : inboxes_)
    __atomic_store_n(segment->polled(), deliver_ ? 1u : 0u, __ATOMIC_SEQ_CST);
}

void shm_links::count_awake(int change) {
  std::lock_guard<std::mutex> lock{mutex_};
  awake_ += change;
  for (auto& [from, segment] : inboxes_)
    __atomic_add_fetch(segment->awake(), static_cast<std::uint32_t>(change), __ATOMIC_SEQ_CST);
}

shm_links::posted shm_links::post(const std::string& to, std::uint64_t dest, const void* data,
                                  std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    auto found = outboxes_.find(to);
    if (found == outboxes_.end() || found->second->state != link::ready ||
        __atomic_load_n(found->second->segment->polled(), __ATOMIC_SEQ_CST) == 0)
      return posted::no;  // no link, or a process that does not take messages
  }
  auto staged = stage(to, data, bytes);
  if (!staged)
    return posted::no;
  std::lock_guard<std::mutex> lock{mutex_};
  auto& box = *outboxes_.at(to);
  if (!box.segment)
    return posted::no;
  auto& segment = *box.segment;
  const auto head = *segment.queue_head();
  const auto tail = __atomic_load_n(segment.queue_tail(), __ATOMIC_ACQUIRE);
  const auto offset = static_cast<std::uint64_t>(static_cast<char*>(staged->data) - segment.base());
  if (head - tail >= queue_entries ||  // the queue is full, or its reader stopped taking
      __atomic_load_n(segment.polled(), __ATOMIC_SEQ_CST) == 0) {
    __atomic_store_n(&segment.slot(offset).state, slot_free, __ATOMIC_RELEASE);
    return posted::no;
  }
  auto* entry = segment.queue_entry(head);
  entry[0] = offset;
  entry[1] = dest;
  __atomic_store_n(segment.queue_head(), head + 1, __ATOMIC_SEQ_CST);
  // Read after the entry is published, as a reader announces its sleep before it looks
  // at the queue once more: one of the two sees the other (Note [messages through shared
  // memory]).
  return __atomic_load_n(segment.awake(), __ATOMIC_SEQ_CST) == 0 ? posted::wake : posted::yes;
}

bool shm_links::waiting() const {
  std::lock_guard<std::mutex> lock{mutex_};
  for (const auto& [from, segment] : inboxes_)
    if (__atomic_load_n(segment->queue_tail(), __ATOMIC_SEQ_CST) !=
        __atomic_load_n(segment->queue_head(), __ATOMIC_SEQ_CST))
      return true;
  return false;
}

std::size_t shm_links::poll(bool polling_thread) {
  if (polling_thread && awake_in != generation_) {  // its first poll: it counts as awake
    awake_in = generation_;
    count_awake(+1);
  }
  std::vector<std::shared_ptr<shm_segment>> inboxes;
  std::shared_ptr<delivery> deliver;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    for (auto& [from, segment] : inboxes_)
      if (__atomic_load_n(segment->queue_tail(), __ATOMIC_RELAXED) !=
          __atomic_load_n(segment->queue_head(), __ATOMIC_ACQUIRE))
        inboxes.push_back(segment);
    deliver = deliver_;
  }
  std::size_t delivered = 0;
  if (!deliver)
    return 0;  // none yet, or no longer: the messages wait (writers see polled == 0)
  std::vector<char> message;
  for (auto& segment : inboxes) {
    // A wake-up's handler waits for the inbox (it must not skip what it was woken for);
    // a polling thread leaves it to the thread that holds it.
    std::unique_lock<std::mutex> reading{segment->reading, std::defer_lock};
    if (polling_thread ? !reading.try_lock() : (reading.lock(), false))
      continue;
    // At most a queue's worth each call, whatever a writer claims its head is.
    for (std::uint64_t taken = 0; taken < queue_entries; ++taken) {
      const auto tail = __atomic_load_n(segment->queue_tail(), __ATOMIC_RELAXED);
      const auto head = __atomic_load_n(segment->queue_head(), __ATOMIC_ACQUIRE);
      if (tail == head)
        break;
      if (head - tail > queue_entries) {
        // Not a queue a writer of ours left (its head runs at most a queue ahead): emptied,
        // or this inbox would look busy for good and keep the streams from sleeping.
        said_refused("an inbox queue whose head is " + std::to_string(head) + " and tail " +
                     std::to_string(tail) + " (emptied)");
        __atomic_store_n(segment->queue_tail(), head, __ATOMIC_RELEASE);
        break;
      }
      // Each word of the entry read once: its writer may change it while we look.
      const auto* entry = segment->queue_entry(tail);
      const auto offset = __atomic_load_n(&entry[0], __ATOMIC_RELAXED);
      const auto dest = __atomic_load_n(&entry[1], __ATOMIC_RELAXED);
      // The writer's word for where its message lies is checked as a tensor's place is,
      // and the message copied out before it is read.
      if (offset % header_bytes == 0 && offset >= area_bytes + header_bytes &&
          offset <= segment->size()) {
        auto& slot = segment->slot(offset);
        const auto bytes = __atomic_load_n(&slot.bytes, __ATOMIC_RELAXED);
        if (__atomic_load_n(&slot.state, __ATOMIC_ACQUIRE) == slot_written &&
            __atomic_load_n(&slot.magic, __ATOMIC_RELAXED) == slot_magic &&
            bytes <= segment->size() - offset) {
          message.assign(segment->base() + offset, segment->base() + offset + bytes);
          __atomic_store_n(&slot.state, slot_free, __ATOMIC_RELEASE);
          __atomic_store_n(segment->queue_tail(), tail + 1, __ATOMIC_RELEASE);
          try {
            (*deliver)(dest, message.data(), message.size());
          } catch (const std::exception& e) {
            std::fprintf(stderr, "troupe: a message from shared memory failed: %s\n", e.what());
          }
          ++delivered;
          continue;
        }
      }
      said_refused("a queue entry naming " + std::to_string(offset) +
                   ", which is not a written message's slot (skipped)");
      __atomic_store_n(segment->queue_tail(), tail + 1, __ATOMIC_RELEASE);
    }
  }
  return delivered;
}

bool shm_links::before_sleep() {
  if (awake_in != generation_)  // never polled: not counted
    return true;
  count_awake(-1);
  if (!waiting())
    return true;
  count_awake(+1);
  poll();
  return false;
}

void shm_links::after_wake() {
  if (awake_in == generation_)
    count_awake(+1);
}

}  // namespace troupe::net
