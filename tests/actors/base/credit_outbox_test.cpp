// The credit outbox (actors/base/credit_outbox.hpp), the sending end of an activations wire,
// inside a small test actor that forwards the scoped actor's activation_msg to it and turns
// each release_msg into a returned credit; the scoped actor is the wire's receiver. Checks
// the capacity, the order of queued messages, one message per returned credit, capacity 0
// as unbounded, and a credit returned with none in flight as a programmer error.
//
// The outbox has no priorities of its own: queued messages leave strictly in the order they
// were sent (1F1B's priority is that of gradients over activations, in the layer actor,
// tests/actors/training/layer_actor_test.cpp).
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "actors/base/credit_outbox.hpp"
#include "actors/base/failures.hpp"
#include "tests/actors/actor_test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

struct holder_state {
  credit_outbox outbox;
  caf::actor trainer;
  static inline const char* name = "credit_outbox_holder";
};

/// Holds an outbox connected to `end`; reports failures to `trainer`. Answers status_atom
/// with {in flight, waiting, capacity}.
caf::behavior outbox_holder(caf::stateful_actor<holder_state>* self, wire_end end,
                            caf::actor trainer) {
  self->state.outbox.connect(end);
  self->state.trainer = std::move(trainer);
  report_failures_to(self, "outbox", &self->state.trainer);
  return {
      [=](activation_msg& m) { self->state.outbox.send(self, std::move(m)); },
      [=](release_msg&) { self->state.outbox.release(self); },
      [=](status_atom) {
        const auto& o = self->state.outbox;
        return std::vector<std::int64_t>{o.in_flight(), static_cast<std::int64_t>(o.waiting()),
                                         o.capacity()};
      },
      [=](finish_atom) { self->quit(); },
  };
}

activation_msg numbered(std::int32_t microbatch) {
  activation_msg m;
  m.tag.microbatch = microbatch;
  m.x = tensor::from({static_cast<float>(microbatch)}, {1, 1});
  return m;
}

struct outbox_fixture : actor_fixture {
  caf::actor spawn(std::int64_t capacity) {
    return system.spawn(outbox_holder, wire("activations", me(), "layer", capacity), me());
  }

  /// {in flight, waiting, capacity}.
  std::vector<std::int64_t> status(const caf::actor& holder) {
    std::vector<std::int64_t> out;
    self->request(holder, caf::infinite, status_atom::value)
        .receive([&](std::vector<std::int64_t>& v) { out = std::move(v); },
                 [&](caf::error& e) { FAIL_CHECK("no status: " << system.render(e)); });
    return out;
  }

  std::int32_t next_microbatch() {
    auto m = next<activation_msg>("a message on the wire");
    CHECK(values(m.x) == std::vector<float>{static_cast<float>(m.tag.microbatch)});
    return m.tag.microbatch;
  }

  void release(const caf::actor& holder) { self->send(holder, release_msg{}); }
};

}  // namespace

TEST_CASE_FIXTURE(outbox_fixture,
                  "a credit outbox never has more than its capacity in flight, and sends the "
                  "queued messages in order, one per returned credit") {
  auto holder = spawn(2);
  for (std::int32_t m = 0; m < 5; ++m)
    self->send(holder, numbered(m));
  CHECK(next_microbatch() == 0);
  CHECK(next_microbatch() == 1);
  expect_quiet("capacity 2: the third message waits");
  CHECK(status(holder) == std::vector<std::int64_t>{2, 3, 2});

  release(holder);
  CHECK(next_microbatch() == 2);
  expect_quiet("one credit, one message");
  CHECK(status(holder) == std::vector<std::int64_t>{2, 2, 2});
  release(holder);
  release(holder);
  CHECK(next_microbatch() == 3);
  CHECK(next_microbatch() == 4);
  CHECK(status(holder) == std::vector<std::int64_t>{2, 0, 2});

  // Credits returned with nothing waiting only free the wire; the next send goes at once.
  release(holder);
  release(holder);
  CHECK(status(holder) == std::vector<std::int64_t>{0, 0, 2});
  self->send(holder, numbered(5));
  CHECK(next_microbatch() == 5);
  finish(holder);
}

TEST_CASE_FIXTURE(outbox_fixture, "a credit outbox of capacity 0 sends everything at once") {
  auto holder = spawn(0);
  for (std::int32_t m = 0; m < 5; ++m)
    self->send(holder, numbered(m));
  for (std::int32_t m = 0; m < 5; ++m)
    CHECK(next_microbatch() == m);
  CHECK(status(holder) == std::vector<std::int64_t>{5, 0, 0});
  finish(holder);
}

TEST_CASE_FIXTURE(outbox_fixture,
                  "a credit returned on a wire with nothing in flight is a programmer error") {
  auto holder = spawn(1);
  self->send(holder, numbered(0));
  CHECK(next_microbatch() == 0);
  release(holder);
  release(holder);
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "outbox");
        INFO(m.what);
        CHECK(m.what.find("none in flight") != std::string::npos);
      },
      caf::after(patience) >> [&] { FAIL_CHECK("no failure for a credit too many"); });
}
