// The device scheduler: placed actors handle their messages on their device's stream
// thread, others on the host thread; nothing is lost when actors bounce messages between
// devices, when an actor must be resumed again (max-throughput 1), or at shutdown.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "actors/base/device_scheduler.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "troupe/messages.hpp"

using namespace troupe;

namespace {

using test::patience;

std::uint64_t this_thread_key() {
  return std::hash<std::thread::id>{}(std::this_thread::get_id());
}

/// The thread a stream runs its jobs on.
std::uint64_t thread_key_of(stream& work) {
  std::uint64_t key = 0;
  work.submit([&] { key = this_thread_key(); }).wait();
  return key;
}

/// Answers get_atom with the key of the thread that handled it; on (int n) passes n - 1
/// to `peer` (if set) until it reaches 0, then tells `done`.
struct probe_state {
  caf::actor peer;
  caf::actor done;
  std::vector<std::uint64_t> threads;  // the thread of every bounce handled
};

caf::behavior probe(caf::stateful_actor<probe_state>* self) {
  return {
      [](caf::get_atom) { return this_thread_key(); },
      [self](caf::actor peer, caf::actor done) {
        self->state.peer = std::move(peer);
        self->state.done = std::move(done);
      },
      [self](int n) {
        self->state.threads.push_back(this_thread_key());
        if (n == 0)
          self->send(self->state.done, caf::ok_atom::value);
        else
          self->send(self->state.peer, n - 1);
      },
      [self](caf::put_atom) {
        // Every bounce this actor handled ran on one thread: reply with it, or 0.
        std::uint64_t first = self->state.threads.empty() ? 0 : self->state.threads.front();
        for (auto t : self->state.threads)
          if (t != first)
            return std::uint64_t{0};
        return first;
      },
  };
}

std::uint64_t ask_thread(caf::scoped_actor& self, const caf::actor& a, caf::atom_value what) {
  std::uint64_t key = 1;
  auto reply = [&](std::uint64_t k) { key = k; };
  auto failed = [&](caf::error&) { FAIL("no answer"); };
  if (what == caf::get_atom::value)
    self->request(a, patience, caf::get_atom::value).receive(reply, failed);
  else
    self->request(a, patience, caf::put_atom::value).receive(reply, failed);
  return key;
}

}  // namespace

TEST_CASE("placed actors handle messages on their device's thread, the rest on the host") {
  device_set devices{{device_id{device_type::cpu, 0}, device_id{device_type::cpu, 1}}};
  auto& cpu0 = devices.at(device_id{device_type::cpu, 0}).work();
  auto& cpu1 = devices.at(device_id{device_type::cpu, 1}).work();
  auto thread0 = thread_key_of(cpu0);
  auto thread1 = thread_key_of(cpu1);
  {
    caf::actor_system_config config;
    config.load<device_scheduler>();
    caf::actor_system system{config};
    // lazy_init: not scheduled before its first message, so placed before it runs at all.
    auto a = system.spawn<caf::lazy_init>(probe);
    auto b = system.spawn<caf::lazy_init>(probe);
    auto host = system.spawn(probe);
    CHECK(device_scheduler::place(system, a, cpu0));
    CHECK(device_scheduler::place(system, b, cpu1));
    caf::scoped_actor self{system};
    CHECK(ask_thread(self, a, caf::get_atom::value) == thread0);
    CHECK(ask_thread(self, b, caf::get_atom::value) == thread1);
    auto on_host = ask_thread(self, host, caf::get_atom::value);
    CHECK(on_host != thread0);
    CHECK(on_host != thread1);
    CHECK(on_host != this_thread_key());

    // 2000 bounces between the two devices: every one arrives, each on its device.
    self->send(a, caf::actor{b}, caf::actor{self});
    self->send(b, caf::actor{a}, caf::actor{self});
    self->send(a, 2000);
    bool finished = false;
    self->receive([&](caf::ok_atom) { finished = true; },
                  caf::after(patience) >> [] {});
    CHECK(finished);
    CHECK(ask_thread(self, a, caf::put_atom::value) == thread0);
    CHECK(ask_thread(self, b, caf::put_atom::value) == thread1);
    for (const auto& x : {a, b, host})
      self->send_exit(x, caf::exit_reason::user_shutdown);
  }
  // The system has shut down; the streams still work.
  CHECK(thread_key_of(cpu0) == thread0);
}

TEST_CASE("an actor resumed after every message (max-throughput 1) still gets them all, in order") {
  device_set devices{{device_id{device_type::cpu, 0}}};
  auto& cpu0 = devices.at(device_id{device_type::cpu, 0}).work();
  std::vector<int> seen;  // written on cpu:0's thread only, read after the system is gone
  {
    caf::actor_system_config config;
    config.load<device_scheduler>();
    config.set("scheduler.max-throughput", 1);
    caf::actor_system system{config};
    auto a = system.spawn<caf::lazy_init>([&seen](caf::event_based_actor* self) -> caf::behavior {
      return {
          [&seen](int i) { seen.push_back(i); },
          [self](caf::ok_atom) { self->quit(); },
      };
    });
    REQUIRE(device_scheduler::place(system, a, cpu0));
    for (int i = 0; i < 500; ++i)
      caf::anon_send(a, i);
    caf::anon_send(a, caf::ok_atom::value);
  }
  REQUIRE(seen.size() == 500);
  for (int i = 0; i < 500; ++i)
    CHECK(seen[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("placing an actor needs the device scheduler") {
  device_set devices{{device_id{device_type::cpu, 0}}};
  caf::actor_system_config config;
  caf::actor_system system{config};
  auto a = system.spawn(probe);
  CHECK_FALSE(device_scheduler::place(system, a, devices.all().front()->work()));
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}
