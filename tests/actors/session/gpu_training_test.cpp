// Training on cuda:N devices, on the fake GPU of tests/runtime/core/fake_gpu.hpp: the CPU
// kernels run on the fake GPU's own thread, after the job that issued them has returned,
// as CUDA kernels run after their launch. So everything the runtime does for a GPU stream
// runs here (events reached when the GPU is done, the loss read back asynchronously,
// parameters made on the host and copied over, batches copied onto the device, copies
// between GPUs and back), and a host read of a value before the GPU wrote it gives other
// parameters than the CPU run. The CUDA kernels themselves run only where a GPU is
// (tests/kernels/cuda_kernels_test.cpp, scripts/gpu-check.sh).
//
// Tolerance: the fake GPU runs the same CPU kernels in the same order, so one device gives
// the CPU run's parameters bit for bit; the wirings differ from it only in summation order,
// as in equivalence_test.cpp, whose 1e-5 argument holds here too.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/jsonl.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "tests/runtime/core/fake_gpu.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::testing::fake_gpu_kernels;
using troupe::testing::fake_gpu_scope;

namespace {

// The equivalence tests' MLP (20 steps, Adam) on `parallel`'s devices.
std::string gpu_config(const std::string& parallel) { return test::equivalence_config(parallel); }

using test::largest_difference;

std::vector<std::vector<std::vector<float>>> train_on_devices(const std::string& text) {
  return test::train_twenty_steps(text);
}

}  // namespace

TEST_CASE("the fake GPU replaces every op's cuda kernel") {
  fake_gpu_kernels kernels;
  CHECK(kernels.size() ==
        test::declared_ops().size() - std::size(troupe::kernels::ops::cpu_only_ops));
}

TEST_CASE("training on cuda devices of a fake GPU gives the parameters of the CPU run") {
  const auto cpu = train_on_devices(gpu_config("[parallel]\ndevices = [\"cpu:0\"]\n"));
  fake_gpu_scope fake{2};
  fake_gpu_kernels kernels;
  // One GPU: bit for bit.
  CHECK(largest_difference(
            cpu, train_on_devices(gpu_config("[parallel]\ndevices = [\"cuda:0\"]\n"))) == 0);
  struct wiring {
    const char* name;
    const char* parallel;
  };
  for (const auto& w : std::vector<wiring>{
           {"micro-batched (M = 4)", "[parallel]\ndevices = [\"cuda:0\"]\nmicrobatches = 4\n"},
           {"data parallel, ring (R = 2)",
            "[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\ndata = 2\naveraging = \"ring\"\n"},
           {"data parallel, central (R = 2)",
            "[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\ndata = 2\naveraging = \"central\"\n"},
           {"data parallel, sharded optimizer (R = 2)",
            "[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\ndata = 2\naveraging = \"ring\"\n"
            "shard_optimizer = true\n"},
           {"pipeline 1F1B (P = 2, M = 4)",
            "[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\npipeline = 2\nmicrobatches = 4\n"
            "schedule = \"1f1b\"\n"},
           {"pipeline over a CPU and a GPU (P = 2, M = 2, GPipe)",
            "[parallel]\ndevices = [\"cpu:0\", \"cuda:0\"]\npipeline = 2\nmicrobatches = 2\n"
            "schedule = \"gpipe\"\n"},
       }) {
    const std::string name = w.name;  // doctest would print a const char* as a pointer
    const auto difference = largest_difference(cpu, train_on_devices(gpu_config(w.parallel)));
    INFO(name << ": relative difference " << difference);
    CHECK(difference <= 1e-5);
  }
}

