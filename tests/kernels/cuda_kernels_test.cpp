// cuda_kernels_test.cpp: every CUDA kernel of include/troupe/ops.hpp against the CPU kernel of
// the same op, on the same random inputs.
//
// The CPU kernels are the reference here (their own tests hold them to naive double
// references); this file checks that the GPU agrees with them up to float rounding, each
// tolerance justified where it is set. Every test case starts by asking for a device and
// returns with a "skipped: no CUDA device (...)" message where there is none, so the suite
// passes on a CPU-only machine that has the CUDA toolkit. Performance is not tested here.
// Without TROUPE_WITH_CUDA this file compiles to nothing.
#if TROUPE_WITH_CUDA

#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_support.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"
#include "window_reference.hpp"

namespace troupe::kernels {
namespace {

constexpr double eps = FLT_EPSILON;  // 2^-23, twice the unit roundoff u of float

// ---- devices, streams, buffers (RAII) ----

/// True if a CUDA device is usable; otherwise reports why the test case is skipped.
bool cuda_device_present() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // do not leave the error for a later CUDA_CHECK to find
    // std::string: doctest would print a const char* as a pointer.
    MESSAGE("skipped: no CUDA device (" << std::string{cudaGetErrorString(status)} << ")");
    return false;
  }
  if (count == 0) {
    MESSAGE("skipped: no CUDA device (cudaGetDeviceCount found none)");
    return false;
  }
  return true;
}

#define TROUPE_SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                               \
    if (!cuda_device_present())                                                      \
      return;                                                                        \
  } while (false)

class cuda_stream {
 public:
  cuda_stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~cuda_stream() { cudaStreamDestroy(stream_); }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class cublas_handle {
 public:
  cublas_handle() { CUBLAS_CHECK(cublasCreate(&handle_)); }
  ~cublas_handle() { cublasDestroy(handle_); }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t size) : size_(size) {
    CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(size, 1) * sizeof(T)));
  }
  ~device_buffer() { cudaFree(data_); }
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  device_buffer& operator=(device_buffer&&) = delete;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  T* get() const { return static_cast<T*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_;
};

/// A stream, a cuBLAS handle and the kernel context that names them. Copies go through
/// the same (non-blocking) stream as the kernels, so every transfer is ordered with them.
class cuda_session {
 public:
  cuda_session() {
    ctx_.stream = stream_.get();
    ctx_.blas = blas_.get();
  }
  const context& ctx() const { return ctx_; }

  template <class T>
  device_buffer<T> upload(const std::vector<T>& host) const {
    device_buffer<T> buffer{host.size()};
    CUDA_CHECK(cudaMemcpyAsync(buffer.get(), host.data(), host.size() * sizeof(T),
                               cudaMemcpyHostToDevice, stream_.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    return buffer;
  }

  template <class T>
  std::vector<T> download(const device_buffer<T>& buffer) const {
    std::vector<T> host(buffer.size());
    CUDA_CHECK(cudaMemcpyAsync(host.data(), buffer.get(), host.size() * sizeof(T),
                               cudaMemcpyDeviceToHost, stream_.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    return host;
  }

 private:
  cuda_stream stream_;
  cublas_handle blas_;
  context ctx_;
};

// ---- inputs and comparisons ----

std::vector<float> random_floats(std::size_t n, float low, float high, std::uint32_t seed) {
  std::mt19937 engine{seed};
  std::uniform_real_distribution<float> distribution{low, high};
  std::vector<float> values(n);
  for (auto& value : values)
    value = distribution(engine);
  return values;
}

std::vector<std::int32_t> random_labels(std::size_t n, int classes, std::uint32_t seed) {
  std::mt19937 engine{seed};
  std::uniform_int_distribution<std::int32_t> distribution{0, classes - 1};
  std::vector<std::int32_t> labels(n);
  for (auto& label : labels)
    label = distribution(engine);
  return labels;
}

/// Checks |cuda[i] - cpu[i]| <= tolerance[i] for all i (NaN only matches NaN) and reports
/// the count of mismatches and the worst one, rather than one assertion per element.
void check_close(const std::string& what, const std::vector<float>& cuda,
                 const std::vector<float>& cpu, const std::vector<double>& tolerance) {
  REQUIRE(cuda.size() == cpu.size());
  REQUIRE(tolerance.size() == cpu.size());
  std::size_t mismatches = 0;
  std::size_t worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(cuda[i]) && std::isnan(cpu[i]))
      continue;
    const double difference = std::fabs(static_cast<double>(cuda[i]) - cpu[i]);
    const double excess = std::isnan(difference) ? INFINITY : difference - tolerance[i];
    if (excess > 0.0) {
      ++mismatches;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  CHECK_MESSAGE(mismatches == 0, what << ": " << mismatches << " of " << cpu.size()
                                      << " elements differ; worst at " << worst << ": cuda "
                                      << cuda[worst] << " vs cpu " << cpu[worst]
                                      << " (tolerance " << tolerance[worst] << ")");
}

/// check_close with tolerance absolute + relative * |cpu[i]|.
void check_close(const std::string& what, const std::vector<float>& cuda,
                 const std::vector<float>& cpu, double absolute, double relative) {
  std::vector<double> tolerance(cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i)
    tolerance[i] = absolute + relative * std::fabs(static_cast<double>(cpu[i]));
  check_close(what, cuda, cpu, tolerance);
}

// ---- the ops, one test case each (or one per family) ----

TEST_CASE("every op of include/troupe/ops.hpp has a CUDA kernel registered") {
  // Needs no device: registration only stores pointers. The ops are the ones ops.hpp
  // declares (test::declared_ops), so a new op is checked here without editing this test.
  const auto ops = test::declared_ops();
  REQUIRE(!ops.empty());
  for (const auto& op : ops) {
    CAPTURE(op);
    // A CPU-only op has none (ops_coverage_test.cpp checks that it has none).
    CHECK(has_kernel(op.c_str(), device_type::cuda) != test::is_cpu_only_op(op));
  }
}

TEST_CASE("CUDA gemm matches the CPU gemm for every transpose, leading dimension and beta") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const auto cpu_gemm = lookup<ops::gemm>(device_type::cpu);
  const auto cuda_gemm = lookup<ops::gemm>(device_type::cuda);
  struct shape {
    int m, n, k;
  };
  std::uint32_t seed = 1;
  for (const shape s : {shape{33, 17, 45}, shape{64, 10, 784}, shape{1, 70, 5}}) {
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          CAPTURE(s.m);
          CAPTURE(s.n);
          CAPTURE(s.k);
          CAPTURE(transpose_a);
          CAPTURE(transpose_b);
          CAPTURE(beta);
          const float alpha = 0.75f;
          // Stored shapes, each row padded so that a kernel ignoring ld would be caught.
          const int a_rows = transpose_a ? s.k : s.m, a_cols = transpose_a ? s.m : s.k;
          const int b_rows = transpose_b ? s.n : s.k, b_cols = transpose_b ? s.k : s.n;
          const int lda = a_cols + 3, ldb = b_cols + 2, ldc = s.n + 1;
          const auto a = random_floats(std::size_t(a_rows) * lda, -1.0f, 1.0f, seed++);
          const auto b = random_floats(std::size_t(b_rows) * ldb, -1.0f, 1.0f, seed++);
          const auto c = random_floats(std::size_t(s.m) * ldc, -1.0f, 1.0f, seed++);

          auto cpu_c = c;
          cpu_gemm(context{}, transpose_a, transpose_b, s.m, s.n, s.k, alpha, a.data(), lda,
                   b.data(), ldb, beta, cpu_c.data(), ldc);
          const auto device_a = session.upload(a);
          const auto device_b = session.upload(b);
          const auto device_c = session.upload(c);
          cuda_gemm(session.ctx(), transpose_a, transpose_b, s.m, s.n, s.k, alpha,
                    device_a.get(), lda, device_b.get(), ldb, beta, device_c.get(), ldc);
          const auto cuda_c = session.download(device_c);

          // Any float dot product of length k, in any order and with or without FMA (the
          // CPU's blocked OpenBLAS, cuBLAS's tiles or split-k), is within (k+1) u of the
          // exact value times sum |a_il| |b_lj| (Higham, Accuracy and Stability, 3.1); two
          // of them differ by at most (k+1) eps times that, and the alpha/beta scaling adds
          // one more rounding. Padding between rows must stay untouched on both: tolerance
          // 0 there is implied, as both leave the same bits.
          std::vector<double> tolerance(c.size(), 0.0);
          for (int i = 0; i < s.m; ++i) {
            for (int j = 0; j < s.n; ++j) {
              double magnitude = 0.0;
              for (int l = 0; l < s.k; ++l) {
                const double a_il = transpose_a ? a[std::size_t(l) * lda + i]
                                                : a[std::size_t(i) * lda + l];
                const double b_lj = transpose_b ? b[std::size_t(j) * ldb + l]
                                                : b[std::size_t(l) * ldb + j];
                magnitude += std::fabs(a_il * b_lj);
              }
              const std::size_t at = std::size_t(i) * ldc + j;
              tolerance[at] = (s.k + 2) * eps *
                              (std::fabs(alpha) * magnitude + std::fabs(beta * c[at]));
            }
          }
          check_close("gemm", cuda_c, cpu_c, tolerance);
        }
      }
    }
  }
}

