// CPU streams: order, events across streams, failures, and binding to cores.
#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/transfer.hpp"
#include "troupe/device.hpp"
#include "troupe/error.hpp"

using namespace troupe;

TEST_CASE("device names parse as cpu:N and cuda:N and nothing else") {
  device_id id;
  CHECK(device_id::parse("cpu:0", id));
  CHECK(id.to_string() == "cpu:0");
  CHECK(device_id::parse("cuda:3", id));
  CHECK(id.type == device_type::cuda);
  CHECK(id.index == 3);
  for (const char* bad : {"cpu", "cpu:", "gpu:0", "cpu:-1", "cpu:x", ":0", "cpu:1234567"})
    CHECK_FALSE(device_id::parse(bad, id));
}

TEST_CASE("a stream runs its jobs in submission order on one thread that is not the caller's") {
  stream s{device_id{}, 0};
  std::vector<int> order;
  std::thread::id worker;
  event last;
  for (int i = 0; i < 1000; ++i)
    last = s.submit([&order, &worker, i] {
      order.push_back(i);
      worker = std::this_thread::get_id();
    });
  last.wait();
  CHECK(last.reached());
  REQUIRE(order.size() == 1000);
  for (int i = 0; i < 1000; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == i);
  bool on_another_thread = worker != std::this_thread::get_id();
  CHECK(on_another_thread);
}

TEST_CASE("a stream that waits for another stream's event runs after that event") {
  stream producer{device_id{device_type::cpu, 0}, 0};
  stream consumer{device_id{device_type::cpu, 1}, 1};
  std::atomic<bool> gate{false};
  std::atomic<int> value{0};
  auto written = producer.submit([&] {
    while (!gate.load())
      std::this_thread::yield();
    value = 42;
  });
  consumer.wait_for(written);
  int seen = -1;
  auto read = consumer.submit([&] { seen = value.load(); });
  // The consumer cannot have run yet: the producer is held at the gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(read.reached());
  gate = true;
  read.wait();
  CHECK(seen == 42);
}

TEST_CASE("a failing job reports once, and later jobs are skipped but their events are reached") {
  stream s{device_id{}, -1};
  std::atomic<int> reports{0};
  std::string message;
  s.set_error_handler([&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      message = x.what();
    }
    ++reports;
  });
  bool ran_after = false;
  s.submit([] { throw std::runtime_error("boom"); });
  auto after = s.submit([&] { ran_after = true; });
  after.wait();
  CHECK(s.failed());
  CHECK(reports == 1);
  CHECK(message == "boom");
  CHECK_FALSE(ran_after);
}

TEST_CASE("a device set binds cpu:N to distinct cores when there are enough") {
  device_set devices{{device_id{device_type::cpu, 0}, device_id{device_type::cpu, 1}}};
  std::vector<int> cores(2, -1);
  for (int i = 0; i < 2; ++i)
    devices.at(device_id{device_type::cpu, i}).work().submit([&cores, i] {
      cores[static_cast<std::size_t>(i)] = sched_getcpu();
    });
  devices.synchronize();
  CHECK(cores[0] >= 0);
  if (allowed_core_count() >= 2)
    CHECK(cores[0] != cores[1]);
  else
    MESSAGE("only one core allowed: both devices share it");
  CHECK_THROWS_AS(devices.at(device_id{device_type::cpu, 7}), check_failure);
}

TEST_CASE("a CPU device's kernel context carries the run's CPU GEMM library") {
  for (auto library : {kernels::cpu_gemm::automatic, kernels::cpu_gemm::openblas,
                       kernels::cpu_gemm::onednn}) {
    device_options options;
    options.cpu_gemm = library;
    device_set devices{{device_id{device_type::cpu, 0}}, 0, options};
    CHECK(devices.at(device_id{device_type::cpu, 0}).context().gemm == library);
  }
}

TEST_CASE("a CPU device's jobs compute with denormal floats flushed to zero") {
  // Note [denormals flushed]: a denormal result is written as zero, a denormal input read
  // as zero; the calling thread keeps IEEE denormals.
  device_set devices{{device_id{device_type::cpu, 0}}};
  volatile float tiny = 1e-38f;  // a normal float; tiny / 4 is denormal
  volatile float smallest = std::numeric_limits<float>::denorm_min();
  float on_device = -1, denormal_in = -1;
  devices.at(device_id{device_type::cpu, 0}).work().submit([&] {
    on_device = tiny / 4;
    denormal_in = smallest * 2.0f;
  });
  devices.synchronize();
  CHECK(on_device == 0.0f);
  CHECK(denormal_in == 0.0f);
  CHECK(tiny / 4 > 0.0f);  // this thread: IEEE
}

