// swish.cpp: an example plugin layer, Swish y = x * sigmoid(b x) (Ramachandran et al. 2017),
// with a learnable per-feature b, and the CPU kernels it calls through troupe's dispatch table.
//
// b = beta * scale, where `beta` is a setting (default 1) and `scale` a parameter of the
// layer's input shape that starts at 1 and is learnt (learnable = false: no parameter,
// b = beta everywhere). With b = 1 this is SiLU; as b grows it tends to ReLU.
//
// Settings ([[model.layers]] type = "swish"):
//   beta = 1.0         the base slope b, > 0
//   learnable = true   learn a per-feature scale of beta
//
// The math is two kernels registered like troupe's own (troupe/kernel.hpp) under names of
// this plugin, so a CUDA build of the plugin would only add kernels/cuda-like files that
// register the same ops for device_type::cuda. Not here: a CUDA version, fused variants.
#include <cmath>
#include <memory>

#include "troupe/kernel.hpp"
#include "troupe/layer.hpp"

namespace custom_layers {

using troupe::kernels::context;

// ---- ops: names and signatures (what troupe/ops.hpp holds for troupe's own ops) ----

/// y(rows, cols) = x * sigmoid(b x), b(c) = beta * scale(c); scale may be null (all ones).
struct swish_forward {
  static constexpr const char* name = "custom_layers.swish_forward";
  using function = void (*)(const context&, std::int64_t rows, std::int64_t cols, const float* x,
                            const float* scale, float beta, float* y);
};

/// dx = dy * (s + b x s (1 - s)) with s = sigmoid(b x), if dx is not null;
/// dscale(c) (+)= sum over rows of dy * beta * x^2 s (1 - s), if dscale is not null
/// (accumulate: add to dscale instead of overwriting it).
struct swish_backward {
  static constexpr const char* name = "custom_layers.swish_backward";
  using function = void (*)(const context&, std::int64_t rows, std::int64_t cols, const float* x,
                            const float* scale, float beta, const float* dy, float* dx,
                            float* dscale, bool accumulate);
};

// ---- CPU kernels ----------------------------------------------------------------------

namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

void swish_forward_cpu(const context&, std::int64_t rows, std::int64_t cols, const float* x,
                       const float* scale, float beta, float* y) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = r * cols + c;
      const float b = scale ? beta * scale[c] : beta;
      y[i] = x[i] * sigmoid(b * x[i]);
    }
}

void swish_backward_cpu(const context&, std::int64_t rows, std::int64_t cols, const float* x,
                        const float* scale, float beta, const float* dy, float* dx,
                        float* dscale, bool accumulate) {
  if (dscale && !accumulate)
    for (std::int64_t c = 0; c < cols; ++c) dscale[c] = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = r * cols + c;
      const float b = scale ? beta * scale[c] : beta;
      const float s = sigmoid(b * x[i]);
      const float slope = s * (1.0f - s);  // d sigmoid(z) / dz
      if (dx) dx[i] = dy[i] * (s + b * x[i] * slope);
      if (dscale) dscale[c] += dy[i] * beta * x[i] * x[i] * slope;
    }
}

}  // namespace

TROUPE_REGISTER_KERNEL(swish_forward, troupe::kernels::device_type::cpu, swish_forward_cpu);
TROUPE_REGISTER_KERNEL(swish_backward, troupe::kernels::device_type::cpu, swish_backward_cpu);

// ---- the layer ------------------------------------------------------------------------

namespace {

class swish final : public troupe::layer {
 public:
  explicit swish(troupe::layer_settings& settings)
      : beta_(static_cast<float>(settings.number("beta", 1.0, 1e-6, 1e6))),
        learnable_(settings.boolean("learnable", true)) {}

  std::string type() const override { return "swish"; }

  // Elementwise: any per-sample shape, kept as is.
  troupe::shape_t output_shape(const troupe::shape_t& input) const override { return input; }

  std::vector<troupe::param_spec> parameters(const troupe::shape_t& input) const override {
    if (!learnable_) return {};
    const auto features = troupe::element_count(input);
    return {{"scale", input, troupe::init_kind::ones, features, features}};
  }

  // Resolved once per device type; a device type without these kernels fails here, with a
  // message naming the op and the device types that have it.
  void bind(troupe::device_type type) override {
    forward_ = troupe::kernels::lookup<swish_forward>(type);
    backward_ = troupe::kernels::lookup<swish_backward>(type);
  }

  void forward(const troupe::layer_context& context, const std::vector<troupe::tensor>& params,
               const troupe::tensor& x, const troupe::tensor& y,
               std::vector<troupe::tensor>& saved) const override {
    const auto rows = x.dim(0);
    forward_(context.kernels, rows, x.numel() / rows, x.f32(), scale(params), beta_, y.f32());
    if (context.training) saved.push_back(x);  // backward recomputes sigmoid from x
  }

  void backward(const troupe::layer_context& context, const std::vector<troupe::tensor>& params,
                const std::vector<troupe::tensor>& saved, const troupe::tensor& dy,
                troupe::tensor* dx, std::vector<troupe::tensor>& grads,
                bool accumulate) const override {
    const auto& x = saved.at(0);
    const auto rows = x.dim(0);
    backward_(context.kernels, rows, x.numel() / rows, x.f32(), scale(params), beta_, dy.f32(),
              dx ? dx->f32() : nullptr, learnable_ ? grads.at(0).f32() : nullptr, accumulate);
  }

  double cost(const troupe::shape_t& input) const override {
    // About 10 flops per element forward (exp included) and 15 backward.
    return 25.0 * static_cast<double>(troupe::element_count(input));
  }

 private:
  const float* scale(const std::vector<troupe::tensor>& params) const {
    return learnable_ ? params.at(0).f32() : nullptr;
  }

  float beta_;
  bool learnable_;
  swish_forward::function forward_ = nullptr;
  swish_backward::function backward_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("swish",
                      "x * sigmoid(beta * scale * x), scale learnt per feature "
                      "(settings: beta, learnable)",
                      [](troupe::layer_settings& s) { return std::make_unique<swish>(s); });

}  // namespace custom_layers
