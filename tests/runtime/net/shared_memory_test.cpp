// shared_memory_test.cpp: the inboxes of Note [tensors through shared memory] within one
// process (a writer maps its own process's inbox through /proc/self's pid, as another
// process of the machine would): staged bytes are taken once and intact; what a reader
// was not handed is refused without a copy; a full ring stages nothing until the reader
// takes its oldest slot, whatever the order it takes them in; a writer maps only an offer
// of its machine whose descriptor is the offered inbox; and a tensor staged so crosses
// CAF's serialisation as a place, not as bytes.
#include "actors/base/collective_messages.hpp"
#include "runtime/net/shared_memory.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "actors/training/batch_assembler_actor.hpp"
#include "actors/transport/shm_delivery.hpp"
#include "tests/temp_files.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"
#include "troupe/detail/tensor_inspect.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {

std::vector<char> pattern(std::size_t bytes, int seed) {
  std::vector<char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<char>((i * 31 + static_cast<std::size_t>(seed) * 7) & 0xff);
  return out;
}

std::string hex(std::uint64_t key) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(key));
  return text;
}

// A reader's inbox for node "w", mapped by `writer` as its link to node "r".
shm_offer link(shm_links& reader, shm_links& writer) {
  auto offer = reader.offer("w");
  REQUIRE(std::holds_alternative<shm_offer>(offer));
  CHECK(writer.claim("r") == shm_links::link::unknown);
  CHECK(writer.claim("r") == shm_links::link::asked);
  auto why = writer.connect("r", std::get<shm_offer>(offer));
  INFO(why);
  REQUIRE(why.empty());
  CHECK(writer.claim("r") == shm_links::link::ready);
  return std::get<shm_offer>(offer);
}

}  // namespace

TEST_CASE("a tensor staged for a node of this machine is taken once, intact, and its slot reused") {
  shm_links reader{1 << 16}, writer{1 << 16};
  const auto offer = link(reader, writer);
  CHECK(offer.pid == getpid());
  CHECK(offer.boot_id == boot_id());
  // The same writer asking again gets the same inbox.
  auto again = reader.offer("w");
  REQUIRE(std::holds_alternative<shm_offer>(again));
  CHECK(std::get<shm_offer>(again).key == offer.key);

  for (int round = 0; round < 20; ++round) {  // 20 x 10 KB through a 64 KB ring
    const auto data = pattern(10000, round);
    auto staged = writer.stage("r", data.data(), data.size());
    REQUIRE(staged);
    CHECK(std::memcmp(staged->data, data.data(), data.size()) == 0);
    auto place = writer.place_of(staged->data, data.size());
    REQUIRE(place);
    CHECK(place->key == offer.key);
    std::vector<char> got(data.size());
    auto why = reader.take(*place, data.size(), got.data());
    INFO(why);
    REQUIRE(why.empty());
    CHECK(got == data);
    // Taken once: the slot is free, and a second take of it is refused.
    CHECK(reader.take(*place, data.size(), got.data()).find("no such tensor waits") !=
          std::string::npos);
  }
  int outside = 0;
  CHECK_FALSE(writer.place_of(&outside, sizeof outside));
}

TEST_CASE(
    "a place in shared memory that this process did not hand out is refused, nothing copied") {
  shm_links reader{1 << 16}, writer{1 << 16};
  const auto offer = link(reader, writer);
  const auto data = pattern(1000, 1);
  auto staged = writer.stage("r", data.data(), data.size());
  REQUIRE(staged);
  const auto place = *writer.place_of(staged->data, data.size());
  std::vector<char> got(4096, 'x');
  const std::vector<char> untouched(4096, 'x');
  auto refused = [&](shm_place at, std::uint64_t bytes, const char* why) {
    auto text = reader.take(at, bytes, got.data());
    INFO(text);
    CHECK(text.find(why) != std::string::npos);
    CHECK(got == untouched);
  };
  refused({offer.key + 1, place.offset}, 1000, "did not offer");
  refused({place.key, place.offset + 8}, 1000, "not at a slot");
  refused({place.key, 0}, 1000, "not at a slot");
  refused({place.key, std::uint64_t{1} << 40}, 1000, "out of it");
  refused({place.key, place.offset}, std::uint64_t{1} << 20, "out of it");
  refused({place.key, place.offset}, 999, "no such tensor waits");          // the slot holds 1000
  refused({place.key, place.offset + 1024}, 1000, "no such tensor waits");  // no slot there
  CHECK(reader.take(place, 1000, got.data()).empty());
  // Without links, the crossing's loader says so (the message fuzzer's case).
  shm_links other;
  CHECK(other.take(place, 1000, got.data()).find("did not offer") != std::string::npos);
}