TEST_CASE("posted tasks run on the stream's thread before queued jobs, outside the stream's order") {
  stream s{device_id{}, 0};
  std::atomic<bool> release{false};
  std::vector<std::string> order;  // written only on the stream's thread
  std::thread::id worker, poster;
  // The first job holds the thread until everything below is queued.
  s.submit([&] {
    worker = std::this_thread::get_id();
    while (!release.load())
      std::this_thread::yield();
  });
  auto second = s.submit([&] { order.push_back("job"); });
  s.post([&] {
    order.push_back("task 1");
    poster = std::this_thread::get_id();
  });
  s.post([&] { order.push_back("task 2"); });
  auto before = s.last();
  release = true;
  s.drain_posted();
  second.wait();
  CHECK(order == std::vector<std::string>{"task 1", "task 2", "job"});
  bool same_thread = poster == worker;
  CHECK(same_thread);
  // Tasks are no jobs: the stream's last event is still the second job's.
  CHECK(before.sequence == second.sequence);
  CHECK(s.completed() == 2);
}

TEST_CASE("a stream runs what was posted before it stops") {
  std::atomic<int> ran{0};
  {
    stream s{device_id{}, 0};
    for (int i = 0; i < 100; ++i)
      s.post([&] { ran.fetch_add(1); });
  }
  CHECK(ran.load() == 100);
}

namespace {

/// Records what a stream's error handler hears: how often, and the first message.
struct failure_log {
  std::atomic<int> reports{0};
  std::string first;  // written before reports is incremented

  stream::error_handler handler() {
    return [this](std::exception_ptr e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        if (reports.load() == 0)
          first = x.what();
      }
      ++reports;
    };
  }
};

}  // namespace

TEST_CASE("a posted task that throws fails the stream through its error handler") {
  failure_log log;
  stream s{device_id{}, -1};
  s.set_error_handler(log.handler());
  std::atomic<bool> later_task_ran{false};
  s.post([] { throw std::runtime_error("task fails on purpose"); });
  s.post([&] { later_task_ran = true; });
  s.drain_posted();
  CHECK(s.failed());
  CHECK(log.reports == 1);
  CHECK(log.first == "task fails on purpose");
  // Later tasks still run (actors must still hear "finish"); later jobs are skipped.
  CHECK(later_task_ran);
  bool job_ran = false;
  s.submit([&] { job_ran = true; }).wait();
  CHECK_FALSE(job_ran);
}

TEST_CASE("an event callback that throws on the stream's thread fails the stream, the others run") {
  failure_log log;
  stream s{device_id{}, -1};
  s.set_error_handler(log.handler());
  std::atomic<bool> gate{false};
  auto held = s.submit([&] {
    while (!gate.load())
      std::this_thread::yield();
  });
  std::atomic<int> ran{0};
  held.then([&] {
    ++ran;
    throw std::runtime_error("callback fails on purpose");
  });
  held.then([&] { ++ran; });
  s.notify_when_reached(held.sequence, [&] { ++ran; });
  gate = true;
  s.synchronize();
  s.drain_posted();  // the callbacks run right after the job, before the next task
  CHECK(ran == 3);
  CHECK(s.failed());
  CHECK(log.reports == 1);
  CHECK(log.first == "callback fails on purpose");
}

TEST_CASE("an event kept past its device_set is still answerable") {
  event kept;
  std::atomic<bool> job_ran{false};
  {
    device_set devices{{device_id{device_type::cpu, 0}}};
    auto& work = devices.at(device_id{device_type::cpu, 0}).work();
    kept = work.submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      job_ran = true;
    });
  }  // the device_set, its stream and its thread are gone; the event is not
  CHECK(job_ran);
  CHECK(kept.reached());
  kept.wait();  // returns at once
  bool called = false;
  kept.then([&] { called = true; });  // runs at once, on this thread
  CHECK(called);
  event copy = kept;
  CHECK(copy.reached());
}

TEST_CASE("a device_set uses one CPU kernel thread while it lives and restores the caller's") {
  const int original = kernels::cpu_kernel_threads();
  kernels::set_cpu_kernel_threads(3);  // a library user's setting
  REQUIRE(kernels::cpu_kernel_threads() == 3);
  {
    device_set first{{device_id{device_type::cpu, 0}}};
    CHECK(kernels::cpu_kernel_threads() == 1);
    {
      device_set second{{device_id{device_type::cpu, 1}}};
      CHECK(kernels::cpu_kernel_threads() == 1);
    }
    CHECK(kernels::cpu_kernel_threads() == 1);  // `first` still lives
  }
  CHECK(kernels::cpu_kernel_threads() == 3);
  SUBCASE("a value the user set meanwhile stands") {
    {
      device_set devices{{device_id{device_type::cpu, 0}}};
      kernels::set_cpu_kernel_threads(2);
    }
    CHECK(kernels::cpu_kernel_threads() == 2);
  }
  kernels::set_cpu_kernel_threads(original);
}

