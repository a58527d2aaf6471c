// elementwise_sums.cuh: what the elementwise loss kernels (regression_loss.cu,
// bce_with_logits.cu) share: a grid-stride loop whose threads keep Count partial sums, added
// up in each block by a fixed tree and into the op's sums (device memory) by one atomicAdd
// per block and sum. The launcher zeroes the sums on the stream first.
#pragma once

#include "kernels/cuda/row_reduce.cuh"

namespace troupe::kernels::cuda_backend {

/// Adds each thread's partial[0 .. Count) into sums[First .. First + Count): a block sum each,
/// one atomicAdd per block. Every thread of the block must call it.
template <int Count, int First = 0>
__device__ inline void add_block_sums(const float (&partial)[Count], float* sums) {
  __shared__ float scratch[threads_per_block];
  for (int k = 0; k < Count; ++k) {
    const float total = block_reduce(partial[k], scratch);
    if (threadIdx.x == 0)
      atomicAdd(&sums[First + k], total);
  }
}

}  // namespace troupe::kernels::cuda_backend