TEST_CASE("CUDA to_bf16, from_bf16, add_to_bf16 and gemm_bf16 match the CPU kernels") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  // Rounding is bit arithmetic on both: the same bits, specials included.
  auto x = random_floats(4096, -1e3f, 1e3f, 7);
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = std::numeric_limits<float>::quiet_NaN();
  x[2] = 1e-40f;  // a denormal, kept
  x[3] = 3.3895314e38f;  // bf16's largest finite and beyond: rounds to infinity
  std::vector<std::uint16_t> cpu_bits(x.size());
  lookup<ops::to_bf16>(device_type::cpu)(context{}, std::int64_t(x.size()), x.data(),
                                          cpu_bits.data());
  const auto device_x = session.upload(x);
  const auto device_bits = session.upload(std::vector<std::uint16_t>(x.size()));
  lookup<ops::to_bf16>(device_type::cuda)(session.ctx(), std::int64_t(x.size()), device_x.get(),
                                           device_bits.get());
  CHECK(session.download(device_bits) == cpu_bits);
  const auto device_wide = session.upload(std::vector<float>(x.size()));
  lookup<ops::from_bf16>(device_type::cuda)(session.ctx(), std::int64_t(x.size()),
                                             device_bits.get(), device_wide.get());
  std::vector<float> cpu_wide(x.size());
  lookup<ops::from_bf16>(device_type::cpu)(context{}, std::int64_t(x.size()), cpu_bits.data(),
                                            cpu_wide.data());
  const auto cuda_wide = session.download(device_wide);
  CHECK(std::memcmp(cuda_wide.data(), cpu_wide.data(), cpu_wide.size() * sizeof(float)) == 0);

  // add_to_bf16: a float sum and the same rounding on both, kept in y or not. Without the
  // NaN: a NaN sum's payload is the hardware's, and both keep it a NaN (bf16_test.cpp).
  const auto y = random_floats(x.size(), -1e3f, 1e3f, 11);
  auto addends = cpu_bits;
  addends[1] = 0x3F80u;  // 1.0 where x held the NaN
  const auto device_addends = session.upload(addends);
  for (const bool keep : {false, true}) {
    CAPTURE(keep);
    auto cpu_y = y;
    std::vector<std::uint16_t> cpu_z(x.size());
    lookup<ops::add_to_bf16>(device_type::cpu)(context{}, std::int64_t(x.size()), addends.data(),
                                               cpu_y.data(), cpu_z.data(), keep);
    const auto device_y = session.upload(y);
    const auto device_z = session.upload(std::vector<std::uint16_t>(x.size()));
    lookup<ops::add_to_bf16>(device_type::cuda)(session.ctx(), std::int64_t(x.size()),
                                                device_addends.get(), device_y.get(),
                                                device_z.get(), keep);
    CHECK(session.download(device_z) == cpu_z);
    const auto cuda_y = session.download(device_y);
    CHECK(std::memcmp(cuda_y.data(), cpu_y.data(), cpu_y.size() * sizeof(float)) == 0);
  }

  // The products of two bf16 values are exact in FP32 (8 + 8 significant bits): the two
  // backends differ by their order of summation only, (k + 2) eps sum |a| |b| as for gemm.
  const int m = 37, n = 19, k = 200;
  std::vector<std::uint16_t> a(std::size_t(m) * k), b(std::size_t(k) * n);
  const auto a_values = random_floats(a.size(), -1.0f, 1.0f, 8);
  const auto b_values = random_floats(b.size(), -1.0f, 1.0f, 9);
  lookup<ops::to_bf16>(device_type::cpu)(context{}, std::int64_t(a.size()), a_values.data(),
                                          a.data());
  lookup<ops::to_bf16>(device_type::cpu)(context{}, std::int64_t(b.size()), b_values.data(),
                                          b.data());
  const auto c = random_floats(std::size_t(m) * n, -1.0f, 1.0f, 10);
  auto cpu_c = c;
  lookup<ops::gemm_bf16>(device_type::cpu)(context{}, false, false, m, n, k, 0.5f, a.data(), k,
                                            b.data(), n, 1.0f, cpu_c.data(), n);
  const auto device_a = session.upload(a), device_b = session.upload(b);
  const auto device_c = session.upload(c);
  lookup<ops::gemm_bf16>(device_type::cuda)(session.ctx(), false, false, m, n, k, 0.5f,
                                             device_a.get(), k, device_b.get(), n, 1.0f,
                                             device_c.get(), n);
  // |a|, |b| < 1: sum |a| |b| <= k.
  check_close("gemm_bf16", session.download(device_c), cpu_c,
              std::vector<double>(c.size(), (k + 2) * eps * (0.5 * k + 1)));
}