TEST_CASE("a moved event hands over its point of the stream") {
  stream s{device_id{}, -1};
  std::atomic<bool> gate{false};
  auto held = s.submit([&] {
    while (!gate.load())
      std::this_thread::yield();
  });
  const auto sequence = held.sequence;
  event moved_to = std::move(held);
  CHECK(moved_to.sequence == sequence);
  CHECK_FALSE(moved_to.reached());
  gate = true;
  moved_to.wait();
  CHECK(moved_to.reached());
}

namespace {

// Holds the stream's thread until `release` is set, so that what is submitted next queues.
void hold_until(stream& s, std::atomic<bool>& release) {
  s.submit([&release] {
    while (!release.load())
      std::this_thread::yield();
  });
}

}  // namespace

TEST_CASE("idle-lane jobs run only when no main-lane job is queued, in their own order") {
  stream s{device_id{}, 0};
  std::atomic<bool> release{false};
  std::vector<std::string> order;  // written only on the stream's thread
  hold_until(s, release);
  auto w1 = s.submit_when_idle([&] { order.push_back("idle 1"); });
  auto w2 = s.submit_when_idle([&] { order.push_back("idle 2"); });
  auto main = s.submit([&] { order.push_back("main"); });
  // Idle events are of their own lane: the first idle job is sequence 1 of it.
  CHECK(w1.sequence == 1);
  CHECK(w2.sequence == 2);
  CHECK(s.last().sequence == main.sequence);
  release = true;
  s.synchronize();  // waits for both lanes
  CHECK(w2.reached());
  CHECK(order == std::vector<std::string>{"main", "idle 1", "idle 2"});
}

TEST_CASE("hurrying an idle job moves it and the idle jobs before it to the main lane's tail") {
  stream s{device_id{}, 0};
  std::atomic<bool> release{false};
  std::vector<std::string> order;
  hold_until(s, release);
  auto w1 = s.submit_when_idle([&] { order.push_back("idle 1"); });
  auto w2 = s.submit_when_idle([&] { order.push_back("idle 2"); });
  auto w3 = s.submit_when_idle([&] { order.push_back("idle 3"); });
  s.submit([&] { order.push_back("main 1"); });
  s.hurry(w2);
  s.hurry(w1);        // already hurried: nothing moves
  s.hurry(s.last());  // a main-lane event: nothing moves
  s.submit([&] { order.push_back("main 2"); });
  release = true;
  w3.wait();
  CHECK(order == std::vector<std::string>{"main 1", "idle 1", "idle 2", "main 2", "idle 3"});
}

TEST_CASE("a stream that waits for its own idle event hurries it instead of waiting for itself") {
  stream s{device_id{}, 0};
  std::atomic<bool> release{false};
  std::vector<std::string> order;
  hold_until(s, release);
  auto w = s.submit_when_idle([&] { order.push_back("idle"); });
  s.wait_for(w);
  auto after = s.submit([&] { order.push_back("after"); });
  release = true;
  after.wait();  // would hang if the worker blocked on its own idle lane
  CHECK(order == std::vector<std::string>{"idle", "after"});
  CHECK(w.reached());
}

TEST_CASE("a tensor an idle-lane job writes is written before the jobs of its arrival") {
  // Consumers on the producer's own device trust stream order (include/troupe/inputs.hpp);
  // an idle job is not in it, so arrive() hurries it. Without that, the consumer below
  // read the tensor before the idle job wrote it, which ran only once the lane emptied.
  device_set devices{{device_id{device_type::cpu, 0}}};
  auto& here = devices.at({device_type::cpu, 0});
  std::atomic<bool> release{false};
  hold_until(here.work(), release);
  auto x = tensor::zeros({4}, dtype::f32, here.id());
  here.work().wait_for(x.ready());
  x.set_ready(here.work().submit_when_idle([x] {
    for (int i = 0; i < 4; ++i)
      x.f32()[i] = 7.0f;
  }));
  auto seen = arrive(x, here);
  CHECK(seen.raw() == x.raw());  // the same tensor: nothing is copied on one device
  float sum = -1;
  auto read = here.work().submit([seen, &sum] {
    sum = 0;
    for (int i = 0; i < 4; ++i)
      sum += seen.f32()[i];
  });
  release = true;
  read.wait();
  CHECK(sum == 28.0f);
}

TEST_CASE("a callback on an idle event runs when that idle job has run") {
  stream s{device_id{}, 0};
  std::atomic<bool> ran{false}, called{false};
  auto w = s.submit_when_idle([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ran = true;
  });
  w.then([&] { called = ran.load(); });
  s.synchronize();
  s.drain_posted();
  CHECK(called.load());
}

TEST_CASE("a stream runs its idle lane before it stops") {
  std::atomic<int> ran{0};
  {
    stream s{device_id{}, 0};
    for (int i = 0; i < 100; ++i)
      s.submit_when_idle([&] { ran.fetch_add(1); });
  }
  CHECK(ran.load() == 100);
}
