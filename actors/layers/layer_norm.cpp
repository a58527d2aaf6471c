// layer_norm.cpp: layer normalisation over the last dimension, as torch.nn.LayerNorm(D):
// y = (x - mean) / sqrt(var + eps) * weight + bias per row of D values (per sample for
// (D), per position for a sequence (T, D)).
//
// Parameters: weight (D), starting at ones, and bias (D), at zeros. Settings: eps = 1e-5.
// Forward saves x and each row's mean and 1/std for backward.
#include <memory>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class layer_norm final : public layer {
 public:
  explicit layer_norm(layer_settings& settings)
      : eps_(static_cast<float>(settings.number("eps", 1e-5, 1e-12, 1.0))) {}

  std::string type() const override { return "layer_norm"; }
  shape_t output_shape(const shape_t& input) const override { return input; }

  std::vector<param_spec> parameters(const shape_t& input) const override {
    const auto d = input.back();
    return {{"weight", {d}, init_kind::ones, d, d}, {"bias", {d}, init_kind::zeros, d, d}};
  }

  void bind(device_type type) override {
    forward_ = kernels::lookup<kernels::ops::layer_norm_forward>(type);
    backward_ = kernels::lookup<kernels::ops::layer_norm_backward>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    const int cols = static_cast<int>(x.shape().back());
    const int rows = static_cast<int>(x.numel() / cols);
    tensor mean = tensor::empty({rows}, dtype::f32, context.device);  // (rows)
    tensor rstd = tensor::empty({rows}, dtype::f32, context.device);  // (rows)
    forward_(context.kernels, rows, cols, x.f32(), params[0].f32(), params[1].f32(), eps_,
             y.f32(), mean.f32(), rstd.f32());
    if (context.training) {
      saved.push_back(x);
      saved.push_back(mean);
      saved.push_back(rstd);
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    const tensor& x = saved.at(0);
    const int cols = static_cast<int>(x.shape().back());
    const int rows = static_cast<int>(x.numel() / cols);
    backward_(context.kernels, rows, cols, x.f32(), params[0].f32(), saved.at(1).f32(),
              saved.at(2).f32(), dy.f32(), dx != nullptr ? dx->f32() : nullptr,
              accumulate ? 1.0f : 0.0f, grads[0].f32(), grads[1].f32());
  }

  double cost(const shape_t& input) const override {
    // About 8 operations per value forward and 12 backward.
    return 20.0 * static_cast<double>(element_count(input));
  }

 private:
  float eps_;
  kernels::ops::layer_norm_forward::function forward_ = nullptr;
  kernels::ops::layer_norm_backward::function backward_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("layer_norm", "normalises the last dimension, then weight and bias (settings: eps)",
                      [](layer_settings& s) { return std::make_unique<layer_norm>(s); });

}  // namespace troupe