TEST_CASE("CUDA bias_add and bias_grad match the CPU kernels") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  // 37 columns: one full block of 32 columns and a ragged one; 300 rows: not a multiple
  // of the 16 row lanes.
  const int rows = 300, cols = 37;
  const auto bias = random_floats(cols, -1.0f, 1.0f, 11);
  const auto y = random_floats(std::size_t(rows) * cols, -1.0f, 1.0f, 12);

  SUBCASE("bias_add") {
    auto cpu_y = y;
    lookup<ops::bias_add>(device_type::cpu)(context{}, rows, cols, bias.data(), cpu_y.data());
    const auto device_bias = session.upload(bias);
    const auto device_y = session.upload(y);
    lookup<ops::bias_add>(device_type::cuda)(session.ctx(), rows, cols, device_bias.get(),
                                             device_y.get());
    // One correctly rounded addition per element on both sides: identical results.
    check_close("bias_add", session.download(device_y), cpu_y, 0.0, 0.0);
  }

  SUBCASE("bias_grad") {
    for (const float beta : {0.0f, 1.0f}) {
      CAPTURE(beta);
      const auto db = random_floats(cols, -1.0f, 1.0f, 13);
      auto cpu_db = db;
      lookup<ops::bias_grad>(device_type::cpu)(context{}, rows, cols, y.data(), beta,
                                               cpu_db.data());
      const auto device_dy = session.upload(y);
      const auto device_db = session.upload(db);
      lookup<ops::bias_grad>(device_type::cuda)(session.ctx(), rows, cols, device_dy.get(),
                                                beta, device_db.get());
      // Two summations of rows + 1 terms in different orders: each within rows * u of
      // the exact sum times the sum of magnitudes, so they differ by <= rows * eps of it.
      std::vector<double> tolerance(cols);
      for (int j = 0; j < cols; ++j) {
        double magnitude = std::fabs(beta * db[j]);
        for (int i = 0; i < rows; ++i)
          magnitude += std::fabs(y[std::size_t(i) * cols + j]);
        tolerance[j] = (rows + 1) * eps * magnitude;
      }
      check_close("bias_grad", session.download(device_db), cpu_db, tolerance);
    }
  }
}

/// Runs forward and backward of an activation on both devices and compares. The
/// backward gets the CPU forward's y on both sides, so it is compared on equal inputs.
template <class Forward, class Backward>
void check_activation(const cuda_session& session, const char* what, double absolute,
                      double relative) {
  CAPTURE(what);
  // 10007 elements: more than one block and not a multiple of the block size; the range
  // covers both tails of gelu and tanh; exact zeros test the relu kink.
  auto x = random_floats(10007, -5.0f, 5.0f, 21);
  x[0] = 0.0f;
  x[1] = -0.0f;
  const auto dy = random_floats(x.size(), -1.0f, 1.0f, 22);

  std::vector<float> cpu_y(x.size());
  lookup<Forward>(device_type::cpu)(context{}, std::int64_t(x.size()), x.data(), cpu_y.data());
  const auto device_x = session.upload(x);
  device_buffer<float> device_y{x.size()};
  lookup<Forward>(device_type::cuda)(session.ctx(), std::int64_t(x.size()), device_x.get(),
                                     device_y.get());
  check_close(std::string{what} + " forward", session.download(device_y), cpu_y, absolute,
              relative);

  std::vector<float> cpu_dx(x.size());
  lookup<Backward>(device_type::cpu)(context{}, std::int64_t(x.size()), x.data(), cpu_y.data(),
                                     dy.data(), cpu_dx.data());
  const auto device_cpu_y = session.upload(cpu_y);
  const auto device_dy = session.upload(dy);
  device_buffer<float> device_dx{x.size()};
  lookup<Backward>(device_type::cuda)(session.ctx(), std::int64_t(x.size()), device_x.get(),
                                      device_cpu_y.get(), device_dy.get(), device_dx.get());
  check_close(std::string{what} + " backward", session.download(device_dx), cpu_dx, absolute,
              relative);
}

TEST_CASE("CUDA relu, gelu and tanh match the CPU kernels forward and backward") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  // relu is a comparison and a select: no rounding at all.
  check_activation<ops::relu_forward, ops::relu_backward>(session, "relu", 0.0, 0.0);
  // CUDA's erff, expf and tanhf are within 2 ulp (CUDA Programming Guide, "Mathematical
  // Functions"), glibc's within a few; each formula adds ~4 roundings, so where nothing
  // cancels the sides agree to ~10 ulp ~ 1.2e-6 relative: 1e-5 leaves room for a CPU that
  // uses another accurate form (erfc, exp-based tanh). Where 1 + erf(x / sqrt 2) or
  // 1 - y^2 cancels the error is absolute: <= |x| / 2 * 2 ulp(1) < 1e-6 for |x| <= 5.
  check_activation<ops::gelu_forward, ops::gelu_backward>(session, "gelu", 2e-6, 1e-5);
  check_activation<ops::tanh_forward, ops::tanh_backward>(session, "tanh", 2e-6, 1e-5);
}

