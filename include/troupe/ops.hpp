// ops.hpp: every op troupe dispatches, declared once with its name and signature.
//
// Conventions for all ops:
// - Matrices are row-major and dense unless a leading dimension says otherwise.
// - Pointers are device pointers of the device the kernel is registered for.
// - Scalars an op produces (a loss sum, a count) are written to device memory, so that
//   a CUDA kernel never forces the host to wait; the caller reads them after the stream
//   has reached that point.
// - Nothing here allocates; outputs are provided by the caller.
//
// Backends implement an op in kernels/<backend>/<op>.{cpp,cu} and register it there
// (see kernels.hpp). This header holds declarations only.
#pragma once

#include <cstdint>

#include "troupe/kernel.hpp"

namespace troupe::kernels {

/// Hyper-parameters of one SGD step, with PyTorch's semantics (torch.optim.SGD):
///   d = g + weight_decay * p
///   if momentum != 0: buf = first_step ? d : momentum * buf + (1 - dampening) * d
///                     d = nesterov ? d + momentum * buf : buf
///   p -= lr * d
struct sgd_hyper {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;
};

/// Hyper-parameters of one Adam / AdamW step, with PyTorch's semantics
/// (torch.optim.Adam and torch.optim.AdamW):
///   Adam : g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
///   m = beta1 * m + (1 - beta1) * g
///   v = beta2 * v + (1 - beta2) * g * g
///   p -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
struct adam_hyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // true: AdamW
  std::int64_t step = 1;   // 1-based count of updates including this one
};

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

/// The geometry of a 2-D sliding window over images (B, C, H, W), stored row-major (NCHW):
/// a convolution's receptive field or a pooling window, with dilation 1. Output size per
/// axis is floor((in + 2 pad - kernel) / stride) + 1, as torch.nn.Conv2d and MaxPool2d.
/// Kernels check that every size is positive and the window fits the padded image.
struct window2d {
  int channels = 1;  // C
  int height = 1;    // H
  int width = 1;     // W
  int kernel_h = 1;  // KH
  int kernel_w = 1;  // KW
  int stride_h = 1;
  int stride_w = 1;
  int pad_h = 0;
  int pad_w = 0;

