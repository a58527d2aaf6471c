// max_pool2d.cpp: max pooling forward (with the argmax backward needs) and backward, on the
// CPU.
//
// Forward scans each window in row-major order and keeps the first maximum; a NaN wins and
// stays (as torch.nn.MaxPool2d), so a diverging run shows in the loss. Padding is skipped,
// which is -infinity padding. Backward adds dy into dx at the argmax, output by output, in
// a fixed order.
//
// Note [max pooling in bf16]
// A bf16 run's activations (Note [bf16 activations] in actors/training/layer_actor.cpp) are
// pooled by the f32 kernels above, a slice of planes at a time: the slice widened into a
// float buffer that stays in cache (64 KiB, kept by the thread: a fresh one each call was
// memory from the kernel, zeroed page by page, 5% of a conv net's bf16 step), pooled, and the
// maxima narrowed back by their top 16 bits, exact since each is one of the slice's bf16
// values. So the forward keeps the f32 kernel's rules (first maximum, NaN wins) and its 2x2
// passes. Where windows overlap, the backward scatters the widened dy the same way and
// rounds each pixel's sum once. Where they do not (stride >= kernel, the usual pooling), a
// pixel gets at most one dy, and float(0) + dy rounded back is dy's own bits but for -0
// (+0) and a NaN (quieted): the backward writes those bits directly, no floats at all.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TROUPE_MAX_POOL_AVX512 1
#endif

#include "kernels/cpu/bf16_bits.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

/// One window element for a row of n outputs: best[o] and at[o] take the pixel
/// source[o * stride] (index index0 + o * stride in its plane) when it is larger, or the
/// first NaN (a NaN best is never replaced: NaN > x is false). Elements visited in the
/// window's row-major order keep the first maximum. Written as selects over independent
/// outputs so that it vectorises: as a scan of each window with branches, the coin-flip
/// comparisons of real data made this kernel 18% of a conv net's step (perf,
/// config/fashion_cnn.toml).
TROUPE_VECTOR_CLONES
void select_larger(int n, const float* __restrict source, int stride, std::int32_t index0,
                   float* __restrict best, std::int32_t* __restrict at) {
  for (int o = 0; o < n; ++o) {
    const float value = source[o * stride];
    const bool take = value > best[o] || (value != value && best[o] == best[o]);
    best[o] = take ? value : best[o];
    at[o] = take ? index0 + o * stride : at[o];
  }
}

// Note [2x2 pooling in two passes]
// The common 2x2 window of stride 2 over a plane of even sides runs in two passes instead
// of four select_larger sweeps: the larger of each horizontal pair, over the whole plane at
// once (its pairs are consecutive floats, so the loop is long and vectorises), then the
// larger of each vertical pair of those. Each output's window is scanned in row-major order
// either way and the result is the same, first maximum and NaN rule included: the pair of
// the top row wins unless the bottom row's is larger or a NaN where the top's is not, and
// within a pair likewise. One output row is 14 or 7 outputs in config/fashion_cnn.toml, fewer
// than a vector of AVX-512 holds, so the four sweeps ran scalar: max pooling was 13.8% of
// that net's bf16 step (perf).

/// best[k], at[k]: the first larger of x[2k] and x[2k+1] (a NaN winning over a number) and
/// its index, 2k or 2k + 1.
TROUPE_VECTOR_CLONES
void pair_larger(std::int64_t n, const float* __restrict x, float* __restrict best,
                 std::int32_t* __restrict at) {
  for (std::int64_t k = 0; k < n; ++k) {
    const float a = x[2 * k], b = x[2 * k + 1];
    const bool take = b > a || (b != b && a == a);
    best[k] = take ? b : a;
    at[k] = static_cast<std::int32_t>(2 * k) + (take ? 1 : 0);
  }
}

/// y[o], argmax[o]: the bottom pair (bottom, bottom_at) where it is larger than the top pair
/// (or a NaN where the top is not), else the top.
TROUPE_VECTOR_CLONES
void rows_larger(int n, const float* __restrict top, const std::int32_t* __restrict top_at,
                 const float* __restrict bottom, const std::int32_t* __restrict bottom_at,
                 float* __restrict y, std::int32_t* __restrict argmax) {
  for (int o = 0; o < n; ++o) {
    const bool take = bottom[o] > top[o] || (bottom[o] != bottom[o] && top[o] == top[o]);
    y[o] = take ? bottom[o] : top[o];
    argmax[o] = take ? bottom_at[o] : top_at[o];
  }
}