TEST_CASE(
    "CUDA softmax_xent matches the CPU loss and gradient, also for huge logits, label smoothing "
    "and an ignored label") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const auto cpu_xent = lookup<ops::softmax_xent>(device_type::cpu);
  const auto cuda_xent = lookup<ops::softmax_xent>(device_type::cuda);
  // 129 rows: not a multiple of the 8 rows (warps) per block. 10 classes: fewer than a
  // warp; 1000: many per lane. Offset 1000: exp(logit) overflows unless max-subtracted.
  const int rows = 129;
  kernels::xent_options smoothed_ignoring;  // rows labelled 3: about a tenth
  smoothed_ignoring.label_smoothing = 0.1f;
  smoothed_ignoring.ignore_index = 3;
  for (const auto& options : {kernels::xent_options{}, smoothed_ignoring})
  for (const int classes : {10, 1000}) {
    for (const float offset : {0.0f, 1000.0f}) {
      CAPTURE(options.label_smoothing);
      CAPTURE(classes);
      CAPTURE(offset);
      const float low = offset - 8.0f, high = offset + 8.0f;
      const auto logits = random_floats(std::size_t(rows) * classes, low, high, 31);
      const auto labels = random_labels(rows, classes, 32);
      const float grad_scale = 1.0f / rows;

      float cpu_sums[2] = {};
      std::vector<float> cpu_dlogits(logits.size());
      cpu_xent(context{}, rows, classes, logits.data(), labels.data(), options, grad_scale,
               cpu_sums, cpu_dlogits.data());
      const float cpu_loss = cpu_sums[0];
      REQUIRE(std::isfinite(cpu_loss));

      const auto device_logits = session.upload(logits);
      const auto device_labels = session.upload(labels);
      // Garbage in the outputs: the kernel must zero the loss itself.
      const auto device_loss = session.upload(std::vector<float>{12345.0f, 678.0f});
      device_buffer<float> device_dlogits{logits.size()};
      cuda_xent(session.ctx(), rows, classes, device_logits.get(), device_labels.get(), options,
                grad_scale, device_loss.get(), device_dlogits.get());
      const float cuda_loss = session.download(device_loss)[0];
      CHECK(session.download(device_loss)[1] == cpu_sums[1]);  // rows counted: exact

      // Per row, loss = (max - x_label) + log(sum exp(x - max)): the sum of classes terms
      // (expf within 2 ulp each, x - max rounded by at most u * (high - low)) is within
      // (classes + 2 + (high - low)) u relative, which log turns into that much absolute;
      // the final additions round at the size of |x| <= |high|. Rows are then summed in
      // different orders (atomics on the GPU): rows * eps * |loss| more.
      const double row_tolerance =
          eps * (classes + 2 + (high - low)) + 4 * eps * std::fabs(high);
      const double loss_tolerance = rows * row_tolerance + rows * eps * std::fabs(cpu_loss);
      CHECK(std::isfinite(cuda_loss));
      CHECK(std::fabs(cuda_loss - cpu_loss) <= loss_tolerance);

      // dlogits = scale * (p - onehot): p carries the relative error of the sum above
      // plus expf's and the division's, and p <= 1, so the error is absolute.
      const double gradient_tolerance =
          std::fabs(grad_scale) * eps * (classes + 8 + (high - low));
      check_close("softmax_xent dlogits", session.download(device_dlogits), cpu_dlogits,
                  gradient_tolerance, 0.0);

      // dlogits may be the logits themselves: the gradient then replaces them.
      const auto device_in_place = session.upload(logits);
      const auto device_loss_in_place = session.upload(std::vector<float>{-1.0f, -1.0f});
      cuda_xent(session.ctx(), rows, classes, device_in_place.get(), device_labels.get(), options,
                grad_scale, device_loss_in_place.get(), device_in_place.get());
      CHECK(std::fabs(session.download(device_loss_in_place)[0] - cpu_loss) <= loss_tolerance);
      check_close("softmax_xent dlogits in place", session.download(device_in_place),
                  cpu_dlogits, gradient_tolerance, 0.0);

      // Without dlogits only the loss is computed, and it is the same loss.
      const auto device_loss_only = session.upload(std::vector<float>{-1.0f, -1.0f});
      cuda_xent(session.ctx(), rows, classes, device_logits.get(), device_labels.get(), options,
                grad_scale, device_loss_only.get(), nullptr);
      CHECK(std::fabs(session.download(device_loss_only)[0] - cpu_loss) <= loss_tolerance);
    }
  }
}

TEST_CASE("CUDA mse_loss, l1_loss, huber_loss and bce_with_logits match the CPU") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  // 70001 elements: many blocks of the grid-stride loop, and a partial last block.
  const std::int64_t n = 70001;
  const auto x = random_floats(std::size_t(n), -3.0f, 3.0f, 51);
  const auto y = random_floats(std::size_t(n), -3.0f, 3.0f, 52);
  auto binary = random_floats(std::size_t(n), 0.0f, 1.0f, 53);
  for (auto& t : binary)
    t = t < 0.5f ? 0.0f : 1.0f;
  const float grad_scale = 1.0f / static_cast<float>(n);
  const auto device_x = session.upload(x);
  const auto device_y = session.upload(y);
  const auto device_binary = session.upload(binary);
  // The CPU sums in double; the GPU in float per thread, then per block, then by atomics:
  // about log2(n) + n / (threads) roundings of sums of positive terms, under 1e-4 relative.
  // Each gradient element is one formula in float on both: a few ulp.
  auto check_regression = [&](const char* what, ops::mse_loss::function cpu,
                              ops::mse_loss::function cuda, float delta) {
    CAPTURE(what);
    float cpu_sums[4];
    std::vector<float> cpu_dx(x.size());
    cpu(context{}, n, x.data(), y.data(), delta, grad_scale, cpu_sums, cpu_dx.data());
    const auto device_sums = session.upload(std::vector<float>(4, 777.0f));
    device_buffer<float> device_dx{x.size()};
    cuda(session.ctx(), n, device_x.get(), device_y.get(), delta, grad_scale, device_sums.get(),
         device_dx.get());
    const auto sums = session.download(device_sums);
    CHECK(sums[1] == cpu_sums[1]);
    for (int k : {0, 2, 3})
      CHECK(std::fabs(sums[k] - cpu_sums[k]) <= 1e-4 * std::fabs(cpu_sums[k]));
    check_close(what, session.download(device_dx), cpu_dx, 1e-12, 4 * eps);
  };
  check_regression("mse_loss", lookup<ops::mse_loss>(device_type::cpu),
                   lookup<ops::mse_loss>(device_type::cuda), 0.0f);
  check_regression("l1_loss", lookup<ops::l1_loss>(device_type::cpu),
                   lookup<ops::l1_loss>(device_type::cuda), 0.0f);
  check_regression("huber_loss", lookup<ops::huber_loss>(device_type::cpu),
                   lookup<ops::huber_loss>(device_type::cuda), 1.0f);

  float cpu_sums[3];
  std::vector<float> cpu_dx(x.size());
  lookup<ops::bce_with_logits>(device_type::cpu)(context{}, n, x.data(), binary.data(),
                                                 grad_scale, cpu_sums, cpu_dx.data());
  const auto device_sums = session.upload(std::vector<float>(3, 777.0f));
  device_buffer<float> device_dx{x.size()};
  lookup<ops::bce_with_logits>(device_type::cuda)(session.ctx(), n, device_x.get(),
                                                  device_binary.get(), grad_scale,
                                                  device_sums.get(), device_dx.get());
  const auto sums = session.download(device_sums);
  CHECK(std::fabs(sums[0] - cpu_sums[0]) <= 1e-4 * std::fabs(cpu_sums[0]));
  CHECK(sums[1] == cpu_sums[1]);
  CHECK(sums[2] == cpu_sums[2]);  // counts below 2^24: exact
  // expf and the division within a few ulp of the CPU's double sigmoid: absolute, |.| <= 1.
  check_close("bce_with_logits", session.download(device_dx), cpu_dx,
              std::fabs(grad_scale) * 8 * eps, 0.0);
}