  // OH and OW (also called from CUDA kernels).
  TROUPE_HOST_DEVICE int out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  TROUPE_HOST_DEVICE int out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

/// A label no row has (labels are class indices, never negative): the loss ignores no row.
constexpr std::int32_t no_ignore_index = INT32_MIN;

/// How softmax_xent reads its labels, as torch.nn.functional.cross_entropy does.
struct xent_options {
  /// epsilon in [0, 1]: each row's target is (1 - epsilon) onehot(label) + epsilon / classes.
  float label_smoothing = 0.0f;
  /// Rows whose label is this count for nothing: no loss, no gradient (0), not counted.
  std::int32_t ignore_index = no_ignore_index;
};

/// A convolution's operands: `x`, `w` and `dy` hold floats (f32) or bfloat16 bit patterns
/// (bf16: [run] precision = "bf16"), products accumulated in f32; biases and parameter
/// gradients are always f32. The same type names the dtype of an output y or dx: f32, or bf16
/// (a bf16 run's activations: the f32 result rounded to nearest, ties to even, by the
/// reorder into troupe's layout).
enum class conv_operands : std::uint8_t { f32, bf16 };

namespace ops {

/// C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, row-major; op(X) = X or X^T.
/// lda/ldb/ldc are the row strides of A, B and C as stored.
struct gemm {
  static constexpr const char* name = "gemm";
  using function = void (*)(const context&, bool transpose_a, bool transpose_b, int m, int n, int k,
                            float alpha, const float* a, int lda, const float* b, int ldb,
                            float beta, float* c, int ldc);
};

/// The gemm of bf16 A and B, products accumulated in f32, C in f32 ([run] precision = "bf16"):
/// C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, as gemm. A and B hold bfloat16
/// bit patterns (dtype::bf16).
struct gemm_bf16 {
  static constexpr const char* name = "gemm_bf16";
  using function = void (*)(const context&, bool transpose_a, bool transpose_b, int m, int n, int k,
                            float alpha, const std::uint16_t* a, int lda, const std::uint16_t* b,
                            int ldb, float beta, float* c, int ldc);
};

/// y = bf16(x) over n elements, rounded to the nearest bfloat16, ties to even; infinities
/// stay infinite, NaN stays NaN (quiet), values beyond bf16's largest finite become
/// infinite, as PyTorch's .to(torch.bfloat16).
struct to_bf16 {
  static constexpr const char* name = "to_bf16";
  using function = void (*)(const context&, std::int64_t n, const float* x, std::uint16_t* y);
};

/// y = float(x) over n elements: exact (a bfloat16 is a float with 16 low zero bits).
struct from_bf16 {
  static constexpr const char* name = "from_bf16";
  using function = void (*)(const context&, std::int64_t n, const std::uint16_t* x, float* y);
};

/// z = bf16(float(x) + y) over n elements: the sum taken in float, rounded as to_bf16
/// rounds; with `keep`, also y = float(z). One pass of the ring all-reduce in bf16: a
/// received partial sum x added to this replica's y and rounded to send on, the full sum
/// kept rounded as everyone's (Note [a ring in bf16] in actors/averaging/ring_collective.cpp).
struct add_to_bf16 {
  static constexpr const char* name = "add_to_bf16";
  using function = void (*)(const context&, std::int64_t n, const std::uint16_t* x, float* y,
                            std::uint16_t* z, bool keep);
};

/// y(rows, cols) += bias(cols) broadcast over rows.
struct bias_add {
  static constexpr const char* name = "bias_add";
  using function = void (*)(const context&, int rows, int cols, const float* bias, float* y);
};

/// db(cols) = beta * db + sum over rows of dy(rows, cols). beta is 0 or 1 (accumulate).
struct bias_grad {
  static constexpr const char* name = "bias_grad";
  using function = void (*)(const context&, int rows, int cols, const float* dy, float beta,
                            float* db);
};

/// Elementwise activation forward: y = f(x) over n elements. x and y may alias.
#define TROUPE_ACTIVATION_OP(op_name)                                                         \
  struct op_name##_forward {                                                                  \
    static constexpr const char* name = #op_name "_forward";                                  \
    using function = void (*)(const context&, std::int64_t n, const float* x, float* y);      \
  };                                                                                          \
  /** dx = f'(x) * dy; kernels read x or y = f(x), whichever is cheaper. */                   \
  struct op_name##_backward {                                                                 \
    static constexpr const char* name = #op_name "_backward";                                 \
    using function = void (*)(const context&, std::int64_t n, const float* x, const float* y, \
                              const float* dy, float* dx);                                    \
  }

TROUPE_ACTIVATION_OP(relu);
TROUPE_ACTIVATION_OP(gelu);  // exact erf form, as torch.nn.GELU()
TROUPE_ACTIVATION_OP(tanh);
#undef TROUPE_ACTIVATION_OP

/// relu_forward over bfloat16 bit patterns (a bf16 run's activations, Note [bf16
/// activations] in actors/training/layer_actor.cpp): y = x < 0 ? +0 : x, exact, NaN and -0
/// kept as relu_forward keeps them. x and y may alias. CPU only.
struct relu_forward_bf16 {
  static constexpr const char* name = "relu_forward_bf16";
  using function = void (*)(const context&, std::int64_t n, const std::uint16_t* x,
                            std::uint16_t* y);
};

/// relu_backward over bfloat16: dx = (x or y) > 0 ? dy : +0, exact; reads x, or y when x is
/// null. dy and dx may alias. CPU only.
struct relu_backward_bf16 {
  static constexpr const char* name = "relu_backward_bf16";
  using function = void (*)(const context&, std::int64_t n, const std::uint16_t* x,
                            const std::uint16_t* y, const std::uint16_t* dy, std::uint16_t* dx);
};

