// launch.cuh: what every CUDA launcher of kernels/cuda/ shares: the stream of a kernel
// context, the block size and the grid size of a grid-stride loop.
//
// Launch policy only; no kernels live here, and nothing here touches the device at static
// initialisation (registration must work on a machine without a GPU).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "troupe/kernel.hpp"

namespace troupe::kernels::cuda_backend {

/// Threads per block of the elementwise kernels: a multiple of the warp size that keeps
/// several blocks resident per SM.
constexpr int threads_per_block = 256;

/// Grid-stride kernels never need more blocks than this: 32768 * 256 threads is ~30x the
/// resident threads of an H100/H200 (132 SMs * 2048), and the loop covers the rest.
constexpr std::int64_t max_grid_stride_blocks = 32768;

/// The stream a kernel runs on (nullptr: the legacy default stream).
inline cudaStream_t stream_of(const context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

/// Blocks for a grid-stride loop over n elements with threads_per_block threads each;
/// n must be positive (a grid of 0 blocks is a launch error).
inline unsigned int grid_stride_blocks(std::int64_t n) {
  const std::int64_t wanted = (n + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned int>(std::min(wanted, max_grid_stride_blocks));
}

}  // namespace troupe::kernels::cuda_backend

/// Checks that the launch just made on this thread was accepted (bad configuration,
/// missing kernel image for this GPU's architecture, a sticky earlier error).
#define TROUPE_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
