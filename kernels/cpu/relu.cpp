// relu.cpp: y = max(x, 0) and its backward dx = (x > 0) * dy, on the CPU.
//
// NaN propagates through the forward (as torch.relu does), so a diverging run shows up
// in the loss instead of being masked to zero. The backward reads x, or y when x is null
// (their signs agree), so a layer may keep either one. Both directions may run in place
// (y == x, dx == dy); partially overlapping buffers are not supported.
//
// The bf16 pair (a bf16 run's activations) does the same on bfloat16 bit patterns: each
// output is its input's bits or +0, so it is exact, with the f32 kernels' rule for NaN and -0.
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

// Over bf16 the comparisons are on the bit patterns, in 16-bit lanes (a float comparison of
// widened values kept GCC from vectorising the mask: it was a quarter of a conv net's bf16
// step). x < 0 holds for the negative numbers, 0x8001 to 0xFF80 (-0 is 0x8000, a negative
// NaN above 0xFF80); x > 0 for the positive numbers and +infinity, 0x0001 to 0x7F80. Each is
// one unsigned comparison after a subtraction that wraps, made a mask of 16 ones or zeros
// (a select left a branch and a load under it in AVX-512F's clone, which has no 16-bit
// vector compares: 24% of the step, scalar).
inline std::uint16_t unless_negative(std::uint16_t h) {
  return static_cast<std::uint16_t>((static_cast<std::uint16_t>(h - 0x8001u) < 0x7F80u) -
                                    1);  // negative: 0, else all ones
}
inline std::uint16_t if_positive(std::uint16_t h) {
  return static_cast<std::uint16_t>(-(static_cast<std::uint16_t>(h - 0x0001u) < 0x7F80u));
}

TROUPE_VECTOR_CLONES
void relu_bf16_out_of_place(std::int64_t n, const std::uint16_t* __restrict x,
                            std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = x[i] & unless_negative(x[i]);
}

TROUPE_VECTOR_CLONES
void relu_bf16_in_place(std::int64_t n, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = y[i] & unless_negative(y[i]);
}

TROUPE_VECTOR_CLONES
void mask_bf16_out_of_place(std::int64_t n, const std::uint16_t* __restrict sign,
                            const std::uint16_t* __restrict dy, std::uint16_t* __restrict dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = dy[i] & if_positive(sign[i]);
}

TROUPE_VECTOR_CLONES
void mask_bf16_in_place(std::int64_t n, const std::uint16_t* __restrict sign,
                        std::uint16_t* __restrict dy_dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dy_dx[i] = dy_dx[i] & if_positive(sign[i]);
}

void relu_forward_bf16(const context&, std::int64_t n, const std::uint16_t* x, std::uint16_t* y) {
  if (x == y)
    relu_bf16_in_place(n, y);
  else
    relu_bf16_out_of_place(n, x, y);
}

void relu_backward_bf16(const context&, std::int64_t n, const std::uint16_t* x,
                        const std::uint16_t* y, const std::uint16_t* dy, std::uint16_t* dx) {
  const std::uint16_t* sign = x != nullptr ? x : y;
  TROUPE_CHECK(sign != nullptr || n == 0, "relu_backward_bf16 needs x or y; both are null");
  if (dx == dy)
    mask_bf16_in_place(n, sign, dx);
  else
    mask_bf16_out_of_place(n, sign, dy, dx);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::relu_forward, device_type::cpu, relu_forward);
TROUPE_REGISTER_KERNEL(ops::relu_backward, device_type::cpu, relu_backward);
TROUPE_REGISTER_KERNEL(ops::relu_forward_bf16, device_type::cpu, relu_forward_bf16);
TROUPE_REGISTER_KERNEL(ops::relu_backward_bf16, device_type::cpu, relu_backward_bf16);

}  // namespace troupe::kernels::cpu
