// attention.cpp: causal multi-head self-attention over a sequence (T, C), as GPT-2's
// attention block or torch.nn.MultiheadAttention(C, heads) with a causal mask: a fused QKV
// projection, scaled dot products masked to the past, softmax, and an output projection.
//
// Parameters (torch.nn.MultiheadAttention's names): in_proj_weight (3C, C) (xavier, as
// torch), in_proj_bias (3C), out_proj.weight (C, C) (torch's Linear default), out_proj.bias
// (C); biases start at zero. Settings: heads (required, dividing C), bias = true.
//
// Per micro-batch of b sequences, with H heads of size d = C / H:
//   qkv (b T, 3C) = x W_in^T + b_in              one GEMM
//   S_nh (T, T) = Q_nh K_nh^T                     b H GEMMs, read in place from qkv (ld 3C)
//   P = causal_softmax(S / sqrt(d))              one kernel over the b H T rows
//   O_nh (T, d) = P_nh V_nh                       b H GEMMs, written into o (b T, C) at h d
//   y (b T, C) = o W_out^T + b_out               one GEMM
// Forward saves x, qkv, P and o; backward runs the same GEMMs transposed. It does not
// split its backward (the weight gradient of W_in needs dqkv, the whole input path).
//
// Under [run] precision = "bf16" both projection weights arrive rounded to bf16
// (bf16_parameters) and the two projections' products run in bf16 with fp32 accumulation,
// as linear's do: x and o are rounded before their products and saved in bf16 (half the
// bytes), dy and dqkv are rounded once for their two products each; the biases, their
// gradients, qkv, the scores, the softmax and the weight gradients stay fp32. The scores'
// and mixing's GEMMs (per head, T x T x d) stay fp32 too.
#include <cmath>
#include <memory>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class attention final : public layer {
 public:
  explicit attention(layer_settings& settings)
      : where_(settings.where()),
        heads_(settings.integer("heads", 1, 1 << 12)),
        bias_(settings.boolean("bias", true)) {}

  std::string type() const override { return "attention"; }

  shape_t output_shape(const shape_t& input) const override {
    if (input.size() != 2)
      throw config_error(where_, "layer 'attention' takes sequences of shape (positions, "
                                 "channels), found " + shape_to_string(input));
    if (input[1] % heads_ != 0)
      throw config_error(where_, "layer 'attention': " + std::to_string(heads_) +
                                     " heads do not divide " + std::to_string(input[1]) +
                                     " channels");
    return input;
  }

  std::vector<param_spec> parameters(const shape_t& input) const override {
    const auto c = input.at(1);
    std::vector<param_spec> specs{
        {"in_proj_weight", {3 * c, c}, init_kind::xavier_uniform, c, 3 * c}};
    if (bias_)
      specs.push_back({"in_proj_bias", {3 * c}, init_kind::zeros, c, 3 * c});
    specs.push_back({"out_proj.weight", {c, c}, init_kind::torch_default, c, c});
    if (bias_)
      specs.push_back({"out_proj.bias", {c}, init_kind::zeros, c, c});
    return specs;
  }

  std::vector<std::string> bf16_parameters() const override {
    return {"in_proj_weight", "out_proj.weight"};
  }

  void bind(device_type type) override {
    gemm_ = kernels::lookup<kernels::ops::gemm>(type);
    gemm_bf16_ = kernels::lookup<kernels::ops::gemm_bf16>(type);
    bias_add_ = kernels::lookup<kernels::ops::bias_add>(type);
    bias_grad_ = kernels::lookup<kernels::ops::bias_grad>(type);
    fill_ = kernels::lookup<kernels::ops::fill>(type);
    softmax_ = kernels::lookup<kernels::ops::causal_softmax_forward>(type);
    softmax_backward_ = kernels::lookup<kernels::ops::causal_softmax_backward>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    const auto s = sizes_of(x);
    const weights w = weights_of(params);
    tensor qkv = tensor::empty({s.b, s.t, 3 * s.c}, dtype::f32, context.device);  // (b, T, 3C)
    tensor p = tensor::empty({s.b, heads_, s.t, s.t}, dtype::f32, context.device);  // (b, H, T, T)
    tensor o = tensor::empty({s.b, s.t, s.c}, dtype::f32, context.device);  // (b, T, C)
    // qkv (b T, 3C) = x (b T, C) W_in^T (C, 3C) + b_in
    const tensor x_w = in_weight_type(context, *w.in, x);
    linear_forward(context, s.rows, s.c, 3 * s.c, x_w, *w.in, w.in_bias, qkv.f32());
    for (int n = 0; n < s.b; ++n)
      for (int h = 0; h < s.h; ++h) {
        const float* q = qkv.f32() + head_offset(s, n, h, 0);
        const float* k = qkv.f32() + head_offset(s, n, h, 1);
        // S (T, T) = Q (T, d) K^T (d, T), into p; the softmax then runs in place.
        gemm_(context.kernels, false, true, s.t, s.t, s.d, 1.0f, q, 3 * s.c, k, 3 * s.c, 0.0f,
              p.f32() + score_offset(s, n, h), s.t);
      }
    softmax_(context.kernels, s.b * s.h * s.t, s.t, s.scale, p.f32(), p.f32());
    for (int n = 0; n < s.b; ++n)
      for (int h = 0; h < s.h; ++h)
        // O (T, d) = P (T, T) V (T, d), into o's columns h d .. h d + d
        gemm_(context.kernels, false, false, s.t, s.d, s.t, 1.0f, p.f32() + score_offset(s, n, h),
              s.t, qkv.f32() + head_offset(s, n, h, 2), 3 * s.c, 0.0f,
              o.f32() + (static_cast<std::int64_t>(n) * s.t) * s.c + h * s.d, s.c);
    // y (b T, C) = o (b T, C) W_out^T (C, C) + b_out
    const tensor o_w = in_weight_type(context, *w.out, o);
    linear_forward(context, s.rows, s.c, s.c, o_w, *w.out, w.out_bias, y.f32());
    if (context.training) {
      saved.push_back(x_w);
      saved.push_back(qkv);
      saved.push_back(p);
      saved.push_back(o_w);
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    const tensor &x = saved.at(0), &qkv = saved.at(1), &p = saved.at(2), &o = saved.at(3);
    const auto s = sizes_of(x);
    const weights w = weights_of(params);
    const float beta = accumulate ? 1.0f : 0.0f;
    float* d_in = grads[0].f32();
    float* d_in_bias = bias_ ? grads[1].f32() : nullptr;
    float* d_out = grads[bias_ ? 2 : 1].f32();
    float* d_out_bias = bias_ ? grads[3].f32() : nullptr;
    // Output projection: dW_out (C, C) += dy^T o; db_out += column sums; do = dy W_out.
    tensor d_o = tensor::empty({s.b, s.t, s.c}, dtype::f32, context.device);
    linear_backward(context, s.rows, s.c, s.c, o, *w.out, dy, beta, d_out, d_out_bias, d_o.f32());
    tensor d_p = tensor::empty({s.b, s.h, s.t, s.t}, dtype::f32, context.device);
    tensor d_qkv = tensor::empty({s.b, s.t, 3 * s.c}, dtype::f32, context.device);
    for (int n = 0; n < s.b; ++n)
      for (int h = 0; h < s.h; ++h) {
        const float* d_o_nh = d_o.f32() + (static_cast<std::int64_t>(n) * s.t) * s.c + h * s.d;
        // dP (T, T) = dO (T, d) V^T (d, T)
        gemm_(context.kernels, false, true, s.t, s.t, s.d, 1.0f, d_o_nh, s.c,
              qkv.f32() + head_offset(s, n, h, 2), 3 * s.c, 0.0f,
              d_p.f32() + score_offset(s, n, h), s.t);
        // dV (T, d) = P^T (T, T) dO (T, d)
        gemm_(context.kernels, true, false, s.t, s.d, s.t, 1.0f, p.f32() + score_offset(s, n, h),
              s.t, d_o_nh, s.c, 0.0f, d_qkv.f32() + head_offset(s, n, h, 2), 3 * s.c);
      }
    // dS = the softmax's backward (with its scale), in place of dP.
    softmax_backward_(context.kernels, s.b * s.h * s.t, s.t, s.scale, p.f32(), d_p.f32(),
                      d_p.f32());
    for (int n = 0; n < s.b; ++n)
      for (int h = 0; h < s.h; ++h) {
        const float* d_s = d_p.f32() + score_offset(s, n, h);
        // dQ (T, d) = dS (T, T) K (T, d); dK (T, d) = dS^T (T, T) Q (T, d)
        gemm_(context.kernels, false, false, s.t, s.d, s.t, 1.0f, d_s, s.t,
              qkv.f32() + head_offset(s, n, h, 1), 3 * s.c, 0.0f,
              d_qkv.f32() + head_offset(s, n, h, 0), 3 * s.c);
        gemm_(context.kernels, true, false, s.t, s.d, s.t, 1.0f, d_s, s.t,
              qkv.f32() + head_offset(s, n, h, 0), 3 * s.c, 0.0f,
              d_qkv.f32() + head_offset(s, n, h, 1), 3 * s.c);
      }
    // Input projection: dW_in (3C, C) += dqkv^T x; db_in += column sums; dx = dqkv W_in.
    linear_backward(context, s.rows, s.c, 3 * s.c, x, *w.in, d_qkv, beta, d_in, d_in_bias,
                    dx != nullptr ? dx->f32() : nullptr);
    // Note [the key bias]: the key part of in_proj_bias, (C) from C on, adds q_i . b_k to
    // every score of row i, which the softmax ignores: its gradient is exactly zero. The
    // column sums above give it float noise instead, whose sign follows the summation order,
    // and Adam turns noise into steps of size lr: one device and a pipeline drifted 1e-3
    // apart in 20 steps (troupe verify config/char_lm_pp2.toml). So it is written as zero.
    if (d_in_bias != nullptr)
      fill_(context.kernels, s.c, 0.0f, d_in_bias + s.c);
  }

  double cost(const shape_t& input) const override {
    // Projections: 4 C^2 multiply-adds per position (QKV 3, output 1); scores and mixing:
    // 2 T C per position. Times 2 flops, times 3 for forward + backward.
    const double t = static_cast<double>(input.at(0)), c = static_cast<double>(input.at(1));
    return 6.0 * t * (4.0 * c * c + 2.0 * t * c);
  }

 private:
  struct sizes {
    int b = 0, t = 0, c = 0, h = 0, d = 0, rows = 0;  // rows = b T
    float scale = 1.0f;                                // 1 / sqrt(d)
  };
  struct weights {
    const tensor* in = nullptr;  // f32, or bf16 in a bf16 run
    const float* in_bias = nullptr;
    const tensor* out = nullptr;  // likewise
    const float* out_bias = nullptr;
  };

  sizes sizes_of(const tensor& x) const {
    sizes s;
    s.b = static_cast<int>(x.dim(0));
    s.t = static_cast<int>(x.dim(1));
    s.c = static_cast<int>(x.dim(2));
    s.h = static_cast<int>(heads_);
    s.d = s.c / s.h;
    s.rows = s.b * s.t;
    s.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    return s;
  }

  weights weights_of(const std::vector<tensor>& params) const {
    weights w;
    w.in = &params[0];
    w.in_bias = bias_ ? params[1].f32() : nullptr;
    w.out = &params[bias_ ? 2 : 1];
    w.out_bias = bias_ ? params[3].f32() : nullptr;
    return w;
  }

  /// Where head h's Q (part 0), K (1) or V (2) of sequence n starts in qkv (b, T, 3C).
  static std::int64_t head_offset(const sizes& s, int n, int h, int part) {
    return static_cast<std::int64_t>(n) * s.t * 3 * s.c + part * s.c + h * s.d;
  }
  /// Where the (T, T) scores of sequence n, head h start in p (b, H, T, T).
  static std::int64_t score_offset(const sizes& s, int n, int h) {
    return (static_cast<std::int64_t>(n) * s.h + h) * s.t * s.t;
  }

  /// `t` (f32) in the type of `weight`: itself, or rounded to bf16 in a bf16 run.
  static tensor in_weight_type(const layer_context& context, const tensor& weight,
                               const tensor& t) {
    return weight.type() == dtype::bf16 ? rounded_to_bf16(context, t) : t;
  }

  /// C (m, n) = beta C + op(A) op(B), with A and B both f32 or both bf16 (products
  /// accumulated in f32 either way); C is f32.
  void product(const layer_context& context, bool transpose_a, bool transpose_b, int m, int n,
               int k, const tensor& a, int lda, const tensor& b, int ldb, float beta, float* c,
               int ldc) const {
    if (a.type() == dtype::bf16)
      gemm_bf16_(context.kernels, transpose_a, transpose_b, m, n, k, 1.0f, a.bf16(), lda, b.bf16(),
                 ldb, beta, c, ldc);
    else
      gemm_(context.kernels, transpose_a, transpose_b, m, n, k, 1.0f, a.f32(), lda, b.f32(), ldb,
            beta, c, ldc);
  }

  /// y (rows, out) = x (rows, in) W^T (in, out) + bias; x in W's type (in_weight_type).
  void linear_forward(const layer_context& context, int rows, int in, int out, const tensor& x,
                      const tensor& weight, const float* bias, float* y) const {
    product(context, false, true, rows, out, in, x, in, weight, in, 0.0f, y, out);
    if (bias != nullptr)
      bias_add_(context.kernels, rows, out, bias, y);
  }

  /// dW (out, in) = beta dW + dy^T x; dbias likewise; dx (rows, in) = dy W (when wanted).
  /// x as saved (in W's type); dy f32, rounded here once for both products in a bf16 run.
  void linear_backward(const layer_context& context, int rows, int in, int out, const tensor& x,
                       const tensor& weight, const tensor& dy, float beta, float* d_weight,
                       float* d_bias, float* dx) const {
    const tensor dy_w = in_weight_type(context, weight, dy);
    product(context, true, false, out, in, rows, dy_w, out, x, in, beta, d_weight, in);
    if (d_bias != nullptr)
      bias_grad_(context.kernels, rows, out, dy.f32(), beta, d_bias);
    if (dx != nullptr)
      product(context, false, false, rows, in, out, dy_w, out, weight, in, 0.0f, dx, in);
  }

  source_position where_;
  std::int64_t heads_;
  bool bias_;
  kernels::ops::gemm::function gemm_ = nullptr;
  kernels::ops::gemm_bf16::function gemm_bf16_ = nullptr;
  kernels::ops::bias_add::function bias_add_ = nullptr;
  kernels::ops::bias_grad::function bias_grad_ = nullptr;
  kernels::ops::fill::function fill_ = nullptr;
  kernels::ops::causal_softmax_forward::function softmax_ = nullptr;
  kernels::ops::causal_softmax_backward::function softmax_backward_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("attention",
                      "causal multi-head self-attention over (positions, channels) (settings: "
                      "heads, bias)",
                      [](layer_settings& s) { return std::make_unique<attention>(s); });

}  // namespace troupe