/// Unfolds images for convolution as a GEMM: x (B, C, H, W) to cols (B, C KH KW, OH OW),
/// cols[b][(c KH + i) KW + j][oh OW + ow] = x[b][c][oh sh - ph + i][ow sw - pw + j], or 0
/// where that falls in the padding.
struct im2col {
  static constexpr const char* name = "im2col";
  using function = void (*)(const context&, int batch, const window2d& window, const float* x,
                            float* cols);
};

/// im2col of bf16 images into bf16 cols (a bf16 convolution's unfolding): the same layout,
/// each entry the bits of its pixel, or 0 (+0.0) in the padding. Exact: im2col then to_bf16
/// gives the same bits as to_bf16 then im2col_bf16.
struct im2col_bf16 {
  static constexpr const char* name = "im2col_bf16";
  using function = void (*)(const context&, int batch, const window2d& window,
                            const std::uint16_t* x, std::uint16_t* cols);
};

/// Direct 2-D convolution (dilation 1, groups 1), whole batch at once: y (B, O, OH, OW) =
/// sum over (c, i, j) of w (O, C, KH, KW) and the window of x (B, C, H, W) (zeros in the
/// padding), plus bias (O) when bias is not null. Overwrites y (NaN in it included). CPU only
/// (Note [direct convolution] in kernels/cpu/conv2d.cpp): a CUDA device convolves by im2col
/// and gemm in the layer.
struct conv2d_forward {
  static constexpr const char* name = "conv2d_forward";
  using function = void (*)(const context&, conv_operands operands, int batch,
                            const window2d& window, int out_channels, const void* x, const void* w,
                            const float* bias, conv_operands output, void* y);
};

/// The input gradient of conv2d_forward: dx (B, C, H, W) = the sum over the outputs each
/// pixel fed of w times dy (B, O, OH, OW). Overwrites dx. CPU only, as conv2d_forward.
struct conv2d_backward_data {
  static constexpr const char* name = "conv2d_backward_data";
  using function = void (*)(const context&, conv_operands operands, int batch,
                            const window2d& window, int out_channels, const void* dy, const void* w,
                            conv_operands output, void* dx);
};

/// The parameter gradients of conv2d_forward: dw (O, C, KH, KW) = beta * dw + the sum over the
/// batch and the outputs of dy times the window of x; db (O) = beta * db + the sum of dy over
/// batch and pixels, when db is not null. beta is 0 or 1 (accumulate). CPU only.
struct conv2d_backward_weights {
  static constexpr const char* name = "conv2d_backward_weights";
  using function = void (*)(const context&, conv_operands operands, int batch,
                            const window2d& window, int out_channels, const void* x, const void* dy,
                            float beta, float* dw, float* db);
};

/// The ops no CUDA kernel implements, each with the way a CUDA device does the same work
/// instead (tests/kernels/ops_coverage_test.cpp holds this list to the backends).
/// A bf16 activation op's layer widens what reaches it on a CUDA device and runs its f32 op.
inline constexpr const char* cpu_only_ops[] = {
    "conv2d_forward",     "conv2d_backward_data",    "conv2d_backward_weights", "relu_forward_bf16",
    "relu_backward_bf16", "max_pool2d_forward_bf16", "max_pool2d_backward_bf16"};

/// The adjoint of im2col: x (B, C, H, W) = the sum of every cols entry im2col would have
/// read from that pixel (overwrites x). Deterministic: a fixed order of additions.
struct col2im {
  static constexpr const char* name = "col2im";
  using function = void (*)(const context&, int batch, const window2d& window,
                            const float* cols, float* x);
};