// rows_larger for every output row of a plane: out_h rows of out_w outputs from the 2 out_h
// rows of pairs in best and at.
void vertical_pairs(int out_h, int out_w, const float* best, const std::int32_t* at, float* y,
                    std::int32_t* argmax) {
  for (int oh = 0; oh < out_h; ++oh) {
    const std::int64_t top = static_cast<std::int64_t>(2 * oh) * out_w, bottom = top + out_w;
    rows_larger(out_w, best + top, at + top, best + bottom, at + bottom, y + oh * out_w,
                argmax + oh * out_w);
  }
}

#ifdef TROUPE_MAX_POOL_AVX512
// vertical_pairs in AVX-512 vectors of 16 outputs, the rest of a row under a mask. The
// conv net's output rows (14 and 7 outputs) are shorter than one vector: rows_larger's clones
// ran them in their scalar remainder loop, a branch per output on the comparison, and that
// loop was 11% of config/fashion_cnn.toml's bf16 step (perf, AMD EPYC VM, 2026-12-07).
__attribute__((target("avx512f"))) void vertical_pairs_avx512(int out_h, int out_w,
                                                              const float* best,
                                                              const std::int32_t* at, float* y,
                                                              std::int32_t* argmax) {
  for (int oh = 0; oh < out_h; ++oh) {
    const float* top = best + static_cast<std::int64_t>(2 * oh) * out_w;
    const float* bottom = top + out_w;
    const std::int32_t* top_at = at + static_cast<std::int64_t>(2 * oh) * out_w;
    const std::int32_t* bottom_at = top_at + out_w;
    float* y_row = y + static_cast<std::int64_t>(oh) * out_w;
    std::int32_t* argmax_row = argmax + static_cast<std::int64_t>(oh) * out_w;
    for (int o = 0; o < out_w; o += 16) {
      const int left = out_w - o;
      const auto lanes = static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 t = _mm512_maskz_loadu_ps(lanes, top + o);
      const __m512 b = _mm512_maskz_loadu_ps(lanes, bottom + o);
      // rows_larger's rule: the bottom where larger, or a NaN where the top is not.
      const __mmask16 take = _mm512_cmp_ps_mask(b, t, _CMP_GT_OQ) |
                             (_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q) &
                              _mm512_cmp_ps_mask(t, t, _CMP_ORD_Q));
      _mm512_mask_storeu_ps(y_row + o, lanes, _mm512_mask_blend_ps(take, t, b));
      const __m512i t_at = _mm512_maskz_loadu_epi32(lanes, top_at + o);
      const __m512i b_at = _mm512_maskz_loadu_epi32(lanes, bottom_at + o);
      _mm512_mask_storeu_epi32(argmax_row + o, lanes, _mm512_mask_blend_epi32(take, t_at, b_at));
    }
  }
}
#endif

bool is_even_2x2(const window2d& w) {
  return w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2 && w.pad_h == 0 &&
         w.pad_w == 0 && w.height % 2 == 0 && w.width % 2 == 0;
}

// Note [2x2 pooling in two passes], over `planes` planes of x.
void max_pool_2x2(std::int64_t planes, const window2d& w, const float* x, float* y,
                  std::int32_t* argmax) {
  const int out_h = w.height / 2, out_w = w.width / 2;
  const std::int64_t pairs = static_cast<std::int64_t>(w.height) * out_w;
  std::vector<float> best(static_cast<std::size_t>(pairs));
  std::vector<std::int32_t> at(static_cast<std::size_t>(pairs));
  auto vertical = vertical_pairs;
#ifdef TROUPE_MAX_POOL_AVX512
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512)
    vertical = vertical_pairs_avx512;
#endif
  for (std::int64_t p = 0; p < planes; ++p) {
    pair_larger(pairs, x + p * w.height * w.width, best.data(), at.data());
    vertical(out_h, out_w, best.data(), at.data(), y + p * out_h * out_w,
             argmax + p * out_h * out_w);
  }
}