TEST_CASE("CUDA accuracy counts the same rows as the CPU, ties included") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const int rows = 1000;
  for (const int classes : {10, 100}) {
    CAPTURE(classes);
    // Logits from {0, 1, 2, 3}: most rows have several maxima, so "first index on ties"
    // decides. Half the labels are that first argmax, so the count is far from 0 and rows.
    std::mt19937 engine{41};
    std::uniform_int_distribution<int> level{0, 3};
    std::vector<float> logits(std::size_t(rows) * classes);
    for (auto& logit : logits)
      logit = static_cast<float>(level(engine));
    auto labels = random_labels(rows, classes, 42);
    int expected = 0;  // naive reference, to also pin down the tie rule
    for (int r = 0; r < rows; ++r) {
      const float* row = logits.data() + std::size_t(r) * classes;
      const int first_max = int(std::max_element(row, row + classes) - row);
      if (r % 2 == 0)
        labels[r] = first_max;
      expected += labels[r] == first_max ? 1 : 0;
    }

    float cpu_correct = -1;
    lookup<ops::accuracy>(device_type::cpu)(context{}, rows, classes, logits.data(),
                                            labels.data(), kernels::no_ignore_index, &cpu_correct);
    const auto device_logits = session.upload(logits);
    const auto device_labels = session.upload(labels);
    const auto device_correct = session.upload(std::vector<float>{777});
    lookup<ops::accuracy>(device_type::cuda)(session.ctx(), rows, classes, device_logits.get(),
                                             device_labels.get(), kernels::no_ignore_index,
                                             device_correct.get());
    // Counts below 2^24 in a float: exact.
    const float cuda_correct = session.download(device_correct)[0];
    CHECK(cuda_correct == cpu_correct);
    CHECK(cuda_correct == expected);
    // Leaving out the rows labelled 1 leaves out the same rows on both.
    lookup<ops::accuracy>(device_type::cpu)(context{}, rows, classes, logits.data(),
                                            labels.data(), 1, &cpu_correct);
    lookup<ops::accuracy>(device_type::cuda)(session.ctx(), rows, classes, device_logits.get(),
                                             device_labels.get(), 1, device_correct.get());
    CHECK(session.download(device_correct)[0] == cpu_correct);
    CHECK(cpu_correct < expected);
  }
}

/// True when two float vectors hold the same bits (== would call NaN unequal to itself).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The parameters an optimizer test updates on the device, in place or out of place (then
/// ping-ponging between two buffers, as the optimizer actor writes each version to a
/// fresh one). After an out-of-place step it checks that the input was not written.
class device_params {
 public:
  device_params(const cuda_session& session, const std::vector<float>& initial, bool in_place)
      : session_(session),
        current_(session.upload(initial)),
        spare_(session.upload(std::vector<float>(initial.size(), NAN))),
        in_place_(in_place) {}

  const float* param() const { return current_is_first_ ? current_.get() : spare_.get(); }
  float* param_out() const {
    if (in_place_)
      return current_is_first_ ? current_.get() : spare_.get();
    return current_is_first_ ? spare_.get() : current_.get();
  }

  /// Runs `update(param, param_out)` and, out of place, checks the input is unchanged.
  template <class Update>
  void step(Update&& update) {
    std::vector<float> before;
    if (!in_place_)
      before = values();
    update(param(), param_out());
    if (in_place_)
      return;
    current_is_first_ = !current_is_first_;
    const auto& input = current_is_first_ ? spare_ : current_;
    CHECK_MESSAGE(same_bits(session_.download(input), before),
                  "out of place wrote its input parameters");
  }

  std::vector<float> values() const {
    return session_.download(current_is_first_ ? current_ : spare_);
  }

 private:
  const cuda_session& session_;
  device_buffer<float> current_, spare_;
  bool in_place_;
  bool current_is_first_ = true;
};

TEST_CASE("CUDA sgd_update matches the CPU over three steps of every variant") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const auto cpu_sgd = lookup<ops::sgd_update>(device_type::cpu);
  const auto cuda_sgd = lookup<ops::sgd_update>(device_type::cuda);
  const std::size_t n = 10007;

  sgd_hyper plain;
  plain.lr = 0.1f;
  sgd_hyper damped = plain;
  damped.momentum = 0.9f;
  damped.dampening = 0.1f;
  damped.weight_decay = 1e-2f;
  sgd_hyper nesterov = plain;
  nesterov.momentum = 0.9f;
  nesterov.weight_decay = 1e-2f;
  nesterov.nesterov = true;

  for (const sgd_hyper& base : {plain, damped, nesterov}) {
    CAPTURE(base.momentum);
    CAPTURE(base.nesterov);
    const bool has_buffer = base.momentum != 0.0f;
    std::vector<float> cuda_result[2];  // in place, out of place
    for (const bool in_place : {true, false}) {
      CAPTURE(in_place);
      auto cpu_param = random_floats(n, -1.0f, 1.0f, 51);
      std::vector<float> cpu_buffer(n, 0.0f);
      device_params device_param{session, cpu_param, in_place};
      const auto device_momentum = session.upload(cpu_buffer);
      for (int step = 1; step <= 3; ++step) {
        sgd_hyper hyper = base;
        hyper.first_step = step == 1;
        const auto grad = random_floats(n, -1.0f, 1.0f, 52 + step);
        cpu_sgd(context{}, std::int64_t(n), cpu_param.data(), cpu_param.data(), grad.data(),
                has_buffer ? cpu_buffer.data() : nullptr, hyper);
        const auto device_grad = session.upload(grad);
        device_param.step([&](const float* param, float* param_out) {
          cuda_sgd(session.ctx(), std::int64_t(n), param, param_out, device_grad.get(),
                   has_buffer ? device_momentum.get() : nullptr, hyper);
        });
      }
      // Values stay below 4 in magnitude; each step is <= 6 roundings per side (FMA
      // contraction on the GPU decides some differently), each <= u * 4 = 2.4e-7, and the
      // momentum carries earlier differences forward: 3 steps * 6 * 2 sides * 2.4e-7
      // = 8.6e-6 < 1e-5.
      cuda_result[in_place ? 0 : 1] = device_param.values();
      check_close("sgd param", cuda_result[in_place ? 0 : 1], cpu_param, 1e-5, 0.0);
      if (has_buffer)
        check_close("sgd momentum buffer", session.download(device_momentum), cpu_buffer, 1e-5,
                    0.0);
    }
    // The same kernel with the same inputs: only where it stores differs.
    CHECK_MESSAGE(same_bits(cuda_result[0], cuda_result[1]),
                  "sgd out of place differs from in place");
  }
}

