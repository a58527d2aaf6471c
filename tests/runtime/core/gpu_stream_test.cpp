// GPU streams, transfers and memory (runtime/core/gpu.hpp, Note [GPU streams]) on a fake
// GPU whose work waits behind a gate (tests/runtime/core/fake_gpu.hpp): what a cuda:N device
// does while its GPU has not yet run what a job issued. The CUDA backend itself runs only
// where a GPU is (scripts/gpu-check.sh); this is the runtime's side of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/stream_state.hpp"
#include "runtime/core/transfer.hpp"
#include "tests/runtime/core/fake_gpu.hpp"
#include "troupe/device.hpp"
#include "troupe/error.hpp"
#include "troupe/tensor.hpp"

using namespace troupe;
using troupe::testing::fake_gpu_scope;

namespace {

const device_id cuda0{device_type::cuda, 0};
const device_id cuda1{device_type::cuda, 1};
const device_id cpu0{device_type::cpu, 0};

// Waits up to 10 s for `condition`; false if it never held.
template <class Condition>
bool eventually(Condition condition) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("a GPU job's event is reached when the GPU has run what it issued, not when it returns") {
  fake_gpu_scope fake{1};
  {
    device_set devices{{cuda0}};
    auto& gpu = devices.at(cuda0);
    auto target = tensor::zeros({4}, dtype::f32, cuda0);
    const std::vector<float> values = {1, 2, 3, 4};
    fake->engine(0).set_open(false);  // the GPU holds back
    std::atomic<bool> issued{false};
    auto* queue = gpu_queue_of(gpu.work());
    REQUIRE(queue != nullptr);
    auto done = gpu.work().submit([&, target] {
      queue->copy(target.raw(), values.data(), 16);
      issued = true;
    });
    REQUIRE(eventually([&] { return issued.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(done.reached());  // the job returned; the GPU has not copied
    fake->engine(0).set_open(true);
    done.wait();
    target.set_ready(done);
    CHECK(target.to_vector() == values);
  }
}

TEST_CASE("what a GPU job captured lives until the GPU has run it") {
  fake_gpu_scope fake{1};
  device_set devices{{cuda0}};
  auto& work = devices.at(cuda0).work();
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  fake->engine(0).set_open(false);
  std::atomic<bool> ran{false};
  auto done = work.submit([held = std::move(held), &ran] { ran = *held == 7; });
  REQUIRE(eventually([&] { return ran.load(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(watch.expired());  // the job returned, but the GPU may still read its tensors
  fake->engine(0).set_open(true);
  done.wait();
  work.drain_posted();  // the stream's thread lets go of retired captures between tasks
  CHECK(watch.expired());
}

TEST_CASE(
    "a GPU stream waiting for a CPU stream that waits for the GPU's earlier job does not "
    "deadlock") {
  fake_gpu_scope fake{1};
  device_set devices{{cpu0, cuda0}};
  auto& gpu = devices.at(cuda0).work();
  auto& cpu = devices.at(cpu0).work();
  fake->engine(0).set_open(false);
  auto first = gpu.submit([] {});
  cpu.wait_for(first);  // the CPU waits for the GPU's first job ...
  std::atomic<int> order{0};
  int cpu_saw = -1;
  auto from_cpu = cpu.submit([&] { cpu_saw = order++; });
  gpu.wait_for(from_cpu);  // ... and the GPU's host thread for the CPU's job
  int gpu_saw = -1;
  auto last = gpu.submit([&] { gpu_saw = order++; });
  fake->engine(0).set_open(true);
  // Were the first job's event advanced by the GPU stream's own thread, that thread would
  // be waiting for from_cpu, which waits for it: neither would move.
  REQUIRE(eventually([&] { return last.reached(); }));
  CHECK(cpu_saw == 0);
  CHECK(gpu_saw == 1);
}

TEST_CASE("tensors go from the host onto a GPU, between GPUs and back through arrive") {
  fake_gpu_scope fake{2};
  device_set devices{{cpu0, cuda0, cuda1}};
  const std::vector<float> values = {0.5f, -1.0f, 3.0f, 8.0f, 13.0f, -21.0f};
  auto host = tensor::from(values, {2, 3}, cpu0);
  auto on0 = arrive(host, devices.at(cuda0), job_label{});
  auto on1 = arrive(on0, devices.at(cuda1), job_label{});
  auto back = arrive(on1, devices.at(cpu0), job_label{});
  CHECK(on0.device() == cuda0);
  CHECK(on1.device() == cuda1);
  CHECK(back.device() == cpu0);
  CHECK(back.shape() == shape_t{2, 3});
  CHECK(back.to_vector() == values);
  CHECK(on1.to_vector() == values);  // read off a GPU directly
  CHECK(on1.on_host().device() == cpu0);
  CHECK(tensor::from(values, {6}, cuda1).to_vector() == values);
  CHECK(tensor::zeros({3}, dtype::f32, cuda0).to_vector() == std::vector<float>(3, 0.0f));
}

TEST_CASE("GPU tensors' memory is cached: the same shapes again allocate nothing from the device") {
  fake_gpu_scope fake{1};
  reset_storage_peak(cuda0);
  int after_first = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<tensor> live;
    for (std::int64_t n : {100, 1000, 10000})
      live.push_back(tensor::empty({n}, dtype::f32, cuda0));
    if (step == 0)
      after_first = fake->raw_allocations();
  }
  CHECK(after_first == 3);
  CHECK(fake->raw_allocations() == 3);
  CHECK(storage_bytes_peak(cuda0) >= 11100 * 4);
  CHECK(gpu::memory(0).current == 0);
  CHECK(gpu::memory(0).reserved >= 11100 * 4);
}

TEST_CASE("page-locked host tensors come from the GPU backend's pool, reused") {
  fake_gpu_scope fake{1};
  for (int round = 0; round < 3; ++round) {
    auto t = tensor::empty_pinned({256}, dtype::i32);
    CHECK(t.device() == cpu0);
    std::fill(t.i32(), t.i32() + 256, round);
    CHECK(t.to_int_vector() == std::vector<std::int32_t>(256, round));
  }
  CHECK(fake->host_allocations() == 1);
  CHECK(gpu::memory(-1).raw_allocations == 1);
}

TEST_CASE("a cuda device the machine lacks is refused, naming what it has") {
  {
    fake_gpu_scope fake{1};
    CHECK_THROWS_WITH_AS(device_set({cuda1}),
                         "cuda:1 is not on this machine: fake GPU sees 1 GPU (cuda:0 fake 0)",
                         user_error);
  }
  {
    fake_gpu_scope fake{0};
    CHECK_THROWS_WITH_AS(device_set({cuda0}),
                         "cuda:0 is not on this machine: fake GPU sees no GPU (the fake has none)",
                         user_error);
  }
}

TEST_CASE("without a fake, page-locked host tensors work where no GPU is") {
  auto t = tensor::empty_pinned({1000});
  std::fill(t.f32(), t.f32() + 1000, 2.5f);
  CHECK(t.to_vector() == std::vector<float>(1000, 2.5f));
}

TEST_CASE(
    "without a fake, a cuda device on this machine is a real GPU or a user error saying why not") {
  try {
    device_set devices{{cuda0}};
    MESSAGE("this machine has a GPU: cuda:0 was made");
    CHECK(gpu_queue_of(devices.at(cuda0).work()) != nullptr);
  } catch (const user_error& e) {
    const std::string message = e.what();
    MESSAGE("no GPU here: " << message);
    const bool explained = message.rfind("cuda:0 is not on this machine: CUDA", 0) == 0 ||
                           message.find("without CUDA") != std::string::npos ||
                           message.find("did not load") != std::string::npos;
    CHECK(explained);
  }
}
