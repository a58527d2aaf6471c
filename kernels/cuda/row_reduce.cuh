// row_reduce.cuh: the block-wide sum and maximum the row kernels (layer_norm.cu,
// causal_softmax.cu) share: one block of threads_per_block threads per row.
//
// A fixed tree in shared memory, so a row's sum has the same order on every run (no
// atomics): the equivalence tests compare runs bit for bit.
#pragma once

#include "kernels/cuda/launch.cuh"

namespace troupe::kernels::cuda_backend {

/// The sum (or, with Max, the maximum) of every thread's `value` in the block; every thread
/// gets it. `scratch` holds threads_per_block floats; blockDim.x must be threads_per_block.
template <bool Max = false>
__device__ inline float block_reduce(float value, float* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int half = threads_per_block / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float other = scratch[threadIdx.x + half];
      scratch[threadIdx.x] = Max ? fmaxf(scratch[threadIdx.x], other)
                                 : scratch[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

}  // namespace troupe::kernels::cuda_backend