TEST_CASE("CUDA adam_update matches the CPU over three steps of Adam and AdamW") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const auto cpu_adam = lookup<ops::adam_update>(device_type::cpu);
  const auto cuda_adam = lookup<ops::adam_update>(device_type::cuda);
  const std::size_t n = 10007;
  for (const bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    std::vector<float> cuda_result[2];  // in place, out of place
    for (const bool in_place : {true, false}) {
      CAPTURE(in_place);
      adam_hyper hyper;
      hyper.lr = 1e-2f;  // large enough that the update is far above the param's rounding
      hyper.weight_decay = decoupled ? 0.1f : 0.01f;
      hyper.decoupled = decoupled;
      auto cpu_param = random_floats(n, -1.0f, 1.0f, 61);
      std::vector<float> cpu_m(n, 0.0f), cpu_v(n, 0.0f);
      device_params device_param{session, cpu_param, in_place};
      const auto device_m = session.upload(cpu_m);
      const auto device_v = session.upload(cpu_v);
      for (std::int64_t step = 1; step <= 3; ++step) {
        hyper.step = step;
        const auto grad = random_floats(n, -1.0f, 1.0f, 62 + std::uint32_t(step));
        cpu_adam(context{}, std::int64_t(n), cpu_param.data(), cpu_param.data(), grad.data(),
                 cpu_m.data(), cpu_v.data(), hyper);
        const auto device_grad = session.upload(grad);
        device_param.step([&](const float* param, float* param_out) {
          cuda_adam(session.ctx(), std::int64_t(n), param, param_out, device_grad.get(),
                    device_m.get(), device_v.get(), hyper);
        });
      }
      // m and v: a few roundings per step (<= ~10 ulp after 3 steps, 1e-5 relative is
      // ~80); where m cancels towards 0 the error is absolute, u times terms <= 1.
      // param: the update is lr * m_hat / (sqrt(v_hat) + eps) with |m_hat / sqrt(v_hat)|
      // of order 1, carrying the relative error of m and v (and of a bias correction the
      // CPU may compute in float rather than double, ~1e-7), i.e. <= 1e-2 * 1e-5 absolute,
      // well inside the param's own 1e-6.
      cuda_result[in_place ? 0 : 1] = device_param.values();
      check_close("adam m", session.download(device_m), cpu_m, 1e-6, 1e-5);
      check_close("adam v", session.download(device_v), cpu_v, 1e-6, 1e-5);
      check_close("adam param", cuda_result[in_place ? 0 : 1], cpu_param, 1e-6, 1e-5);
    }
    // The same kernel with the same inputs: only where it stores differs.
    CHECK_MESSAGE(same_bits(cuda_result[0], cuda_result[1]),
                  "adam out of place differs from in place");
  }
}

TEST_CASE("CUDA sgd_update and adam_update reject an output partially overlapping the input") {
  // The check runs on the host before any launch, but the kernels are only registered
  // with a usable device in mind; skip like the rest.
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const auto memory = session.upload(std::vector<float>(5, 1.0f));
  const auto grad = session.upload(std::vector<float>(4, 1.0f));
  const auto m = session.upload(std::vector<float>(4, 0.0f));
  const auto v = session.upload(std::vector<float>(4, 0.0f));
  // param = memory[0, 4), param_out = memory[1, 5): three floats shared.
  CHECK_THROWS_AS(lookup<ops::sgd_update>(device_type::cuda)(session.ctx(), 4, memory.get(),
                                                            memory.get() + 1, grad.get(),
                                                            nullptr, sgd_hyper{}),
                  check_failure);
  CHECK_THROWS_AS(lookup<ops::adam_update>(device_type::cuda)(session.ctx(), 4, memory.get(),
                                                             memory.get() + 1, grad.get(),
                                                             m.get(), v.get(), adam_hyper{}),
                  check_failure);
}

TEST_CASE("CUDA axpy, add, scale, fill and copy match the CPU kernels") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const std::size_t n = 10007;
  const auto x = random_floats(n, -1.0f, 1.0f, 71);
  const auto y = random_floats(n, -1.0f, 1.0f, 72);

  SUBCASE("axpy") {
    const float alpha = -0.3f;
    auto cpu_y = y;
    lookup<ops::axpy>(device_type::cpu)(context{}, std::int64_t(n), alpha, x.data(),
                                        cpu_y.data());
    const auto device_x = session.upload(x);
    const auto device_y = session.upload(y);
    lookup<ops::axpy>(device_type::cuda)(session.ctx(), std::int64_t(n), alpha, device_x.get(),
                                         device_y.get());
    // The GPU fuses the multiply-add (one rounding), a CPU may round the product first:
    // they differ by at most u |alpha x| + u |result| <= eps (|alpha x| + |y|).
    std::vector<double> tolerance(n);
    for (std::size_t i = 0; i < n; ++i)
      tolerance[i] = eps * (std::fabs(double(alpha) * x[i]) + std::fabs(y[i]));
    check_close("axpy", session.download(device_y), cpu_y, tolerance);
  }

  SUBCASE("add") {
    std::vector<float> cpu_z(n);
    lookup<ops::add>(device_type::cpu)(context{}, std::int64_t(n), x.data(), y.data(),
                                       cpu_z.data());
    const auto device_x = session.upload(x);
    const auto device_y = session.upload(y);
    lookup<ops::add>(device_type::cuda)(session.ctx(), std::int64_t(n), device_x.get(),
                                        device_y.get(), device_y.get());  // z = y
    // One correctly rounded addition on both sides: identical.
    check_close("add", session.download(device_y), cpu_z, 0.0, 0.0);
  }

  SUBCASE("scale") {
    auto cpu_x = x;
    lookup<ops::scale>(device_type::cpu)(context{}, std::int64_t(n), 1.7f, cpu_x.data());
    const auto device_x = session.upload(x);
    lookup<ops::scale>(device_type::cuda)(session.ctx(), std::int64_t(n), 1.7f, device_x.get());
    // One correctly rounded multiplication on both sides: identical.
    check_close("scale", session.download(device_x), cpu_x, 0.0, 0.0);
  }

  SUBCASE("fill") {
    // 9e6 elements: more than the 32768 blocks * 256 threads of one grid, so the
    // grid-stride loop must wrap around.
    const std::size_t big = 9'000'000;
    std::vector<float> cpu_x(big, -1.0f);
    lookup<ops::fill>(device_type::cpu)(context{}, std::int64_t(big), 3.25f, cpu_x.data());
    device_buffer<float> device_x{big};
    lookup<ops::fill>(device_type::cuda)(session.ctx(), std::int64_t(big), 3.25f,
                                         device_x.get());
    check_close("fill", session.download(device_x), cpu_x, 0.0, 0.0);
  }

  SUBCASE("copy") {
    // An odd byte count: copy is bytes, not floats.
    std::vector<std::uint8_t> source(40001);
    std::mt19937 engine{73};
    for (auto& byte : source)
      byte = static_cast<std::uint8_t>(engine());
    std::vector<std::uint8_t> cpu_destination(source.size(), 0);
    lookup<ops::copy>(device_type::cpu)(context{}, std::int64_t(source.size()), source.data(),
                                        cpu_destination.data());
    const auto device_source = session.upload(source);
    const auto device_destination = session.upload(std::vector<std::uint8_t>(source.size(), 0));
    lookup<ops::copy>(device_type::cuda)(session.ctx(), std::int64_t(source.size()),
                                         device_source.get(), device_destination.get());
    CHECK(session.download(device_destination) == cpu_destination);
    CHECK(cpu_destination == source);
  }

  SUBCASE("empty ranges launch nothing and touch no pointer") {
    CHECK_NOTHROW(lookup<ops::fill>(device_type::cuda)(session.ctx(), 0, 1.0f, nullptr));
    CHECK_NOTHROW(lookup<ops::scale>(device_type::cuda)(session.ctx(), 0, 1.0f, nullptr));
    CHECK_NOTHROW(
        lookup<ops::axpy>(device_type::cuda)(session.ctx(), 0, 1.0f, nullptr, nullptr));
    CHECK_NOTHROW(lookup<ops::copy>(device_type::cuda)(session.ctx(), 0, nullptr, nullptr));
  }
}

