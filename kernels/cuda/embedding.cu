// embedding.cu: the CUDA backend of ops::embedding_forward and ops::embedding_backward:
// one grid-stride loop over the rows' values each way; the gradient scatters with atomic
// adds (rows that share a token add in any order). An id outside [0, vocab) reads as a
// row of zeros and adds nothing (the CPU kernel refuses it).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__device__ std::int64_t token_at(const float* ids, std::int64_t r, std::int64_t vocab) {
  const float id = ids[r];
  return id >= 0.0f && id < static_cast<float>(vocab) && floorf(id) == id
             ? static_cast<std::int64_t>(id)
             : -1;
}

__global__ void embedding_forward_kernel(std::int64_t n, std::int64_t dim, std::int64_t vocab,
                                         std::int64_t period, const float* ids,
                                         const float* table, const float* positions, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t r = i / dim, d = i % dim;
    const std::int64_t t = token_at(ids, r, vocab);
    float value = t >= 0 ? table[t * dim + d] : 0.0f;
    if (positions != nullptr && t >= 0)
      value += positions[(r % period) * dim + d];
    y[i] = value;
  }
}

__global__ void embedding_backward_kernel(std::int64_t n, std::int64_t dim, std::int64_t vocab,
                                          std::int64_t period, const float* ids, const float* dy,
                                          float* dtable, float* dpositions) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t r = i / dim, d = i % dim;
    const std::int64_t t = token_at(ids, r, vocab);
    if (t < 0)
      continue;
    atomicAdd(dtable + t * dim + d, dy[i]);
    if (dpositions != nullptr)
      atomicAdd(dpositions + (r % period) * dim + d, dy[i]);
  }
}

__global__ void zero_kernel(std::int64_t n, float* x) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    x[i] = 0.0f;
}

}  // namespace

// ---- launchers ----

void embedding_forward(const context& ctx, std::int64_t rows, std::int64_t dim,
                       std::int64_t vocab, std::int64_t period, const float* ids,
                       const float* table, const float* positions, float* y) {
  TROUPE_CHECK(rows >= 0 && dim > 0 && vocab > 0 && period > 0,
               "embedding sizes: rows=" << rows << " dim=" << dim << " vocab=" << vocab
                                        << " period=" << period);
  const std::int64_t n = rows * dim;
  if (n == 0)
    return;
  embedding_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, dim, vocab, period, ids, table, positions, y);
  TROUPE_CHECK_LAUNCH();
}

void embedding_backward(const context& ctx, std::int64_t rows, std::int64_t dim,
                        std::int64_t vocab, std::int64_t period, const float* ids,
                        const float* dy, float beta, float* dtable, float* dpositions) {
  TROUPE_CHECK(rows >= 0 && dim > 0 && vocab > 0 && period > 0,
               "embedding sizes: rows=" << rows << " dim=" << dim << " vocab=" << vocab
                                        << " period=" << period);
  auto* stream = stream_of(ctx);
  if (beta == 0.0f) {
    zero_kernel<<<grid_stride_blocks(vocab * dim), threads_per_block, 0, stream>>>(vocab * dim,
                                                                                  dtable);
    TROUPE_CHECK_LAUNCH();
    if (dpositions != nullptr) {
      zero_kernel<<<grid_stride_blocks(period * dim), threads_per_block, 0, stream>>>(
          period * dim, dpositions);
      TROUPE_CHECK_LAUNCH();
    }
  }
  const std::int64_t n = rows * dim;
  if (n == 0)
    return;
  embedding_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream>>>(
      n, dim, vocab, period, ids, dy, dtable, dpositions);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::embedding_forward, device_type::cuda, embedding_forward);
TROUPE_REGISTER_KERNEL(ops::embedding_backward, device_type::cuda, embedding_backward);

}  // namespace troupe::kernels::cuda_backend