TEST_CASE("a full inbox stages nothing until the reader takes its oldest slot, in any order") {
  // 4 slots of 1000 bytes (+ 64 each, rounded) fill 4 x 1088 + the segment's header.
  const std::uint64_t capacity = 4 * (64 + 1024);
  shm_links reader{capacity}, writer{capacity};
  link(reader, writer);
  std::vector<shm_place> places;
  for (int i = 0; i < 4; ++i) {
    const auto data = pattern(1000, i);
    auto staged = writer.stage("r", data.data(), data.size());
    REQUIRE(staged);
    places.push_back(*writer.place_of(staged->data, 1000));
  }
  const auto more = pattern(1000, 9);
  CHECK_FALSE(writer.stage("r", more.data(), more.size()));  // full: it crosses inline
  std::vector<char> got(1000);
  REQUIRE(reader.take(places[1], 1000, got.data()).empty());  // the second first
  CHECK(got == pattern(1000, 1));
  CHECK_FALSE(writer.stage("r", more.data(), more.size()));  // the oldest is still held
  REQUIRE(reader.take(places[0], 1000, got.data()).empty());
  CHECK(got == pattern(1000, 0));
  // Slots 0 and 1 are free now: two more fit, a third does not.
  CHECK(writer.stage("r", more.data(), more.size()));
  CHECK(writer.stage("r", more.data(), more.size()));
  CHECK_FALSE(writer.stage("r", more.data(), more.size()));
  // Larger than the whole inbox: never staged.
  const auto huge = pattern(capacity + 1, 3);
  CHECK_FALSE(writer.stage("r", huge.data(), huge.size()));
}

TEST_CASE("random sizes taken in random order all arrive intact, and the ring wraps") {
  const std::uint64_t capacity = 1 << 15;
  shm_links reader{capacity}, writer{capacity};
  link(reader, writer);
  std::mt19937 random{7};
  struct held {
    shm_place place;
    std::vector<char> data;
  };
  std::vector<held> waiting;
  int staged_count = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    if (!waiting.empty() && (random() % 3 == 0 || waiting.size() > 12)) {
      // The reader takes any waiting one (it loads in its own order).
      auto at = waiting.begin() + static_cast<long>(random() % waiting.size());
      std::vector<char> got(at->data.size());
      auto why = reader.take(at->place, got.size(), got.data());
      INFO(why);
      REQUIRE(why.empty());
      REQUIRE(got == at->data);
      waiting.erase(at);
      continue;
    }
    auto data = pattern(512 + random() % 6000, i);
    auto staged = writer.stage("r", data.data(), data.size());
    if (!staged) {
      ++refused;
      continue;
    }
    ++staged_count;
    auto place = writer.place_of(staged->data, data.size());
    REQUIRE(place);
    // No staged slot overlaps another that waits.
    for (const auto& w : waiting)
      CHECK((place->offset + data.size() <= w.place.offset ||
             w.place.offset + w.data.size() <= place->offset));
    waiting.push_back({*place, std::move(data)});
  }
  CHECK(staged_count > 500);  // 500 x 3.5 KB on average: the 32 KB ring wrapped often
  CHECK(refused > 0);         // and was full at times
}

