// Training on a real GPU: 20 steps on cuda:0 against the same 20 steps on cpu:0, and data
// parallel over two GPUs against one, with the CUDA kernels (not the fake GPU of
// tests/actors/session/gpu_training_test.cpp, which checks the runtime's side on any machine).
// Part of troupe_cuda_tests; each case skips with a printed reason where there is no GPU
// (or, for two GPUs, only one).
//
// Tolerance: cuBLAS and OpenBLAS sum a GEMM's products in different orders, as the
// wirings of tests/actors/session/equivalence_test.cpp do; its argument (a few float ulps a
// gradient, ~2e-8 relative in the parameters after 20 Adam steps of lr 0.01) gives 1e-5
// with room, and a wrong kernel or a value read before the GPU wrote it moves them 1e-3.
#if TROUPE_WITH_CUDA

#include <doctest/doctest.h>

#include <string>

#include "runtime/core/gpu.hpp"
#include "tests/actors/equivalence_support.hpp"

using namespace troupe;

namespace {

/// How many GPUs there are; prints why a case is skipped when fewer than `needed`.
bool have_gpus(int needed) {
  std::string why;
  int count = 0;
  try {
    count = gpu::require_backend().device_count(why);
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (count >= needed)
    return true;
  MESSAGE("skipped: no CUDA device (" << count << " present, " << needed << " needed"
                                      << (why.empty() ? "" : "; " + why) << ")");
  return false;
}

std::vector<std::vector<std::vector<float>>> train(const std::string& parallel) {
  return test::train_twenty_steps(test::equivalence_config(parallel));
}

}  // namespace

TEST_CASE("20 training steps on cuda:0 give the parameters of the same steps on cpu:0") {
  if (!have_gpus(1))
    return;
  const auto cpu = train("[parallel]\ndevices = [\"cpu:0\"]\n");
  const auto gpu = train("[parallel]\ndevices = [\"cuda:0\"]\n");
  const auto difference = test::largest_difference(cpu, gpu);
  MESSAGE("cuda:0 against cpu:0 after 20 steps: largest relative difference " << difference);
  CHECK(difference <= 1e-5);
  const auto figures = gpu::memory(0);
  MESSAGE("cuda:0 caching allocator: " << figures.raw_allocations << " cudaMalloc calls, peak "
                                       << figures.peak << " bytes in tensors");
}

TEST_CASE("data parallel over two GPUs gives the parameters of one") {
  if (!have_gpus(2))
    return;
  const auto one = train("[parallel]\ndevices = [\"cuda:0\"]\n");
  const auto two =
      train("[parallel]\ndevices = [\"cuda:0\", \"cuda:1\"]\ndata = 2\naveraging = \"ring\"\n");
  const auto difference = test::largest_difference(one, two);
  MESSAGE("ring over cuda:0 and cuda:1 against cuda:0: largest relative difference " << difference);
  CHECK(difference <= 1e-5);
}

#endif  // TROUPE_WITH_CUDA
