// gpu_mlp_bench.cpp: the large MLP's training step on cuda:0 (784-4096-4096-10, batch 4096,
// Adam: config/mlp_large_cuda.toml's model, on synthetic data of the same shapes) against
// the floor its GEMMs set: the same eight GEMMs (three forward, five backward) timed alone
// with cuBLAS in the same run, in FP32 and in TF32. scripts/gpu-check.sh runs it on a lent
// GPU; without one it says so and exits 2.
//
// The step time is a difference of two runs, (T(long) - T(short)) / (steps between them),
// which leaves start-up and the first step's allocations out. Floor / step is the share of
// the step the GEMMs would take if nothing else ran: the goal is >= 0.70.
//
//   build/troupe_gpu_bench [--short 10] [--long 60]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "runtime/config/config.hpp"

using namespace troupe;

namespace {

constexpr int batch = 4096;
constexpr int widths[] = {784, 4096, 4096, 10};

// Median milliseconds of the step's eight GEMMs, run back to back, over `rounds`.
double gemm_floor_ms(bool tf32, int rounds) {
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  std::size_t largest = 0;
  for (int a : widths)
    for (int b : widths)
      largest =
          std::max<std::size_t>(largest, std::size_t(std::max(a, batch)) * std::max(b, batch));
  float *x = nullptr, *y = nullptr, *z = nullptr;
  CUDA_CHECK(cudaMalloc(&x, largest * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&y, largest * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&z, largest * sizeof(float)));
  CUDA_CHECK(cudaMemset(x, 0, largest * sizeof(float)));
  CUDA_CHECK(cudaMemset(y, 0, largest * sizeof(float)));
  const float one = 1, zero = 0;
  // Column-major calls of the row-major products (kernels/cuda/gemm.cu).
  auto gemm = [&](bool ta, bool tb, int m, int n, int k) {
    CUBLAS_CHECK(cublasSgemm(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             n, m, k, &one, y, tb ? k : n, x, ta ? m : k, &zero, z, n));
  };
  auto step = [&] {
    for (int l = 0; l < 3; ++l)  // forward: (B, in) x (out, in)^T
      gemm(false, true, batch, widths[l + 1], widths[l]);
    for (int l = 2; l >= 0; --l) {
      gemm(true, false, widths[l + 1], widths[l], batch);  // dW = dY^T X
      if (l > 0)
        gemm(false, false, batch, widths[l], widths[l + 1]);  // dX = dY W
    }
  };
  cudaEvent_t start, end;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&end));
  for (int i = 0; i < 3; ++i)
    step();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    CUDA_CHECK(cudaEventRecord(start));
    step();
    CUDA_CHECK(cudaEventRecord(end));
    CUDA_CHECK(cudaEventSynchronize(end));
    float took = 0;
    CUDA_CHECK(cudaEventElapsedTime(&took, start, end));
    ms.push_back(took);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
  cublasDestroy(handle);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string config_text(int steps, bool tf32) {
  std::string text = "[run]\nsteps = " + std::to_string(steps) + "\nseed = 1\nevaluate = false\n" +
                     "tf32 = " + (tf32 ? "true" : "false") + "\n" +
                     "\n[data]\nsource = \"synthetic\"\nbatch_size = " + std::to_string(batch) +
                     "\nsynthetic_train = " + std::to_string(4 * batch) +
                     "\nsynthetic_test = 1000\nsynthetic_features = 784\nsynthetic_classes = 10\n";
  for (int l = 1; l < 4; ++l) {
    text += "[[model.layers]]\ntype = \"linear\"\nout = " + std::to_string(widths[l]) + "\n";
    if (l < 3)
      text += "[[model.layers]]\ntype = \"relu\"\n";
  }
  return text + "[optimizer]\ntype = \"adam\"\nlr = 1e-3\n[parallel]\ndevices = [\"cuda:0\"]\n";
}

double train_seconds(int steps, bool tf32) {
  session_options options;
  options.quiet = true;
  options.metrics_path = "/dev/null";
  auto result = run_session(parse_config(config_text(steps, tf32), "mlp_large.toml"), options);
  if (result.outcome.exit_code != exit_code::ok) {
    std::fprintf(stderr, "the run failed: %s\n", result.outcome.failure.c_str());
    std::exit(1);
  }
  return result.outcome.train_seconds;
}

}  // namespace

int main(int argc, char** argv) {
  int short_steps = 10, long_steps = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--short") == 0)
      short_steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--long") == 0)
      long_steps = std::atoi(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 2;
  }
  std::printf("%-6s %14s %14s %12s\n", "math", "gemm floor ms", "troupe step ms", "floor/step");
  for (const bool tf32 : {false, true}) {
    const double floor = gemm_floor_ms(tf32, 20);
    const double step = (train_seconds(long_steps, tf32) - train_seconds(short_steps, tf32)) /
                        (long_steps - short_steps) * 1e3;
    std::printf("%-6s %14.3f %14.3f %12.2f\n", tf32 ? "tf32" : "fp32", floor, step, floor / step);
  }
  return 0;
}