/// The first maximum of one window clipped to the image (rows [h_first, h_last), columns
/// [w_first, w_last)), for windows that reach into the padding.
float clipped_window_max(const float* image, int width, int h_first, int h_last, int w_first,
                         int w_last, std::int32_t& where) {
  float best = image[h_first * width + w_first];
  where = h_first * width + w_first;
  for (int h = h_first; h < h_last; ++h)
    for (int c = w_first; c < w_last; ++c) {
      const float value = image[h * width + c];
      if (value > best || (value != value && best == best)) {
        best = value;
        where = h * width + c;
      }
    }
  return best;
}

void max_pool2d_forward(const context&, int batch, const window2d& w, const float* x, float* y,
                        std::int32_t* argmax) {
  check_window("max_pool2d_forward", batch, w);
  TROUPE_CHECK(w.pad_h < w.kernel_h && w.pad_w < w.kernel_w,
               "max_pool2d_forward: padding " << w.pad_h << "x" << w.pad_w
                                              << " leaves windows with no pixel (kernel "
                                              << w.kernel_h << "x" << w.kernel_w << ")");
  const int out_h = w.out_h(), out_w = w.out_w();
  const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
  if (is_even_2x2(w))
    return max_pool_2x2(planes, w, x, y, argmax);
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* image = x + p * w.height * w.width;
    float* y_plane = y + p * out_h * out_w;
    std::int32_t* argmax_plane = argmax + p * out_h * out_w;
    for (int oh = 0; oh < out_h; ++oh) {
      float* y_row = y_plane + oh * out_w;
      std::int32_t* argmax_row = argmax_plane + oh * out_w;
      if (w.pad_h == 0 && w.pad_w == 0) {
        // Every window lies inside the image: a whole output row at a time.
        const int top = oh * w.stride_h;
        for (int ow = 0; ow < out_w; ++ow) {
          y_row[ow] = image[top * w.width + ow * w.stride_w];
          argmax_row[ow] = top * w.width + ow * w.stride_w;
        }
        for (int i = 0; i < w.kernel_h; ++i)
          for (int j = i == 0 ? 1 : 0; j < w.kernel_w; ++j) {
            const std::int32_t index0 = (top + i) * w.width + j;
            select_larger(out_w, image + index0, w.stride_w, index0, y_row, argmax_row);
          }
        continue;
      }
      const int h0 = oh * w.stride_h - w.pad_h;
      const int h_first = std::max(h0, 0), h_last = std::min(h0 + w.kernel_h, w.height);
      for (int ow = 0; ow < out_w; ++ow) {
        const int w0 = ow * w.stride_w - w.pad_w;
        const int w_first = std::max(w0, 0), w_last = std::min(w0 + w.kernel_w, w.width);
        y_row[ow] = clipped_window_max(image, w.width, h_first, h_last, w_first, w_last,
                                       argmax_row[ow]);
      }
    }
  }
}

void max_pool2d_backward(const context&, int batch, const window2d& w, const float* dy,
                         const std::int32_t* argmax, float* dx) {
  check_window("max_pool2d_backward", batch, w);
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t out_plane = static_cast<std::int64_t>(w.out_h()) * w.out_w();
  const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
  std::fill(dx, dx + planes * plane, 0.0f);
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t o = 0; o < out_plane; ++o) {
      const std::int32_t where = argmax[p * out_plane + o];
      TROUPE_CHECK(where >= 0 && where < plane,
                   "max_pool2d_backward: argmax " << where << " is outside the " << w.height
                                                  << "x" << w.width << " plane");
      dx[p * plane + where] += dy[p * out_plane + o];
    }
}

TROUPE_VECTOR_CLONES
void pool_widen(std::int64_t n, const std::uint16_t* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = widen_bits(x[i]);
}

// The top half of each float: exact for floats that are bf16 values (a maximum).
TROUPE_VECTOR_CLONES
void pool_narrow(std::int64_t n, const float* __restrict x, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    y[i] = static_cast<std::uint16_t>(bits >> 16);
  }
}

TROUPE_VECTOR_CLONES
void pool_round(std::int64_t n, const float* __restrict x, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = round_bits(x[i]);
}

// Note [max pooling in bf16]: the planes of a batch in slices of `slice` planes, each as a
// window of that many channels; `pass(first plane, planes in the slice, its window)`.
template <class Pass>
void by_slices(const char* op, int batch, const window2d& w, Pass pass) {
  check_window(op, batch, w);
  const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t slice = std::max<std::int64_t>(1, (std::int64_t{16} << 10) / plane);
  for (std::int64_t first = 0; first < planes; first += slice) {
    window2d part = w;
    part.channels = static_cast<int>(std::min(slice, planes - first));
    pass(first, part);
  }
}

