// actor_test_support.hpp: what the actor-level tests share: devices, an actor system with
// troupe's scheduler, a scoped actor that plays every neighbour of the actor under test
// (previous and next layer, loss, loader, optimizer, trainer), and receive helpers that fail
// a test instead of hanging it.
//
// The model is the averager fixture (tests/actors/averaging/grad_averager_test.cpp). Tests drive an
// actor only through its public settings, its spawn call and real messages
// (include/troupe/messages.hpp), never through its members, so that they keep testing the same
// protocol when the actors move onto another base class.
//
// Header-only and test-only. It does not hide what a test checks: each test receives and
// inspects the messages itself.
#pragma once

#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "actors/base/device_scheduler.hpp"
#include "actors/base/failures.hpp"
#include "troupe/device.hpp"
#include "troupe/messages.hpp"
#include "troupe/tensor.hpp"

namespace troupe::test {

/// How long a test waits for a message that must come: long enough for a loaded 2-core
/// machine, short enough that a lost message fails the test instead of the suite timeout.
constexpr std::chrono::seconds patience{30};

/// How long a test waits to conclude that a message does NOT come. A negative check can
/// only pass wrongly (the message would have come later), never fail wrongly, and every
/// message these tests wait out is sent within microseconds of its cause when the
/// behaviour under test is broken.
constexpr std::chrono::milliseconds quiet_window{300};

inline caf::actor_system_config& with_messages(caf::actor_system_config& config) {
  add_message_types(config);
  return config;
}

inline caf::actor_system_config& with_troupe(caf::actor_system_config& config) {
  with_messages(config).load<device_scheduler>();
  return config;
}

/// cpu:0 .. cpu:`cpus - 1`.
inline std::vector<device_id> cpu_ids(int cpus) {
  std::vector<device_id> ids;
  for (int i = 0; i < cpus; ++i)
    ids.push_back({device_type::cpu, i});
  return ids;
}

/// Sends `actor` a wiring whose trainer and one grads sink ("sink", an optimizer) are both
/// `self`, as a run wires an actor that hands gradients on to an optimizer.
inline void wire_self_as_sink(caf::scoped_actor& self, const caf::actor& actor) {
  auto me = caf::actor_cast<caf::actor>(self);
  wiring_msg wiring;
  wiring.trainer = me;
  wiring.outgoing.push_back(wire_end{"grads", "sink", "optimizer", me, -1, 0, "", 0});
  self->send(actor, std::move(wiring));
}

/// `cpus` CPU devices, an actor system with CAF's own scheduler and troupe's messages, and
/// a scoped actor (`self`) that plays the neighbours and the trainer: for the tests of
/// actors that post their work to device streams themselves (no placement, no error
/// handlers; actor_fixture below has both). The devices outlive the system.
struct plain_actor_fixture {
  device_set devices;
  caf::actor_system_config config;
  caf::actor_system system{with_messages(config)};
  caf::scoped_actor self{system};

  explicit plain_actor_fixture(int cpus = 2) : devices{cpu_ids(cpus)} {}
};

/// One end of a wire as the actor under test sees it.
inline wire_end wire(std::string kind, const caf::actor& peer, std::string peer_kind,
                     std::int64_t capacity = 0, std::int32_t peer_replica = -1,
                     std::string peer_device = "cpu:0") {
  wire_end end;
  end.kind = std::move(kind);
  end.peer_name = "test." + end.kind;
  end.peer_kind = std::move(peer_kind);
  end.peer = peer;
  end.peer_replica = peer_replica;
  end.peer_device = std::move(peer_device);
  end.capacity = capacity;
  return end;
}

/// A receive handler that fails the test with `why` when a `Message` arrives.
template <class Message>
auto unexpected(std::string why) {
  return [why](const Message& m) { FAIL_CHECK(why << ": got " << caf::deep_to_string(m)); };
}

/// cpu:0 and cpu:1, an actor system whose scheduler is the one runs use, and a scoped actor
/// (`self`) that stands in for every neighbour. A job that throws on a device stream is
/// reported to `self` as a failure_msg, as the session reports it to the trainer.
/// The devices outlive the system (placed actors run on their streams).
struct actor_fixture {
  device_set devices{{{device_type::cpu, 0}, {device_type::cpu, 1}}};
  caf::actor_system_config config;
  caf::actor_system system{with_troupe(config)};
  caf::scoped_actor self{system};

  actor_fixture() {
    for (auto& d : devices.all())
      d->work().set_error_handler([me = me(), name = d->id().to_string()](std::exception_ptr e) {
        caf::anon_send(me, failure_msg{name, describe_exception(e)});
      });
  }

  ~actor_fixture() {
    devices.synchronize();
    // The handlers hold a handle to `self`; drop it before the actor system goes.
    for (auto& d : devices.all())
      d->work().set_error_handler({});
  }

  caf::actor me() { return caf::actor_cast<caf::actor>(self); }

  device& cpu(int index) { return devices.at({device_type::cpu, index}); }

  /// Runs `actor`'s handlers on `on`'s stream thread, as a session places device actors.
  void place(const caf::actor& actor, device& on) {
    REQUIRE(device_scheduler::place(system, actor, on.work()));
  }

  /// A wiring whose trainer is `self`.
  wiring_msg wiring(std::vector<wire_end> outgoing, std::vector<wire_end> incoming) {
    wiring_msg w;
    w.outgoing = std::move(outgoing);
    w.incoming = std::move(incoming);
    w.trainer = me();
    return w;
  }

  /// The next `Message`; fails on a failure_msg (shown with its text) and on silence for
  /// `patience`. Other messages stay in the mailbox (expect_quiet reports them).
  template <class Message>
  Message next(const std::string& what) {
    Message out;
    bool got = false;
    self->receive(
        [&](Message& m) {
          out = std::move(m);
          got = true;
        },
        [&](failure_msg& m) {
          FAIL_CHECK("waiting for " << what << ": " << m.actor << ": " << m.what);
        },
        caf::after(patience) >>
            [&] {
              FAIL_CHECK("no " << what << " after " << patience.count() << " s");
              expect_quiet("left in the mailbox");
            });
    REQUIRE(got);
    return out;
  }

  /// Checks that no message of the protocol arrives within the quiet window (and
  /// consumes and names those that do). A blocking receive has no catch-all in CAF 0.17,
  /// hence the list of types.
  void expect_quiet(const std::string& why) {
    bool quiet = false;
    while (!quiet)
      self->receive(
          unexpected<activation_msg>(why), unexpected<gradient_msg>(why),
          unexpected<release_msg>(why), unexpected<labels_msg>(why),
          unexpected<weight_grads_msg>(why), unexpected<params_msg>(why),
          unexpected<loss_report_msg>(why), unexpected<failure_msg>(why),
          caf::after(quiet_window) >> [&] { quiet = true; });
  }

  /// Ends the actors (they would otherwise keep the actor system waiting on the way out).
  template <class... Actors>
  void finish(const Actors&... actors) {
    (self->send(actors, finish_atom::value), ...);
  }
};

/// The tag of micro-batch `microbatch` of step `step`, computed with parameters `version`.
inline micro_tag tag_of(std::int64_t step, std::int32_t microbatch, std::int64_t version,
                        phase stage = phase::train) {
  micro_tag t;
  t.step = step;
  t.microbatch = microbatch;
  t.version = version;
  t.stage = stage;
  return t;
}

/// Host values of a tensor (waits until it is written).
inline std::vector<float> values(const tensor& t) { return t.to_vector(); }

}  // namespace troupe::test