TEST_CASE("CUDA im2col, col2im, max_pool2d and avg_pool2d match the CPU kernels") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const int batch = 3;
  std::uint32_t seed = 90;
  for (auto w : test::window_geometries()) {
    CAPTURE(w.kernel_h);
    CAPTURE(w.stride_h);
    CAPTURE(w.pad_h);
    const auto x = random_floats(test::image_size(batch, w), -1.0f, 1.0f, ++seed);
    const auto device_x = session.upload(x);

    // im2col: a copy, identical. col2im: the GPU gathers where the CPU scatters, so a
    // pixel's (at most KH KW) terms add in another order: KH KW roundings of |terms| < 1.
    std::vector<float> cpu_cols(test::columns_size(batch, w));
    lookup<ops::im2col>(device_type::cpu)(context{}, batch, w, x.data(), cpu_cols.data());
    device_buffer<float> device_cols{cpu_cols.size()};
    lookup<ops::im2col>(device_type::cuda)(session.ctx(), batch, w, device_x.get(),
                                           device_cols.get());
    check_close("im2col", session.download(device_cols), cpu_cols, 0.0, 0.0);
    // im2col_bf16: the same copy of 16-bit elements, the same bits.
    std::vector<std::uint16_t> x_bits(x.size()), cpu_bits(cpu_cols.size());
    lookup<ops::to_bf16>(device_type::cpu)(context{}, std::int64_t(x.size()), x.data(),
                                           x_bits.data());
    lookup<ops::im2col_bf16>(device_type::cpu)(context{}, batch, w, x_bits.data(), cpu_bits.data());
    const auto device_x_bits = session.upload(x_bits);
    device_buffer<std::uint16_t> device_bits{cpu_bits.size()};
    lookup<ops::im2col_bf16>(device_type::cuda)(session.ctx(), batch, w, device_x_bits.get(),
                                                device_bits.get());
    CHECK(session.download(device_bits) == cpu_bits);
    const double area = static_cast<double>(w.kernel_h) * w.kernel_w;
    std::vector<float> cpu_image(x.size());
    lookup<ops::col2im>(device_type::cpu)(context{}, batch, w, cpu_cols.data(), cpu_image.data());
    device_buffer<float> device_image{x.size()};
    lookup<ops::col2im>(device_type::cuda)(session.ctx(), batch, w, device_cols.get(),
                                           device_image.get());
    check_close("col2im", session.download(device_image), cpu_image, area * area * eps, 0.0);

    // Pooling pads at most half the kernel.
    w.pad_h = std::min(w.pad_h, w.kernel_h / 2);
    w.pad_w = std::min(w.pad_w, w.kernel_w / 2);
    const auto outputs = static_cast<std::size_t>(test::output_size(batch, w));
    const auto dy = random_floats(outputs, -1.0f, 1.0f, ++seed);
    const auto device_dy = session.upload(dy);

    // Max: the same scan order, so the same values and argmax bit for bit; backward adds at
    // most KH KW terms per pixel in another order.
    std::vector<float> cpu_y(outputs);
    std::vector<std::int32_t> cpu_argmax(outputs);
    lookup<ops::max_pool2d_forward>(device_type::cpu)(context{}, batch, w, x.data(), cpu_y.data(),
                                                      cpu_argmax.data());
    device_buffer<float> device_y{outputs};
    device_buffer<std::int32_t> device_argmax{outputs};
    lookup<ops::max_pool2d_forward>(device_type::cuda)(session.ctx(), batch, w, device_x.get(),
                                                       device_y.get(), device_argmax.get());
    check_close("max_pool2d_forward", session.download(device_y), cpu_y, 0.0, 0.0);
    CHECK(session.download(device_argmax) == cpu_argmax);
    std::vector<float> cpu_dx(x.size());
    lookup<ops::max_pool2d_backward>(device_type::cpu)(context{}, batch, w, dy.data(),
                                                       cpu_argmax.data(), cpu_dx.data());
    device_buffer<float> device_dx{x.size()};
    lookup<ops::max_pool2d_backward>(device_type::cuda)(session.ctx(), batch, w, device_dy.get(),
                                                        device_argmax.get(), device_dx.get());
    check_close("max_pool2d_backward", session.download(device_dx), cpu_dx, area * eps, 0.0);

    // Average: the same forward sums in the same order (a little slack for contraction);
    // backward gathers up to KH KW scaled terms per pixel in another order.
    lookup<ops::avg_pool2d_forward>(device_type::cpu)(context{}, batch, w, x.data(), cpu_y.data());
    lookup<ops::avg_pool2d_forward>(device_type::cuda)(session.ctx(), batch, w, device_x.get(),
                                                       device_y.get());
    check_close("avg_pool2d_forward", session.download(device_y), cpu_y, 2 * eps, 0.0);
    lookup<ops::avg_pool2d_backward>(device_type::cpu)(context{}, batch, w, dy.data(),
                                                       cpu_dx.data());
    lookup<ops::avg_pool2d_backward>(device_type::cuda)(session.ctx(), batch, w, device_dy.get(),
                                                        device_dx.get());
    check_close("avg_pool2d_backward", session.download(device_dx), cpu_dx, area * eps, 0.0);
  }
}

