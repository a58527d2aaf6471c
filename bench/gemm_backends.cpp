// gemm_backends.cpp: troupe's CPU gemm through OpenBLAS and through oneDNN, side by side, on
// the products troupe's layers run ([run] cpu_gemm; Note [CPU GEMM backend] in
// kernels/cpu/gemm.cpp).
//
// For each linear layer of a table of shapes (rows m = batch, in -> out), its three products: the forward y (m, out) = x (m, in) W^T, the input gradient dx (m, in) = dy W and
// the weight gradient dW (out, in) += dy^T x, each the median of 7 rounds of passes on one
// thread, the two libraries alternating round by round so both see the same machine noise.
// Prints each product's microseconds and OpenBLAS / oneDNN (> 1: oneDNN is faster). A
// convolution's per-image products are timed within its training by bench/cnn_vs_pytorch.py
// --cpu-gemm openblas,onednn.
//
//   OPENBLAS_CORETYPE=Haswell taskset -c 1 build/troupe_gemm_backends_bench
//
// With `floor SIZES BATCH STEPS [LIBRARY]` it times instead the GEMMs alone of an MLP's
// training steps (SIZES: "784,128,128,10"; each layer's forward, weight gradient, and input
// gradient but the first's) through one library (auto, openblas or onednn; auto as [run]
// cpu_gemm picks) and prints samples per second: bench/shapes.py's floor.
//
// Not a test; docs/benchmarks.md quotes it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/onednn_matmul.hpp"
#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

struct linear_shape {
  int rows, in, out;
  const char* where;
};

// The shipped configs' layers and bench/shapes.py's, at the batches they run.
const linear_shape shapes[] = {
    {32, 784, 256, "fashion_mlp layer 1, batch 32"},
    {128, 784, 256, "fashion_mlp layer 1, batch 128"},
    {128, 256, 256, "fashion_mlp layer 2, batch 128"},
    {128, 256, 10, "fashion_mlp layer 3, batch 128"},
    {512, 784, 256, "fashion_mlp layer 1, batch 512"},
    {64, 128, 128, "narrow MLP, batch 64"},
    {512, 128, 128, "narrow MLP, batch 512"},
    {512, 1024, 1024, "wide MLP, batch 512"},
    {2048, 64, 256, "char_lm MLP up (32 x 64 positions)"},
    {2048, 256, 64, "char_lm MLP down"},
};

std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::mt19937 engine{seed};
  std::uniform_real_distribution<float> uniform{-1.0f, 1.0f};
  std::vector<float> out(count);
  for (auto& v : out)
    v = uniform(engine);
  return out;
}

// Medians of 7 rounds, the two contexts alternating; microseconds per pass.
template <class Pass>
std::pair<double, double> median_us(Pass pass, const kernels::context& first,
                                    const kernels::context& second, double flops) {
  const int passes = std::max(3, static_cast<int>(2e8 / flops));
  std::vector<double> a, b;
  pass(first);  // warm: primitives, caches
  pass(second);
  for (int round = 0; round < 7; ++round) {
    for (int which = 0; which < 2; ++which) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < passes; ++i)
        pass(which == 0 ? first : second);
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      (which == 0 ? a : b).push_back(took.count() / passes);
    }
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return {a[3], b[3]};
}

kernels::cpu_gemm library_named(const std::string& name) {
  if (name == "auto")
    return kernels::cpu_gemm::automatic;
  if (name == "openblas")
    return kernels::cpu_gemm::openblas;
  if (name == "onednn")
    return kernels::cpu_gemm::onednn;
  std::fprintf(stderr, "gemm_backends_bench: unknown library '%s' (auto, openblas, onednn)\n",
               name.c_str());
  std::exit(2);
}

int positive(const char* text) {
  const int value = std::atoi(text);
  if (value <= 0) {
    std::fprintf(stderr, "gemm_backends_bench: expected a positive integer, got '%s'\n", text);
    std::exit(2);
  }
  return value;
}

