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
#include <string>

#include "actors/session.hpp"
#include "actors/verify.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "tests/runtime/core/fake_gpu.hpp"

using namespace troupe;
using troupe::testing::fake_gpu_kernels;
using troupe::testing::fake_gpu_scope;

namespace {

std::string gpu_config(const std::string& parallel) {
  return R"(
[run]
steps = 20
seed = 11
evaluate = false
)" + test::data_section({24, 480, 10, 20, 5}) +
         test::linear(16) + test::layer("relu") + test::linear(12) + test::layer("tanh") +
         test::linear(5) + R"(
[optimizer]
type = "adam"
lr = 0.01

)" + parallel;
}

std::vector<std::vector<std::vector<float>>> train(const std::string& text) {
  auto config = parse_config(text, "gpu.toml");
  auto options = test::quiet_options();
  options.keep_parameters = true;
  auto result = test::run_ok(config, options);
  REQUIRE(result.outcome.steps == 20);
  return result.parameters;
}

double largest_difference(const std::vector<std::vector<std::vector<float>>>& a,
                          const std::vector<std::vector<std::vector<float>>>& b) {
  double difference = 0;
  for (const auto& d : compare_parameters(a, b))
    difference = std::max(difference, d.relative);
  return difference;
}

}  // namespace

TEST_CASE("the fake GPU replaces every op's cuda kernel") {
  fake_gpu_kernels kernels;
  CHECK(kernels.size() == test::declared_ops().size());
}

TEST_CASE("training on cuda devices of a fake GPU gives the parameters of the CPU run") {
  const auto cpu = train(gpu_config("[parallel]\ndevices = [\"cpu:0\"]\n"));
  fake_gpu_scope fake{2};
  fake_gpu_kernels kernels;
  // One GPU: bit for bit.
  CHECK(largest_difference(cpu, train(gpu_config("[parallel]\ndevices = [\"cuda:0\"]\n"))) == 0);
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
    const auto difference = largest_difference(cpu, train(gpu_config(w.parallel)));
    INFO(name << ": relative difference " << difference);
    CHECK(difference <= 1e-5);
  }
}

TEST_CASE("a cuda device the machine lacks is a config error at its place in the config") {
  fake_gpu_scope fake{1};
  auto config = parse_config(gpu_config("[parallel]\ndevices = [\"cuda:3\"]\n"), "gpu.toml");
  test::check_refused(config,
                      "device 'cuda:3': cuda:3 is not on this machine: fake GPU sees 1 GPU");
}