TEST_CASE("a writer maps only an offer of its machine whose descriptor is the offered inbox") {
  shm_links reader{1 << 16};
  auto made = reader.offer("w");
  REQUIRE(std::holds_alternative<shm_offer>(made));
  const auto offer = std::get<shm_offer>(made);
  test::temp_directory dir{"troupe-shm"};
  const auto plain = dir.write("plain", std::string(64 + (1 << 16), '\0'));
  const int plain_fd = open(plain.c_str(), O_RDWR);
  REQUIRE(plain_fd >= 0);
  struct refusal {
    const char* what;
    shm_offer offer;
    const char* why;
  };
  auto changed = [&](auto change) {
    auto o = offer;
    change(o);
    return o;
  };
  const std::vector<refusal> refusals = {
      {"another machine's boot id", changed([](shm_offer& o) { o.boot_id = "elsewhere"; }),
       "another machine"},
      {"no boot id", changed([](shm_offer& o) { o.boot_id.clear(); }), "another machine"},
      {"another key", changed([](shm_offer& o) { o.key ^= 1; }), "not the offered inbox"},
      {"a plain file's descriptor", changed([&](shm_offer& o) { o.fd = plain_fd; }),
       "not the offered inbox"},
      {"a descriptor that is not open", changed([](shm_offer& o) { o.fd = 100000; }),
       "not the offered inbox"},
      {"another size", changed([](shm_offer& o) { o.capacity *= 2; }), "offered size"},
      {"an absurd size", changed([](shm_offer& o) { o.capacity = ~std::uint64_t{0}; }),
       "malformed"},
      {"no process", changed([](shm_offer& o) { o.pid = 0; }), "malformed"},
      {"larger than the writer's own inboxes", changed([](shm_offer& o) { o.capacity = 1 << 26; }),
       "larger than this node's"},
  };
  for (const auto& r : refusals) {
    INFO(r.what);
    shm_links writer;
    auto why = writer.connect("r", r.offer);
    INFO(why);
    CHECK(why.find(r.why) != std::string::npos);
    CHECK(writer.claim("r") == shm_links::link::refused);
    const auto data = pattern(1000, 0);
    CHECK_FALSE(writer.stage("r", data.data(), data.size()));
  }
  close(plain_fd);
  shm_links writer;
  CHECK(writer.connect("r", offer).empty());
  // Sealed at its size: neither side can shrink it under the other's copies (a SIGBUS).
  const auto path = "/proc/self/fd/" + std::to_string(offer.fd);
  CHECK(truncate(path.c_str(), 4096) != 0);
  // A memory file with the offered name, size and header, but not sealed, is refused.
  const int unsealed = memfd_create(("troupe-shm-" + hex(offer.key ^ 2)).c_str(), MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(ftruncate(unsealed, static_cast<off_t>(65536 + offer.capacity)) == 0);  // header, queue
  const std::uint64_t header[3] = {0x5452'4f55'5045'534dULL, offer.key ^ 2, offer.capacity};
  REQUIRE(pwrite(unsealed, header, sizeof header, 0) == sizeof header);
  auto fake = offer;
  fake.fd = unsealed;
  fake.key = offer.key ^ 2;
  shm_links fooled;
  auto why = fooled.connect("r", fake);
  CHECK(why.find("not sealed") != std::string::npos);
  close(unsealed);
}

TEST_CASE("a process makes inboxes for at most its number of writers") {
  shm_links reader{1 << 12, 2};
  CHECK(std::holds_alternative<shm_offer>(reader.offer("a")));
  CHECK(std::holds_alternative<shm_offer>(reader.offer("b")));
  CHECK(std::holds_alternative<shm_offer>(reader.offer("a")));  // its own again
  auto third = reader.offer("c");
  REQUIRE(std::holds_alternative<std::string>(third));
  CHECK(std::get<std::string>(third).find("2 writers") != std::string::npos);
}

TEST_CASE("a staged tensor crosses CAF's serialisation as its place and is loaded from it") {
  caf::actor_system_config config;
  add_message_types(config);
  caf::actor_system system{config};
  shm_links links{1 << 16};
  std::vector<float> values(1000);
  std::iota(values.begin(), values.end(), -3.5f);
  auto serialised = [&](const tensor& t) {
    std::vector<char> buffer;
    caf::binary_serializer sink{system, buffer};
    activation_msg out;
    out.x = t;
    REQUIRE(!sink(out));
    return buffer;
  };
  auto load = [&](const std::vector<char>& buffer, activation_msg& in) {
    caf::binary_deserializer source{system, buffer};
    return source(in);
  };
  const auto plain = tensor::from(values, {10, 100});
  std::vector<char> again;
  {
    shm_links::scope in_use{links};
    link(links, links);  // this process writes into its own inbox
    auto staged = links.stage("r", plain.raw(), plain.bytes());
    REQUIRE(staged);
    auto over_slot =
        tensor::borrowing(staged->data, {10, 100}, dtype::f32, plain.device(), staged->owner);
    const auto buffer = serialised(over_slot);
    CHECK(buffer.size() < 200);              // the place, not 4000 bytes
    CHECK(serialised(plain).size() > 4000);  // a tensor of the pool crosses inline
    activation_msg in;
    REQUIRE(!load(buffer, in));
    CHECK(in.x.shape() == shape_t{10, 100});
    CHECK(in.x.to_vector() == values);
    CHECK(in.x.raw() != over_slot.raw());
    // Loaded once: the same message again finds its slot taken, and is refused.
    activation_msg twice;
    auto error = load(buffer, twice);
    CHECK(error);
    CHECK(system.render(error).find("no such tensor waits") != std::string::npos);
    CHECK_FALSE(twice.x.defined());
    // Staged again, for a process without links below.
    auto staged_again = links.stage("r", plain.raw(), plain.bytes());
    REQUIRE(staged_again);
    again = serialised(tensor::borrowing(staged_again->data, {10, 100}, dtype::f32, plain.device(),
                                         staged_again->owner));
  }
  CHECK(shm_links::current() == nullptr);
  {
    // A peer's staged header that claims 2^30 floats at a place this node never offered is
    // refused before the 4 GiB are allocated.
    shm_links::scope in_use{links};
    const device_id host{device_type::cpu, 0, this_node()};
    reset_storage_peak(host);
    const auto peak = storage_bytes_peak(host);
    std::vector<char> forged;
    {
      caf::binary_serializer sink{system, forged};
      shape_t shape{std::int64_t{1} << 30};
      std::uint8_t type = 0x80;  // f32, staged
      std::uint64_t bytes = std::uint64_t{4} << 30, key = 12345, offset = 128;
      REQUIRE(!sink(shape, type, bytes, key, offset));
    }
    tensor t;
    caf::binary_deserializer source{system, forged};
    auto error = source(t);
    CHECK(error);
    CHECK(system.render(error).find("did not offer") != std::string::npos);
    CHECK_FALSE(t.defined());
    CHECK(storage_bytes_peak(host) == peak);
  }
  activation_msg nowhere;
  auto refused = load(again, nowhere);
  CHECK(refused);
  CHECK(system.render(refused).find("no shared-memory links") != std::string::npos);
}

TEST_CASE("the staged tensors of one message count together against an inbox's bytes") {
  // A hostile writer could mark one slot written again as each header of a message is
  // taken, and make a message of many 40-byte headers allocate an inbox's worth for each:
  // within a message's scope (a vector of tensors loads under one) their bytes add up.
  shm_links links{1 << 16};
  shm_links::scope in_use{links};
  link(links, links);
  const std::vector<char> bytes(40000, 'x');
  auto staged = links.stage("r", bytes.data(), bytes.size());
  REQUIRE(staged);
  std::uint64_t key = 0, offset = 0;
  REQUIRE(detail::staged_place(staged->data, bytes.size(), key, offset));
  CHECK(detail::check_staged(key, offset, bytes.size()).empty());  // alone, each is checked
  CHECK(detail::check_staged(key, offset, bytes.size()).empty());  // against its slot only
  {
    detail::staged_message_scope one_message;
    CHECK(detail::check_staged(key, offset, bytes.size()).empty());
    detail::staged_message_scope nested;  // the outermost counts
    const auto why = detail::check_staged(key, offset, bytes.size());
    INFO(why);
    CHECK(why.find("claim more than 65536 bytes of shared memory") != std::string::npos);
  }
  CHECK(detail::check_staged(key, offset, bytes.size()).empty());
}

TEST_CASE("messages left in an inbox's queue are delivered once, in order, to their actors") {
  // Note [messages through shared memory]: the writer leaves serialised messages, a thread
  // of the reader's process takes them between its jobs, and the writer is told to wake
  // that process whenever none of its threads polls.
  shm_links reader{1 << 16}, writer{1 << 16};
  link(reader, writer);
  std::vector<std::pair<std::uint64_t, std::string>> got;
  reader.set_delivery([&](std::uint64_t dest, const char* data, std::size_t bytes) {
    got.emplace_back(dest, std::string(data, bytes));
  });
  // No thread of the reader has polled yet: every message asks for a wake-up.
  const std::string first(600, 'a'), second(700, 'b');
  CHECK(writer.post("r", 7, first.data(), first.size()) == shm_links::posted::wake);
  CHECK(reader.poll() == 1);  // this thread now counts as awake
  CHECK(writer.post("r", 8, second.data(), second.size()) == shm_links::posted::yes);
  CHECK(writer.post("r", 9, first.data(), first.size()) == shm_links::posted::yes);
  CHECK(reader.poll() == 2);
  CHECK(reader.poll() == 0);  // delivered once
  REQUIRE(got.size() == 3);
  CHECK(got[0] == std::make_pair(std::uint64_t{7}, first));
  CHECK(got[1] == std::make_pair(std::uint64_t{8}, second));
  CHECK(got[2] == std::make_pair(std::uint64_t{9}, first));
  // About to sleep with nothing waiting: writers are told to wake it; once it woke, not.
  CHECK(reader.before_sleep());
  CHECK(writer.post("r", 10, first.data(), first.size()) == shm_links::posted::wake);
  reader.after_wake();
  CHECK(writer.post("r", 11, first.data(), first.size()) == shm_links::posted::yes);
  // About to sleep while messages wait: it takes them and stays awake.
  CHECK_FALSE(reader.before_sleep());
  CHECK(got.size() == 5);
  CHECK(writer.post("r", 12, first.data(), first.size()) == shm_links::posted::yes);
  CHECK(reader.poll() == 1);
  // Without a link there is nothing to post to; a message larger than the inbox neither.
  shm_links unlinked;
  CHECK(unlinked.post("r", 1, first.data(), first.size()) == shm_links::posted::no);
  const std::string huge(1 << 17, 'h');
  CHECK(writer.post("r", 1, huge.data(), huge.size()) == shm_links::posted::no);
}

TEST_CASE("a queue entry that does not point at a written slot is skipped, not delivered") {
  shm_links reader{1 << 16}, writer{1 << 16};
  const auto offer = link(reader, writer);
  int delivered = 0;
  reader.set_delivery([&](std::uint64_t, const char*, std::size_t) { ++delivered; });
  // A hostile writer's entries, written straight into the reader's queue (the layout of
  // Note [messages through shared memory]: head at 64, entries of 16 bytes from 128).
  char* base =
      static_cast<char*>(mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, offer.fd, 0));
  REQUIRE(base != MAP_FAILED);
  auto* head = reinterpret_cast<std::uint64_t*>(base + 64);
  const std::uint64_t bad[][2] = {{1, 0}, {1ULL << 40, 0}, {65536 + 64, 0}, {65536 + 8, 0}};
  for (const auto& entry : bad) {
    auto* at = reinterpret_cast<std::uint64_t*>(base + 128 + (*head % 4088) * 16);
    at[0] = entry[0];
    at[1] = entry[1];
    __atomic_store_n(head, *head + 1, __ATOMIC_RELEASE);
  }
  CHECK(reader.poll() == 0);
  CHECK(delivered == 0);
  // A head far ahead of the tail (or behind it) is no queue a writer of ours left: the
  // reader empties it rather than see an inbox that waits for good (its streams would
  // never sleep), and what an honest writer leaves next arrives.
  auto* tail = reinterpret_cast<std::uint64_t*>(base + 72);
  const std::string message(600, 'm');
  for (const auto corrupt : {*tail + 5000, *tail - 1}) {
    __atomic_store_n(head, corrupt, __ATOMIC_RELEASE);
    CHECK_FALSE(reader.before_sleep());  // something seems to wait: it looks, and empties
    CHECK(reader.before_sleep());        // nothing waits now: it may sleep
    reader.after_wake();
    CHECK(writer.post("r", 3, message.data(), message.size()) != shm_links::posted::no);
    CHECK(reader.poll() == 1);
  }
  CHECK(delivered == 2);
  munmap(base, 65536);
}

// An actor that takes credits from shared memory, as the data loader does, and passes
// them to `to`.
class credit_taker final : public device_actor {
 public:
  credit_taker(caf::actor_config& config, caf::actor to)
      : device_actor(config, "credit taker", nullptr), to_(std::move(to)) {}
  bool takes_posted_releases() const override { return true; }

 protected:
  caf::message_handler handlers() override {
    return {[this](release_msg& release) { send(to_, std::move(release)); }};
  }
  void release_peers() override { to_ = nullptr; }

 private:
  caf::actor to_;
};

// A process that delivers what it leaves in its own inbox to `self`, as its stream
// threads would (deliver_shared_memory).
struct delivery_fixture {
  static caf::actor_system_config& registered(caf::actor_system_config& c) {
    add_message_types(c);
    return c;
  }
  caf::actor_system_config config;
  caf::actor_system system{registered(config)};
  shm_links links{1 << 16};
  shm_links::scope in_use{links};
  std::unique_ptr<stream_poller> poller;
  caf::scoped_actor self{system};

  delivery_fixture() {
    link(links, links);
    poller = deliver_shared_memory(system, links);
    system.registry().put(self->id(), caf::actor_cast<caf::strong_actor_ptr>(self));
  }
  ~delivery_fixture() {
    system.registry().erase(self->id());
    poller.reset();
  }
};

TEST_CASE_FIXTURE(
    delivery_fixture,
    "only a whole, well-formed ring message left in shared memory reaches its actor") {
  // What deliver_shared_memory loads from a queue (Note [messages through shared memory]):
  // garbage, a ring message with bytes after it, and one whose tensor claims 2^30 floats
  // it does not carry are refused without a crash or an allocation; a ring message for an
  // actor this process has not is refused; a well-formed one arrives.
  auto serialised = [&](ring_msg message) {  // as post_message leaves it
    std::vector<char> buffer;
    caf::binary_serializer sink{system, buffer};
    auto kind = detail::posted_kind<ring_msg>::value;
    REQUIRE(!sink(kind, message));
    return buffer;
  };
  auto leave = [&](const std::vector<char>& bytes, std::uint64_t dest) {
    REQUIRE(links.post("r", dest, bytes.data(), bytes.size()) != shm_links::posted::no);
    links.poll(false);
  };
  auto nothing_arrives = [&] {
    bool arrived = false;
    self->receive([&](ring_msg&) { arrived = true; },
                  caf::after(std::chrono::milliseconds(50)) >> [] {});
    CHECK_FALSE(arrived);
  };
  ring_msg good;
  good.step = 3;
  good.chunk = 1;
  good.data = tensor::from(std::vector<float>(200, 1.5f), {200});

  leave(std::vector<char>(600, 'x'), self->id());
  nothing_arrives();
  auto trailing = serialised(good);
  trailing.insert(trailing.end(), 100, '\0');
  leave(trailing, self->id());
  nothing_arrives();
  {
    const device_id host{device_type::cpu, 0, this_node()};
    reset_storage_peak(host);
    const auto peak = storage_bytes_peak(host);
    std::vector<char> claim;
    caf::binary_serializer sink{system, claim};
    std::int64_t step = 0;
    std::int32_t layer = 0, bucket = 0, phase = 0, round = 0, chunk = 0;
    shape_t shape{std::int64_t{1} << 30};
    std::uint8_t type = 0;
    std::uint64_t bytes = std::uint64_t{4} << 30;
    auto kind = detail::posted_kind<ring_msg>::value;
    REQUIRE(!sink(kind, step, layer, bucket, phase, round, chunk, shape, type, bytes));
    claim.resize(std::max<std::size_t>(claim.size(), 600));
    leave(claim, self->id());
    nothing_arrives();
    CHECK(storage_bytes_peak(host) == peak);
  }
  leave(serialised(good), self->id() + 1000);  // no such actor here
  nothing_arrives();
  auto unknown = serialised(good);
  unknown[0] = 9;  // a kind there is not
  leave(unknown, self->id());
  nothing_arrives();
  auto labels = serialised(good);
  labels[0] = detail::posted_kind<labels_msg>::value;  // a ring message's bytes as labels
  leave(labels, self->id());
  nothing_arrives();
  {
    // A message nested 2000 deep, as CAF's generic loading would take it, under the ring's
    // kind: loaded as a ring message only, so refused, without recursing into it.
    auto nested = caf::make_message(good);
    for (int depth = 0; depth < 2000; ++depth)
      nested = caf::make_message(std::move(nested));
    std::vector<char> buffer;
    caf::binary_serializer sink{system, buffer};
    auto kind = detail::posted_kind<ring_msg>::value;
    REQUIRE(!sink(kind, nested));
    leave(buffer, self->id());
    nothing_arrives();
  }

  leave(serialised(good), self->id());
  bool arrived = false;
  self->receive(
      [&](ring_msg& m) {
        arrived = true;
        CHECK(m.step == 3);
        CHECK(m.chunk == 1);
        CHECK(m.data.to_vector() == std::vector<float>(200, 1.5f));
      },
      caf::after(std::chrono::seconds(5)) >> [] {});
  CHECK(arrived);
}

TEST_CASE_FIXTURE(
    delivery_fixture,
    "labels, credits, loss reports and a batch's rows left in shared memory arrive as such") {
  // The other kinds a process leaves another of its machine (posted_kind in
  // include/troupe/device_actor.hpp), each loaded as its type; rows for a first layer this
  // process has not are refused.
  auto leave = [&](auto message, caf::actor_id to) {
    std::vector<char> buffer;
    caf::binary_serializer sink{system, buffer};
    auto kind = detail::posted_kind<decltype(message)>::value;
    REQUIRE(!sink(kind, message));
    REQUIRE(links.post("r", to, buffer.data(), buffer.size()) != shm_links::posted::no);
    links.poll(false);
  };
  micro_tag tag;
  tag.step = 7;
  tag.replica = 1;
  auto expect = [&](const std::string& what, auto check) {  // check takes the message
    bool arrived = false;
    self->receive(
        [&](typename decltype(check)::argument_type m) {
          arrived = true;
          check(m);
        },
        caf::after(std::chrono::seconds(5)) >> [] {});
    CHECK_MESSAGE(arrived, what);
  };

  leave(labels_msg{tag, tensor::from(std::vector<float>(300, 2.0f), {300}), 512, 500, {}},
        self->id());
  expect("labels", std::function<void(labels_msg&)>{[&](labels_msg& labels) {
           CHECK(labels.tag.step == 7);
           CHECK(labels.global_batch == 512);
           CHECK(labels.global_terms == 500);
           CHECK(labels.labels.to_vector() == std::vector<float>(300, 2.0f));
         }});
  // A credit comes without a sender, so only to an actor that takes credits so (the data
  // loader); one left for any other (a layer would take it for its first wire's) is refused.
  leave(release_msg{tag, {}}, self->id());
  bool refused = true;
  self->receive([&](release_msg&) { refused = false; },
                caf::after(std::chrono::milliseconds(50)) >> [] {});
  CHECK(refused);
  auto taker = system.spawn<credit_taker>(caf::actor_cast<caf::actor>(self));
  leave(release_msg{tag, {}}, taker.id());
  expect("a release", std::function<void(release_msg&)>{
                          [&](release_msg& release) { CHECK(release.tag.replica == 1); }});
  caf::anon_send_exit(taker, caf::exit_reason::user_shutdown);
  leave(loss_report_msg{tag, 1.5, 4, {3, 0.25}, 4, 2, {}}, self->id());
  expect("a loss report", std::function<void(loss_report_msg&)>{[&](loss_report_msg& report) {
           CHECK(report.loss_sum == 1.5);
           CHECK(report.terms == 4);
           CHECK(report.metric_sums == std::array<double, 2>{3, 0.25});
           CHECK(report.samples == 4);
           CHECK(report.microbatches == 2);
         }});
  batch_rows_msg rows{tag, {5, 9}, false, caf::actor_cast<caf::actor>(self), "cpu:0", {}, 3};
  leave(rows, self->id());
  expect("the rows of a batch", std::function<void(batch_rows_msg&)>{[&](batch_rows_msg& got) {
           CHECK(got.rows == std::vector<std::int64_t>{5, 9});
           CHECK(got.sequence == 3);
           CHECK(got.first_layer == caf::actor_cast<caf::actor>(self));
         }});
  // For a first layer this node has not: refused.
  auto gone = system.spawn([] { return caf::behavior{[](int) {}}; });
  rows.first_layer = gone;
  {
    std::vector<char> buffer;
    caf::binary_serializer sink{system, buffer};
    auto kind = detail::posted_kind<batch_rows_msg>::value;
    REQUIRE(!sink(kind, rows));  // puts `gone` in the registry, as any local handle saved
    system.registry().erase(gone.id());
    REQUIRE(links.post("r", self->id(), buffer.data(), buffer.size()) != shm_links::posted::no);
    links.poll(false);
  }
  bool arrived = false;
  self->receive([&](batch_rows_msg&) { arrived = true; },
                caf::after(std::chrono::milliseconds(50)) >> [] {});
  CHECK_FALSE(arrived);
  caf::anon_send_exit(gone, caf::exit_reason::user_shutdown);
}