/// Max pooling: y (B, C, OH, OW) = the maximum of each window of x (B, C, H, W); padding
/// counts as -infinity. argmax (B, C, OH, OW) gets the index h W + w of that maximum in its
/// (H, W) plane, the first one in row-major order on ties; NaN wins, as in torch.
struct max_pool2d_forward {
  static constexpr const char* name = "max_pool2d_forward";
  using function = void (*)(const context&, int batch, const window2d& window, const float* x,
                            float* y, std::int32_t* argmax);
};

/// dx (B, C, H, W) = the sum of dy over the outputs whose argmax is that pixel (overwrites).
struct max_pool2d_backward {
  static constexpr const char* name = "max_pool2d_backward";
  using function = void (*)(const context&, int batch, const window2d& window, const float* dy,
                            const std::int32_t* argmax, float* dx);
};

/// max_pool2d_forward over bfloat16 bit patterns: the same maxima (exact: each y is one of
/// its window's x) and the same argmax. CPU only.
struct max_pool2d_forward_bf16 {
  static constexpr const char* name = "max_pool2d_forward_bf16";
  using function = void (*)(const context&, int batch, const window2d& window,
                            const std::uint16_t* x, std::uint16_t* y, std::int32_t* argmax);
};

/// max_pool2d_backward over bfloat16: each pixel's sum of dy taken in float, in output
/// order, then rounded to bf16 once (exact where windows do not overlap). CPU only.
struct max_pool2d_backward_bf16 {
  static constexpr const char* name = "max_pool2d_backward_bf16";
  using function = void (*)(const context&, int batch, const window2d& window,
                            const std::uint16_t* dy, const std::int32_t* argmax, std::uint16_t* dx);
};

/// Average pooling: y (B, C, OH, OW) = the sum of each window of x divided by KH KW
/// (padding counts as zeros and is counted: torch's count_include_pad = True).
struct avg_pool2d_forward {
  static constexpr const char* name = "avg_pool2d_forward";
  using function = void (*)(const context&, int batch, const window2d& window, const float* x,
                            float* y);
};

/// dx (B, C, H, W) = the sum of dy / (KH KW) over the windows containing that pixel
/// (overwrites).
struct avg_pool2d_backward {
  static constexpr const char* name = "avg_pool2d_backward";
  using function = void (*)(const context&, int batch, const window2d& window, const float* dy,
                            float* dx);
};

/// Layer normalisation over the last dimension, as torch.nn.LayerNorm: for each row of
/// x(rows, cols), mean[r] and rstd[r] = 1 / sqrt(biased variance + eps) are written, and
/// y = (x - mean) * rstd * gamma + beta (gamma, beta: (cols)).
struct layer_norm_forward {
  static constexpr const char* name = "layer_norm_forward";
  using function = void (*)(const context&, int rows, int cols, const float* x,
                            const float* gamma, const float* beta, float eps, float* y,
                            float* mean, float* rstd);
};

/// Its backward, from forward's mean and rstd: dx = rstd (g - mean(g) - xhat mean(g xhat))
/// with g = dy gamma and xhat = (x - mean) rstd, row by row (dx may be null); dgamma =
/// accumulate * dgamma + sum over rows of dy xhat and dbeta likewise of dy (both may be null;
/// accumulate is 0 or 1).
struct layer_norm_backward {
  static constexpr const char* name = "layer_norm_backward";
  using function = void (*)(const context&, int rows, int cols, const float* x,
                            const float* gamma, const float* mean, const float* rstd,
                            const float* dy, float* dx, float accumulate, float* dgamma,
                            float* dbeta);
};

/// Causal softmax of attention scores: rows of x(rows, cols) are the queries of sequences
/// of cols positions, row r being position t = r mod cols; y[r][j] = softmax over j <= t
/// of scale x[r][j], and 0 for j > t (the future is masked). y may be x (in place).
struct causal_softmax_forward {
  static constexpr const char* name = "causal_softmax_forward";
  using function = void (*)(const context&, int rows, int cols, float scale, const float* x,
                            float* y);
};