TEST_CASE("CUDA layer_norm and causal_softmax match the CPU kernels forward and backward") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  // 300 columns: more than one block of threads per row, so the block-stride loops wrap.
  for (const int cols : {7, 300}) {
    const int rows = 33;
    CAPTURE(cols);
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    const auto x = random_floats(n, -2.0f, 3.0f, 150 + cols);
    const auto gamma = random_floats(cols, -1.0f, 1.0f, 151);
    const auto beta = random_floats(cols, -1.0f, 1.0f, 152);
    const auto dy = random_floats(n, -1.0f, 1.0f, 153);
    const auto device_x = session.upload(x), device_gamma = session.upload(gamma),
               device_beta = session.upload(beta), device_dy = session.upload(dy);

    // Layer norm: the sums run in another order (a tree over the block against a row
    // scan): cols roundings of terms of size <= 3 on statistics that scale O(1) outputs.
    std::vector<float> y(n), mean(rows), rstd(rows);
    lookup<ops::layer_norm_forward>(device_type::cpu)(context{}, rows, cols, x.data(),
                                                      gamma.data(), beta.data(), 1e-5f,
                                                      y.data(), mean.data(), rstd.data());
    device_buffer<float> device_y{n}, device_mean{std::size_t(rows)}, device_rstd{std::size_t(rows)};
    lookup<ops::layer_norm_forward>(device_type::cuda)(
        session.ctx(), rows, cols, device_x.get(), device_gamma.get(), device_beta.get(), 1e-5f,
        device_y.get(), device_mean.get(), device_rstd.get());
    const double bound = cols * 4 * eps;
    check_close("layer_norm_forward y", session.download(device_y), y, bound, 0.0);
    check_close("layer_norm_forward rstd", session.download(device_rstd), rstd, 0.0, bound);
    std::vector<float> dx(n), dgamma(cols), dbeta(cols);
    lookup<ops::layer_norm_backward>(device_type::cpu)(context{}, rows, cols, x.data(),
                                                       gamma.data(), mean.data(), rstd.data(),
                                                       dy.data(), dx.data(), 0.0f,
                                                       dgamma.data(), dbeta.data());
    device_buffer<float> device_dx{n}, device_dgamma{std::size_t(cols)},
        device_dbeta{std::size_t(cols)};
    const auto cpu_mean = session.upload(mean), cpu_rstd = session.upload(rstd);
    lookup<ops::layer_norm_backward>(device_type::cuda)(
        session.ctx(), rows, cols, device_x.get(), device_gamma.get(), cpu_mean.get(),
        cpu_rstd.get(), device_dy.get(), device_dx.get(), 0.0f, device_dgamma.get(),
        device_dbeta.get());
    check_close("layer_norm_backward dx", session.download(device_dx), dx, bound, 0.0);
    check_close("layer_norm_backward dgamma", session.download(device_dgamma), dgamma,
                rows * bound, 0.0);
    check_close("layer_norm_backward dbeta", session.download(device_dbeta), dbeta, rows * eps,
                0.0);

    // Causal softmax over rows of `cols` positions (rows = sequences x cols, so the mask
    // moves along); scale 0.3 as 1 / sqrt(head size) would be.
    const int softmax_rows = 3 * cols;
    const std::size_t m = static_cast<std::size_t>(softmax_rows) * cols;
    const auto scores = random_floats(m, -4.0f, 4.0f, 154);
    const auto dp = random_floats(m, -1.0f, 1.0f, 155);
    std::vector<float> p(m), dscores(m);
    lookup<ops::causal_softmax_forward>(device_type::cpu)(context{}, softmax_rows, cols, 0.3f,
                                                          scores.data(), p.data());
    lookup<ops::causal_softmax_backward>(device_type::cpu)(context{}, softmax_rows, cols, 0.3f,
                                                           p.data(), dp.data(), dscores.data());
    const auto device_scores = session.upload(scores), device_dp = session.upload(dp);
    const auto device_cpu_p = session.upload(p);
    device_buffer<float> device_p{m}, device_dscores{m};
    lookup<ops::causal_softmax_forward>(device_type::cuda)(session.ctx(), softmax_rows, cols,
                                                           0.3f, device_scores.get(),
                                                           device_p.get());
    lookup<ops::causal_softmax_backward>(device_type::cuda)(session.ctx(), softmax_rows, cols,
                                                            0.3f, device_cpu_p.get(),
                                                            device_dp.get(),
                                                            device_dscores.get());
    // expf of arguments up to 2.4 and sums of up to cols terms in another order.
    check_close("causal_softmax_forward", session.download(device_p), p, 1e-7, cols * 4 * eps);
    check_close("causal_softmax_backward", session.download(device_dscores), dscores,
                cols * 4 * eps, cols * 4 * eps);
  }
}

TEST_CASE("CUDA dropout keeps exactly the CPU's elements") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const std::int64_t rows = 37, cols = 1001;
  const auto x = random_floats(static_cast<std::size_t>(rows * cols), -1.0f, 1.0f, 160);
  std::vector<float> cpu_y(x.size());
  lookup<ops::dropout>(device_type::cpu)(context{}, rows, cols, 0.3f, 4242, 17, x.data(),
                                         cpu_y.data());
  const auto device_x = session.upload(x);
  device_buffer<float> device_y{x.size()};
  lookup<ops::dropout>(device_type::cuda)(session.ctx(), rows, cols, 0.3f, 4242, 17,
                                          device_x.get(), device_y.get());
  // The same hash, the same comparison, one multiplication: identical.
  check_close("dropout", session.download(device_y), cpu_y, 0.0, 0.0);
}

TEST_CASE("CUDA embedding looks up and scatters as the CPU does") {
  TROUPE_SKIP_WITHOUT_CUDA();
  cuda_session session;
  const std::int64_t vocab = 97, dim = 33, period = 64, rows = 4 * 64;
  std::vector<float> ids(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<float>((i * 37 + i / 5) % vocab);  // repeats: scatters collide
  const auto table = random_floats(static_cast<std::size_t>(vocab * dim), -1.0f, 1.0f, 161);
  const auto positions = random_floats(static_cast<std::size_t>(period * dim), -1.0f, 1.0f, 162);
  const auto dy = random_floats(static_cast<std::size_t>(rows * dim), -1.0f, 1.0f, 163);
  std::vector<float> cpu_y(static_cast<std::size_t>(rows * dim));
  lookup<ops::embedding_forward>(device_type::cpu)(context{}, rows, dim, vocab, period,
                                                   ids.data(), table.data(), positions.data(),
                                                   cpu_y.data());
  std::vector<float> cpu_dtable(table.size()), cpu_dpositions(positions.size());
  lookup<ops::embedding_backward>(device_type::cpu)(context{}, rows, dim, vocab, period,
                                                    ids.data(), dy.data(), 0.0f,
                                                    cpu_dtable.data(), cpu_dpositions.data());
  const auto device_ids = session.upload(ids);
  const auto device_table = session.upload(table);
  const auto device_positions = session.upload(positions);
  const auto device_dy = session.upload(dy);
  device_buffer<float> device_y{cpu_y.size()}, device_dtable{table.size()},
      device_dpositions{positions.size()};
  lookup<ops::embedding_forward>(device_type::cuda)(session.ctx(), rows, dim, vocab, period,
                                                    device_ids.get(), device_table.get(),
                                                    device_positions.get(), device_y.get());
  lookup<ops::embedding_backward>(device_type::cuda)(session.ctx(), rows, dim, vocab, period,
                                                     device_ids.get(), device_dy.get(), 0.0f,
                                                     device_dtable.get(),
                                                     device_dpositions.get());
  // The lookup is one addition either way: exact. The scatter sums up to rows / vocab + 1
  // (token) or rows / period (position) values of |dy| <= 1 in another order.
  check_close("embedding_forward", session.download(device_y), cpu_y, 0.0, 0.0);
  const double eps = 1.2e-7;
  check_close("embedding_backward table", session.download(device_dtable), cpu_dtable,
              8 * eps, 8 * eps);
  check_close("embedding_backward positions", session.download(device_dpositions),
              cpu_dpositions, 8 * eps, 8 * eps);
}

}  // namespace
}  // namespace troupe::kernels

#endif  // TROUPE_WITH_CUDA