TEST_CASE(
    "a GPU's memory: nothing allocated from it per step, its figures in the metrics and the "
    "trace") {
  // Two runs of 5 and 20 steps, each on a GPU of its own (a fresh caching allocator): the
  // longer run asks the device for hardly more blocks than the shorter one. Not exactly as
  // many: the host issues ahead of the GPU, as far as credits and prefetch let it, so how
  // many tensors of a size are alive at once depends on timing (37 and 42 blocks were seen),
  // while allocating each step's tensors anew would make the longer run's count 4 times the
  // shorter's.
  std::vector<int> host_allocations;
  auto allocations_after = [&host_allocations](int steps, const std::string& metrics,
                                               const std::string& trace) {
    fake_gpu_scope fake{1};
    fake_gpu_kernels kernels;
    auto text = gpu_config("[parallel]\ndevices = [\"cuda:0\"]\nmicrobatches = 2\n");
    text.replace(text.find("steps = 20"), 10, "steps = " + std::to_string(steps));
    auto options = test::quiet_options(metrics);
    options.trace_path = trace;
    test::run_ok(parse_config(text, "gpu.toml"), options);
    // Page-locked host memory (batches and labels on their way over, losses on their way
    // back) comes from a pool too.
    host_allocations.push_back(fake->host_allocations());
    return fake->raw_allocations();
  };
  const auto metrics = test::temp_file("troupe_test_gpu_metrics.jsonl");
  const auto trace = test::temp_file("troupe_test_gpu_trace.json");
  const int short_run = allocations_after(5, "/dev/null", "");
  const int long_run = allocations_after(20, metrics, trace);
  CHECK(short_run > 0);
  CHECK(long_run < 2 * short_run);
  REQUIRE(host_allocations.size() == 2);
  CHECK(host_allocations[0] > 0);
  CHECK(host_allocations[1] < 2 * host_allocations[0]);

  std::ifstream in{metrics};
  bool found = false;
  for (const auto& record : test::read_jsonl(in))
    if (record.value("event", "") == "done") {
      const auto& gpu = record.at("devices").at("cuda:0");
      CHECK(gpu.at("peak_bytes").get<std::int64_t>() > 0);
      CHECK(gpu.at("reserved_bytes").get<std::int64_t>() >=
            gpu.at("peak_bytes").get<std::int64_t>());
      CHECK(gpu.at("device_allocations").get<int>() == long_run);  // the same allocator's count
      found = true;
    }
  CHECK(found);

  const auto loaded = load_trace(trace);
  int samples = 0;
  for (const auto& [name, values] : loaded.counters)
    if (name.rfind("bytes cuda:0", 0) == 0 || name.rfind("peak bytes cuda:0", 0) == 0) {
      samples += static_cast<int>(values.size());
      for (const auto& v : values)
        CHECK(v.value > 0);
    }
  CHECK(samples == 2 * 20);  // both counters, once a step
  // The loss reports, sent from the GPU's callback thread, are traced as the loss's sends.
  int reports = 0;
  for (const auto& h : loaded.handlers)
    if (h.name == "report" && h.flow != 0 && loaded.sends.count(h.flow) != 0 &&
        loaded.sends.at(h.flow).from == h.from && h.from.rfind("loss", 0) == 0)
      ++reports;
  CHECK(reports == 20);
}

TEST_CASE(
    "a checkpoint written on a GPU resumes on a CPU, and one of a CPU on a GPU, bit for bit") {
  fake_gpu_scope fake{1};
  fake_gpu_kernels kernels;
  // Adam's moments and the parameters go through the checkpoint: copied on the GPU, read
  // back on the host, written; read, made on the host and copied to the GPU.
  auto run = [](const std::string& device, std::int64_t steps, const std::string& checkpoints,
                const std::string& resume) {
    return test::train_resumable(
        parse_config(gpu_config("[parallel]\ndevices = [\"" + device + "\"]\n"), "gpu.toml"), steps,
        checkpoints, resume);
  };
  const auto straight = run("cpu:0", 12, "", "");
  for (const auto& devices : {std::pair{"cuda:0", "cpu:0"}, std::pair{"cpu:0", "cuda:0"}}) {
    // Not bindings: INFO's lambda captures them (clang 14).
    const std::string first = devices.first, second = devices.second;
    INFO(first << " then " << second);
    test::temp_directory d{"troupe-gpu-resume"};
    run(first, 6, d.file("checkpoints"), "");
    const auto latest = latest_checkpoint(d.file("checkpoints"));
    REQUIRE(latest);
    CHECK(run(second, 12, "", latest->path) == straight);
  }
}

TEST_CASE("evaluation on a GPU reports the test loss and accuracy of the CPU run") {
  auto evaluated = [](const std::string& device) {
    auto text = gpu_config("[parallel]\ndevices = [\"" + device + "\"]\nmicrobatches = 2\n");
    text.replace(text.find("evaluate = false"), 16, "evaluate = true");
    return test::run_ok(parse_config(text, "gpu.toml"), test::quiet_options()).outcome;
  };
  const auto cpu = evaluated("cpu:0");
  fake_gpu_scope fake{1};
  fake_gpu_kernels kernels;
  const auto gpu = evaluated("cuda:0");
  CHECK(cpu.test_accuracy > 0);
  CHECK(gpu.test_accuracy == cpu.test_accuracy);
  CHECK(gpu.test_loss == cpu.test_loss);
  CHECK(gpu.last_loss == cpu.last_loss);
}

TEST_CASE("[run] tf32 asks each GPU's queue for TF32 GEMMs, and only then") {
  for (const bool tf32 : {false, true}) {
    fake_gpu_scope fake{2};
    fake_gpu_kernels kernels;
    auto text = gpu_config("[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\ndata = 2\n");
    text.replace(text.find("steps = 20"), 10,
                 std::string{"steps = 2\ntf32 = "} + (tf32 ? "true" : "false"));
    test::run_ok(parse_config(text, "gpu.toml"), test::quiet_options());
    CHECK(fake->queues_made() == 2);
    CHECK(fake->tf32_queues() == (tf32 ? 2 : 0));
  }
}

TEST_CASE("a cuda device the machine lacks is a config error at its place in the config") {
  fake_gpu_scope fake{1};
  auto config = parse_config(gpu_config("[parallel]\ndevices = [\"cuda:3\"]\n"), "gpu.toml");
  test::check_refused(config,
                      "device 'cuda:3': cuda:3 is not on this machine: fake GPU sees 1 GPU");
}
