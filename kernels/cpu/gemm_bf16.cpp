// gemm_bf16.cpp: C = alpha * op(A) * op(B) + beta * C with bf16 A and B, f32 accumulation
// and C, on the CPU through oneDNN's matmul (kernels/cpu/onednn_matmul.hpp): AMX tiles or
// AVX512-BF16 dot products where the CPU has them ([run] precision = "bf16" refuses a CPU
// without either, runtime/config/precision.cpp).
//
// Shape checks and empty products as the f32 gemm's (kernels/cpu/gemm_arguments.hpp).
#include "kernels/cpu/gemm_arguments.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void gemm_bf16(const context&, bool transpose_a, bool transpose_b, int m, int n, int k,
               float alpha, const std::uint16_t* a, int lda, const std::uint16_t* b, int ldb,
               float beta, float* c, int ldc) {
  if (!gemm_arguments_checked("gemm_bf16", transpose_a, transpose_b, m, n, k, lda, ldb, beta, c,
                              ldc))
    return;
  onednn_matmul(gemm_call(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                          matmul_element::bf16));
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gemm_bf16, device_type::cpu, gemm_bf16);

}  // namespace troupe::kernels::cpu