// bench/shapes.py's floor: an MLP step's GEMMs alone, samples per second.
int floor_mode(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: troupe_gemm_backends_bench floor SIZES BATCH STEPS [LIBRARY]\n");
    return 2;
  }
  std::vector<int> sizes;
  std::stringstream list{argv[2]};
  for (std::string item; std::getline(list, item, ',');)
    sizes.push_back(positive(item.c_str()));
  const int batch = positive(argv[3]), steps = positive(argv[4]);
  kernels::context context;
  context.gemm = library_named(argc > 5 ? argv[5] : "auto");
  const auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  std::vector<std::vector<float>> xs, ws, dys, dxs, dws;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    const auto in = static_cast<std::size_t>(sizes[l]), out = static_cast<std::size_t>(sizes[l + 1]);
    xs.push_back(random_floats(batch * in, 1));
    ws.push_back(random_floats(out * in, 2));
    dys.push_back(random_floats(batch * out, 3));
    dxs.emplace_back(batch * in);
    dws.emplace_back(out * in);
  }
  std::vector<float> y(static_cast<std::size_t>(batch) * *std::max_element(sizes.begin(), sizes.end()));
  auto step = [&] {
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
      const int in = sizes[l], out = sizes[l + 1];
      gemm(context, false, true, batch, out, in, 1.0f, xs[l].data(), in, ws[l].data(), in, 0.0f,
           y.data(), out);
      if (l > 0)
        gemm(context, false, false, batch, in, out, 1.0f, dys[l].data(), out, ws[l].data(), in,
             0.0f, dxs[l].data(), in);
      gemm(context, true, false, out, in, batch, 1.0f, dys[l].data(), out, xs[l].data(), in, 0.0f,
           dws[l].data(), in);
    }
  };
  for (int i = 0; i < 3; ++i)
    step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i)
    step();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::printf("%.1f\n", static_cast<double>(steps) * batch / took.count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kernels::set_cpu_kernel_threads(1);  // one core, as a CPU device
  if (argc > 1 && std::string{argv[1]} == "floor")
    return floor_mode(argc, argv);
  const auto gemm = kernels::lookup<kernels::ops::gemm>(kernels::device_type::cpu);
  kernels::context openblas, onednn;
  openblas.gemm = kernels::cpu_gemm::openblas;
  onednn.gemm = kernels::cpu_gemm::onednn;
  std::printf("oneDNN's instruction set here: %s\n\n", kernels::cpu::onednn_isa_name());
  std::printf("%-58s %-8s %10s %10s %8s\n", "layer (rows, in -> out)", "product", "openblas us",
              "onednn us", "ratio");
  for (const auto& s : shapes) {
    const auto x = random_floats(static_cast<std::size_t>(s.rows) * s.in, 1);
    const auto w = random_floats(static_cast<std::size_t>(s.out) * s.in, 2);
    const auto dy = random_floats(static_cast<std::size_t>(s.rows) * s.out, 3);
    std::vector<float> y(static_cast<std::size_t>(s.rows) * s.out);
    std::vector<float> dx(static_cast<std::size_t>(s.rows) * s.in);
    std::vector<float> dw(static_cast<std::size_t>(s.out) * s.in);
    const double flops = 2.0 * s.rows * s.in * s.out;
    struct product {
      const char* name;
      std::pair<double, double> us;
    };
    const product products[] = {
        {"forward", median_us(
                        [&](const kernels::context& c) {
                          gemm(c, false, true, s.rows, s.out, s.in, 1.0f, x.data(), s.in,
                               w.data(), s.in, 0.0f, y.data(), s.out);
                        },
                        openblas, onednn, flops)},
        {"dx", median_us(
                   [&](const kernels::context& c) {
                     gemm(c, false, false, s.rows, s.in, s.out, 1.0f, dy.data(), s.out, w.data(),
                          s.in, 0.0f, dx.data(), s.in);
                   },
                   openblas, onednn, flops)},
        {"dW", median_us(
                   [&](const kernels::context& c) {
                     gemm(c, true, false, s.out, s.in, s.rows, 1.0f, dy.data(), s.out, x.data(),
                          s.in, 1.0f, dw.data(), s.in);
                   },
                   openblas, onednn, flops)},
    };
    for (const auto& p : products)
      std::printf("%-58s %-8s %10.1f %10.1f %8.2f\n", s.where, p.name, p.us.first, p.us.second,
                  p.us.first / p.us.second);
  }
  return 0;
}
