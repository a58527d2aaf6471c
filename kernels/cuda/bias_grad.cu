// bias_grad.cu: the CUDA backend of ops::bias_grad, db(cols) = beta * db + column sums
// of dy(rows, cols).
//
// One block per 32 columns: its 32 x 16 threads read rows in coalesced 32-wide strips,
// each thread summing every 16th row of its column, then the 16 partial sums of a column
// are added in shared memory in a fixed order. No atomics, so the result is the same bits
// on every run (the equivalence tests compare runs). Very tall, very narrow matrices use
// few SMs; that is fine for bias shapes (rows = a micro-batch).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

constexpr int columns_per_block = 32;
constexpr int row_lanes = 16;

// ---- kernels ----

__global__ void bias_grad_kernel(int rows, int cols, const float* dy, float beta, float* db) {
  __shared__ float partial[row_lanes][columns_per_block];
  const int column = blockIdx.x * columns_per_block + threadIdx.x;
  float sum = 0.0f;
  if (column < cols)
    for (int row = threadIdx.y; row < rows; row += row_lanes)
      sum += dy[static_cast<std::int64_t>(row) * cols + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < row_lanes; ++lane)
      total += partial[lane][threadIdx.x];
    // beta is 0 or 1; with 0 the old db is not read, so it may hold garbage.
    db[column] = beta == 0.0f ? total : beta * db[column] + total;
  }
}

}  // namespace

// ---- launchers ----

void bias_grad(const context& ctx, int rows, int cols, const float* dy, float beta,
               float* db) {
  TROUPE_CHECK(rows >= 0 && cols >= 0,
               "bias_grad sizes must not be negative: rows=" << rows << " cols=" << cols);
  TROUPE_CHECK(beta == 0.0f || beta == 1.0f, "bias_grad beta must be 0 or 1, got " << beta);
  if (cols == 0)
    return;
  const dim3 block{columns_per_block, row_lanes};
  const dim3 grid{static_cast<unsigned int>((cols + columns_per_block - 1) / columns_per_block)};
  bias_grad_kernel<<<grid, block, 0, stream_of(ctx)>>>(rows, cols, dy, beta, db);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::bias_grad, device_type::cuda, bias_grad);

}  // namespace troupe::kernels::cuda_backend