// A thread's buffer for the slices, given back when a slice of one huge plane grew it past
// 4 MiB.
class slice_buffer {
 public:
  float* get(std::int64_t floats) {
    buffer_.resize(static_cast<std::size_t>(floats));
    return buffer_.data();
  }
  void trim() {
    if (buffer_.capacity() > (std::size_t{1} << 20)) {
      buffer_.clear();
      buffer_.shrink_to_fit();
    }
  }

 private:
  std::vector<float> buffer_;
};

// dx = the bits of 0.0f + dy where each pixel has at most one dy (Note [max pooling in bf16]).
std::uint16_t zero_plus(std::uint16_t dy) {
  if (dy == 0x8000u)
    return 0;  // -0 + +0 is +0
  const bool nan = (dy & 0x7FFFu) > 0x7F80u;
  return nan ? static_cast<std::uint16_t>(dy | 0x0040u) : dy;
}

void max_pool2d_forward_bf16(const context& ctx, int batch, const window2d& w,
                             const std::uint16_t* x, std::uint16_t* y, std::int32_t* argmax) {
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t out_plane = static_cast<std::int64_t>(w.out_h()) * w.out_w();
  thread_local slice_buffer wide_buffer, maxima_buffer;
  by_slices("max_pool2d_forward_bf16", batch, w, [&](std::int64_t first, const window2d& part) {
    float* wide = wide_buffer.get(part.channels * plane);
    float* maxima = maxima_buffer.get(part.channels * out_plane);
    pool_widen(part.channels * plane, x + first * plane, wide);
    max_pool2d_forward(ctx, 1, part, wide, maxima, argmax + first * out_plane);
    pool_narrow(part.channels * out_plane, maxima, y + first * out_plane);
  });
  wide_buffer.trim();
  maxima_buffer.trim();
}

void max_pool2d_backward_bf16(const context& ctx, int batch, const window2d& w,
                              const std::uint16_t* dy, const std::int32_t* argmax,
                              std::uint16_t* dx) {
  const std::int64_t plane = static_cast<std::int64_t>(w.height) * w.width;
  const std::int64_t out_plane = static_cast<std::int64_t>(w.out_h()) * w.out_w();
  if (w.stride_h >= w.kernel_h && w.stride_w >= w.kernel_w) {  // windows apart
    check_window("max_pool2d_backward_bf16", batch, w);
    const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
    std::fill(dx, dx + planes * plane, std::uint16_t{0});
    for (std::int64_t p = 0; p < planes; ++p)
      for (std::int64_t o = 0; o < out_plane; ++o) {
        const std::int32_t where = argmax[p * out_plane + o];
        TROUPE_CHECK(where >= 0 && where < plane, "max_pool2d_backward_bf16: argmax "
                                                      << where << " is outside the " << w.height
                                                      << "x" << w.width << " plane");
        dx[p * plane + where] = zero_plus(dy[p * out_plane + o]);
      }
    return;
  }
  thread_local slice_buffer wide_buffer, sums_buffer;
  by_slices("max_pool2d_backward_bf16", batch, w, [&](std::int64_t first, const window2d& part) {
    float* wide = wide_buffer.get(part.channels * out_plane);
    float* sums = sums_buffer.get(part.channels * plane);
    pool_widen(part.channels * out_plane, dy + first * out_plane, wide);
    max_pool2d_backward(ctx, 1, part, wide, argmax + first * out_plane, sums);
    pool_round(part.channels * plane, sums, dx + first * plane);
  });
  wide_buffer.trim();
  sums_buffer.trim();
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::max_pool2d_forward, device_type::cpu, max_pool2d_forward);
TROUPE_REGISTER_KERNEL(ops::max_pool2d_backward, device_type::cpu, max_pool2d_backward);
TROUPE_REGISTER_KERNEL(ops::max_pool2d_forward_bf16, device_type::cpu, max_pool2d_forward_bf16);
TROUPE_REGISTER_KERNEL(ops::max_pool2d_backward_bf16, device_type::cpu, max_pool2d_backward_bf16);

}  // namespace troupe::kernels::cpu