/// Its backward from y: dx = scale y (dy - sum over j of dy y), row by row (0 where masked).
/// dx may be dy (in place).
struct causal_softmax_backward {
  static constexpr const char* name = "causal_softmax_backward";
  using function = void (*)(const context&, int rows, int cols, float scale, const float* y,
                            const float* dy, float* dx);
};

/// Dropout with masks keyed by what they are for, not by who draws them: element c of row
/// r (rows are samples, cols their values) is kept when the 24-bit draw of
/// splitmix64(key ^ splitmix64((first_row + r) cols + c)) >> 40 is at least p 2^24
/// (kernels/dropout_hash.hpp), and y = kept ? x / (1 - p) : 0. The backward is the same
/// call on dy with the same key and first_row. y may be x (in place); 0 <= p < 1.
struct dropout {
  static constexpr const char* name = "dropout";
  using function = void (*)(const context&, std::int64_t rows, std::int64_t cols, float p,
                            std::uint64_t key, std::int64_t first_row, const float* x, float* y);
};

/// Embedding lookup: y[r, :] = table[ids[r], :] + positions[r mod period, :] over rows of
/// dim values (positions may be null: no position term). ids are token ids stored as
/// floats, exact integers in [0, vocab): the CPU kernel checks them; the CUDA kernel
/// writes a row of zeros for one outside (no device-side error).
struct embedding_forward {
  static constexpr const char* name = "embedding_forward";
  using function = void (*)(const context&, std::int64_t rows, std::int64_t dim,
                            std::int64_t vocab, std::int64_t period, const float* ids,
                            const float* table, const float* positions, float* y);
};

/// The embedding's parameter gradients: dtable = beta dtable + sum over rows r with
/// ids[r] = t of dy[r, :] (row t), and likewise dpositions (period, dim) from rows r mod
/// period (skipped when null). beta is 0 (overwrite) or 1 (accumulate). The CPU kernel
/// sums rows in order; CUDA's atomic adds sum in any order.
struct embedding_backward {
  static constexpr const char* name = "embedding_backward";
  using function = void (*)(const context&, std::int64_t rows, std::int64_t dim,
                            std::int64_t vocab, std::int64_t period, const float* ids,
                            const float* dy, float beta, float* dtable, float* dpositions);
};

// Note [loss sums]: a loss op adds nothing up across calls and divides by nothing. It
// writes sums (device memory, so a CUDA kernel never makes the host wait): sums[0] the sum
// of the per-term losses, sums[1] the number of terms (rows counted, or elements), and
// from sums[2] on the sums its metrics need. The caller folds 1 / (the global batch's
// terms) into grad_scale and divides the sums itself; counts are exact in a float up to
// 2^24 terms a call.

/// Softmax cross-entropy over rows of logits(rows, classes) with integer labels(rows).
/// With t = (1 - eps) onehot(label) + eps / classes (xent_options), over counted rows:
///   sums[0] = sum of -sum_c t_c log softmax(logits)_c   (numerically stable)
///   sums[1] = rows counted (label != ignore_index)
/// If dlogits is not null: dlogits = grad_scale * (softmax(logits) - t), 0 on ignored rows.
/// A label outside [0, classes), not ignored, is a programmer error (checked on CPU).
struct softmax_xent {
  static constexpr const char* name = "softmax_xent";
  using function = void (*)(const context&, int rows, int classes, const float* logits,
                            const std::int32_t* labels, const xent_options& options,
                            float grad_scale, float* sums, float* dlogits);
};

/// *correct = number of rows, their label not ignore_index, whose argmax (first on ties)
/// equals the label (a float: exact up to 2^24 rows).
struct accuracy {
  static constexpr const char* name = "accuracy";
  using function = void (*)(const context&, int rows, int classes, const float* logits,
                            const std::int32_t* labels, std::int32_t ignore_index,
                            float* correct);
};

