// relu.cpp: y = max(x, 0) and its backward dx = (x > 0) * dy, on the CPU.
//
// NaN propagates through the forward (as torch.relu does), so a diverging run shows up
// in the loss instead of being masked to zero. The backward reads x, or y when x is null
// (their signs agree), so a layer may keep either one. Both directions may run in place
// (y == x, dx == dy); partially overlapping buffers are not supported.
//
// The bf16 pair (a bf16 run's activations) does the same on bfloat16 bit patterns: each
// output is its input's bits or +0, so it is exact, with the f32 kernels' rule for NaN and -0.
#include "kernels/cpu/bf16_bits.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

// `x < 0 ? 0 : x` rather than `x > 0 ? x : 0`: the former keeps NaN.
TROUPE_VECTOR_CLONES
void relu_out_of_place(std::int64_t n, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

TROUPE_VECTOR_CLONES
void relu_in_place(std::int64_t n, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

TROUPE_VECTOR_CLONES
void mask_out_of_place(std::int64_t n, const float* __restrict sign, const float* __restrict dy,
                       float* __restrict dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = sign[i] > 0.0f ? dy[i] : 0.0f;
}

TROUPE_VECTOR_CLONES
void mask_in_place(std::int64_t n, const float* __restrict sign, float* __restrict dy_dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dy_dx[i] = sign[i] > 0.0f ? dy_dx[i] : 0.0f;
}

void relu_forward(const context&, std::int64_t n, const float* x, float* y) {
  if (x == y)
    relu_in_place(n, y);
  else
    relu_out_of_place(n, x, y);
}

void relu_backward(const context&, std::int64_t n, const float* x, const float* y,
                   const float* dy, float* dx) {
  const float* sign = x != nullptr ? x : y;
  TROUPE_CHECK(sign != nullptr || n == 0, "relu_backward needs x or y; both are null");
  if (dx == dy)
    mask_in_place(n, sign, dx);
  else
    mask_out_of_place(n, sign, dy, dx);
}

// Over bf16 the in-place and out-of-place loops are one: each element is read before it
// is written, and no other element is read.
TROUPE_VECTOR_CLONES
void relu_bf16(std::int64_t n, const std::uint16_t* x, std::uint16_t* y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = widen_bits(x[i]) < 0.0f ? std::uint16_t{0} : x[i];
}

TROUPE_VECTOR_CLONES
void mask_bf16(std::int64_t n, const std::uint16_t* __restrict sign, const std::uint16_t* dy,
               std::uint16_t* dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = widen_bits(sign[i]) > 0.0f ? dy[i] : std::uint16_t{0};
}

void relu_forward_bf16(const context&, std::int64_t n, const std::uint16_t* x, std::uint16_t* y) {
  relu_bf16(n, x, y);
}

void relu_backward_bf16(const context&, std::int64_t n, const std::uint16_t* x,
                        const std::uint16_t* y, const std::uint16_t* dy, std::uint16_t* dx) {
  const std::uint16_t* sign = x != nullptr ? x : y;
  TROUPE_CHECK(sign != nullptr || n == 0, "relu_backward_bf16 needs x or y; both are null");
  mask_bf16(n, sign, dy, dx);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::relu_forward, device_type::cpu, relu_forward);
TROUPE_REGISTER_KERNEL(ops::relu_backward, device_type::cpu, relu_backward);
TROUPE_REGISTER_KERNEL(ops::relu_forward_bf16, device_type::cpu, relu_forward_bf16);
TROUPE_REGISTER_KERNEL(ops::relu_backward_bf16, device_type::cpu, relu_backward_bf16);

}  // namespace troupe::kernels::cpu
