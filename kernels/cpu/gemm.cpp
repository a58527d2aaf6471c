// gemm.cpp: C = alpha * op(A) * op(B) + beta * C on the CPU, through OpenBLAS's
// cblas_sgemm or oneDNN's matmul (kernels/cpu/onednn_matmul.hpp), as the device's context
// says ([run] cpu_gemm).
//
// It does not pick OpenBLAS's thread count: that is the CPU device's business (a device
// owns its cores; see DESIGN.md "Tensors and devices"). It checks the shape arguments,
// because OpenBLAS reports a bad one by printing a line and doing nothing.
//
// Note [CPU GEMM backend]
// This environment pins OpenBLAS to its Haswell (AVX2) kernels, also on CPUs with AVX-512.
// oneDNN's f32 matmul uses AVX-512 where the CPU has it, and measured 1.7-3.9x OpenBLAS's
// sgemm on every product of the shipped configs' and bench/shapes.py's linear layers (one
// thread; forward, input and weight gradients; bench/gemm_backends.cpp on the Intel Xeon VM,
// 2026-12-06), and 1.4-1.8x on whole training steps (docs/benchmarks.md). So "automatic" takes
// oneDNN where its kernels use AVX-512 and OpenBLAS elsewhere (an AVX2 CPU, where the two
// were not measured apart). The choice is fixed for a device, never timed at run time: the
// two round differently, and a resumed run must continue bit for bit.
#include <cblas.h>

#include "kernels/cpu/gemm_arguments.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void gemm(const context& context, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc) {
  if (!gemm_arguments_checked("gemm", transpose_a, transpose_b, m, n, k, lda, ldb, beta, c,
                              ldc))
    return;
  if (cpu_gemm_is_onednn(context.gemm)) {
    onednn_matmul(gemm_call(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                            ldc, matmul_element::f32));
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gemm, device_type::cpu, gemm);

}  // namespace troupe::kernels::cpu

namespace troupe::kernels {

bool cpu_gemm_is_onednn(cpu_gemm choice) {
  switch (choice) {
    case cpu_gemm::openblas:
      return false;
    case cpu_gemm::onednn:
      return true;
    case cpu_gemm::automatic:
      break;
  }
  static const bool avx512 = cpu::onednn_has_avx512();
  return avx512;
}

}  // namespace troupe::kernels