/// The regression losses, elementwise over n predictions x and targets y, d = x - y, as
/// torch.nn.functional's mse_loss, l1_loss and huber_loss define them (Note [loss sums]):
///   sums[0] = sum of the losses, sums[1] = n, sums[2] = sum d^2, sums[3] = sum |d|
///   dx (if not null) = grad_scale * d loss / dx
/// mse_loss: d^2, gradient 2 d. `delta` is unused.
struct mse_loss {
  static constexpr const char* name = "mse_loss";
  using function = void (*)(const context&, std::int64_t n, const float* x, const float* y,
                            float delta, float grad_scale, float* sums, float* dx);
};

/// l1_loss: |d|, gradient sign(d) (0 at d = 0). `delta` is unused.
struct l1_loss {
  static constexpr const char* name = "l1_loss";
  using function = mse_loss::function;
};

/// huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); gradient
/// clamp(d, -delta, delta). delta > 0.
struct huber_loss {
  static constexpr const char* name = "huber_loss";
  using function = mse_loss::function;
};

/// Binary cross-entropy on logits, elementwise over n logits x and targets y in [0, 1], as
/// torch.nn.functional.binary_cross_entropy_with_logits (Note [loss sums]):
///   loss = max(x, 0) - x y + log(1 + exp(-|x|))      (stable for any x)
///   sums[0] = sum of the losses, sums[1] = n, sums[2] = elements with (x > 0) == (y >= 0.5)
///   dx (if not null) = grad_scale * (sigmoid(x) - y)
struct bce_with_logits {
  static constexpr const char* name = "bce_with_logits";
  using function = void (*)(const context&, std::int64_t n, const float* x, const float* y,
                            float grad_scale, float* sums, float* dx);
};

// Note [out-of-place updates]: an update reads the current parameters `param` and writes
// the next version to `param_out`, in one pass. param_out may equal param (an update in
// place) or be a buffer disjoint from it (the optimizer actor publishes every version as
// a fresh tensor, and a version once sent is never written again); partial overlap is not
// allowed. When they differ, param is never written. Either way the results are
// bit-identical. The optimizer state (momentum buffer, m, v) is always updated in place.

/// One SGD step on n parameters: param_out = param - lr * d (see sgd_hyper and
/// Note [out-of-place updates]). momentum_buffer may be null when momentum == 0.
struct sgd_update {
  static constexpr const char* name = "sgd_update";
  using function = void (*)(const context&, std::int64_t n, const float* param, float* param_out,
                            const float* grad, float* momentum_buffer, const sgd_hyper& hyper);
};

/// One Adam/AdamW step on n parameters with moments m and v, updated in place; the new
/// parameters go to param_out (see adam_hyper and Note [out-of-place updates]).
struct adam_update {
  static constexpr const char* name = "adam_update";
  using function = void (*)(const context&, std::int64_t n, const float* param, float* param_out,
                            const float* grad, float* m, float* v, const adam_hyper& hyper);
};

/// y += alpha * x over n elements.
struct axpy {
  static constexpr const char* name = "axpy";
  using function = void (*)(const context&, std::int64_t n, float alpha, const float* x, float* y);
};

/// z = x + y over n elements. z may be x or y (not a partial overlap).
struct add {
  static constexpr const char* name = "add";
  using function = void (*)(const context&, std::int64_t n, const float* x, const float* y,
                            float* z);
};

/// x *= alpha over n elements.
struct scale {
  static constexpr const char* name = "scale";
  using function = void (*)(const context&, std::int64_t n, float alpha, float* x);
};

/// x = value over n elements.
struct fill {
  static constexpr const char* name = "fill";
  using function = void (*)(const context&, std::int64_t n, float value, float* x);
};

/// Copies bytes within one device.
struct copy {
  static constexpr const char* name = "copy";
  using function = void (*)(const context&, std::int64_t bytes, const void* src, void* dst);
};

}  // namespace ops
}  // namespace troupe::kernels
