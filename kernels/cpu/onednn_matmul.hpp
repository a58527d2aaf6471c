// onednn_matmul.hpp: row-major matrix products through oneDNN's matmul primitive (Debian's
// libdnnl 2.6), for the CPU kernels: the f32 GEMM where oneDNN is the faster library
// (Note [CPU GEMM backend] in kernels/cpu/gemm.cpp) and, with bf16 operands, mixed precision.
//
// Each calling thread keeps its own primitives, one per distinct call shape, so a step's
// GEMMs pay oneDNN's primitive creation (JIT code generation, tens of microseconds) once per
// thread and shape, not per call. oneDNN runs on the calling thread only: a CPU device is
// one core (Note [CPU streams]), and oneDNN's OpenMP threads would take the other devices'.
//
// Not here: argument checks beyond what oneDNN needs (kernels/cpu/gemm.cpp checks the
// shapes), empty products (m, n or k of 0: the caller handles them).
#pragma once

namespace troupe::kernels::cpu {

/// The element type of one matmul operand.
enum class matmul_element { f32, bf16 };

/// C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, row-major, with the row strides
/// lda, ldb and ldc of A, B and C as stored; op(X) = X or X^T. A and B in the given element
/// types, products accumulated in f32, C in f32. beta = 0 overwrites C (NaN in it included).
struct matmul_call {
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int ldc = 0;
  matmul_element operands = matmul_element::f32;  // A's and B's
};

/// Runs one product on the calling thread. m, n and k must be positive.
void onednn_matmul(const matmul_call& call);

/// The call of a gemm kernel's arguments (ops::gemm's order).
inline matmul_call gemm_call(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                             const void* a, int lda, const void* b, int ldb, float beta, float* c,
                             int ldc, matmul_element operands) {
  matmul_call call;
  call.transpose_a = transpose_a;
  call.transpose_b = transpose_b;
  call.m = m;
  call.n = n;
  call.k = k;
  call.alpha = alpha;
  call.a = a;
  call.lda = lda;
  call.b = b;
  call.ldb = ldb;
  call.beta = beta;
  call.c = c;
  call.ldc = ldc;
  call.operands = operands;
  return call;
}

/// Asks oneDNN's OpenMP for a team of one on the calling thread, once per thread (Note
/// [oneDNN on one thread] in onednn_matmul.cpp); every oneDNN call of a kernel starts with it.
void use_one_openmp_thread();

/// Whether oneDNN's kernels on this CPU use AVX-512 (its `avx512_core` instruction set or a
/// later one): where its f32 GEMM was measured faster than OpenBLAS's.
bool onednn_has_avx512();

/// Whether this CPU computes bf16 products natively (AVX512-BF16 or AMX), as oneDNN sees it.
bool onednn_has_bf16();

/// oneDNN's name for the instruction set its kernels use here, e.g. "avx512_core_amx".
const char* onednn_isa_name();

}  // namespace troupe::kernels::cpu
