// split_gemm_bench.cpp: what cutting a linear layer's GEMMs into parts costs on one core.
//
// Starting the ring on parts of the first layer's weight gradient before its backward ends
// (and the next forward on the parts already updated) needs that layer's two GEMMs cut by
// output rows into K parts, one job each: the forward y[:, part] = x W[part, :]^T and the
// weight gradient dW[part, :] = dy[:, part]^T x. This times both, whole (K = 1) and cut
// into K = 2, 4, 8 parts, with troupe's CPU gemm kernel (OpenBLAS, one thread) at the
// shipped MLP's first layer (784 -> 256) and a replica's rows of DP2 at batch 128 (64):
// the best of 7 rounds of 200 passes each, and each K's time as a ratio of K = 1's.
//
//   build/troupe_split_gemm_bench [rows [in [out]]]      (defaults: 64 784 256)
//
// Not a test; docs/benchmarks.md's DP2 analysis quotes it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

int argument(int argc, char** argv, int index, int fallback) {
  if (argc <= index)
    return fallback;
  const int value = std::atoi(argv[index]);
  if (value <= 0) {
    std::fprintf(stderr, "split_gemm_bench: argument %d must be a positive integer, got '%s'\n",
                 index, argv[index]);
    std::exit(2);
  }
  return value;
}

template <class Pass>
double best_us(Pass pass) {
  constexpr int rounds = 7;
  constexpr int passes = 200;
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < passes; ++i)
      pass();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / passes);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argument(argc, argv, 1, 64);
  const int in = argument(argc, argv, 2, 784);
  const int out = argument(argc, argv, 3, 256);
  kernels::set_cpu_kernel_threads(1);
  const auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  const kernels::context context;

  std::mt19937 random{1};
  std::uniform_real_distribution<float> uniform{-1.0f, 1.0f};
  auto filled = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v)
      x = uniform(random);
    return v;
  };
  const auto x = filled(static_cast<std::size_t>(rows) * in);
  const auto w = filled(static_cast<std::size_t>(out) * in);
  const auto dy = filled(static_cast<std::size_t>(rows) * out);
  std::vector<float> y(static_cast<std::size_t>(rows) * out);
  std::vector<float> dw(static_cast<std::size_t>(out) * in);

  std::printf("a linear layer %d -> %d, %d rows, one core: time of its GEMMs cut into K parts\n",
              in, out, rows);
  std::printf("%3s %14s %8s %18s %8s\n", "K", "forward us", "ratio", "weight grad us", "ratio");
  double forward_whole = 0, backward_whole = 0;
  for (int parts : {1, 2, 4, 8}) {
    if (out % parts != 0)
      continue;
    const int part = out / parts;
    const double forward = best_us([&] {
      for (int k = 0; k < parts; ++k)
        gemm(context, false, true, rows, part, in, 1.0f, x.data(), in,
             w.data() + static_cast<std::size_t>(k) * part * in, in, 0.0f, y.data() + k * part,
             out);
    });
    const double backward = best_us([&] {
      for (int k = 0; k < parts; ++k)
        gemm(context, true, false, part, in, rows, 1.0f, dy.data() + k * part, out, x.data(), in,
             0.0f, dw.data() + static_cast<std::size_t>(k) * part * in, in);
    });
    if (parts == 1) {
      forward_whole = forward;
      backward_whole = backward;
    }
    std::printf("%3d %14.1f %7.2fx %18.1f %7.2fx\n", parts, forward, forward / forward_whole,
                backward, backward / backward_whole);
  }
  return 0;
}
