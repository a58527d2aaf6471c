// broken_layers_plugin.cpp: layers that are wrong in one way each, as a layer author might
// get them wrong, for the gradient check (runtime/model/layer_check.hpp): every one must
// fail `troupe check-layer NAME` at its default settings. Some errors are small in scale
// (a leaky ReLU without its slope is off by 0.01 * dy), which a check against the
// gradient's overall scale once let through; the rest are wrong in kind.
//
//   test_leaky_no_slope     dx = 0 for x < 0 (the slope's term dropped)
//   test_leaky_wrong_sign   dx = -slope * dy for x < 0 (one branch's sign)
//   test_tanh_missing_leak  y = tanh(x) + 0.01 x, dx without the 0.01
//   test_dense_transposed   y = W x + b, dW written in W^T's layout
//   test_dense_overwrites   accumulate = true overwrites the gradient
//   test_dense_bias_mean    db divided by the batch size
//   test_dense_needs_dx     no parameter gradients when dx is null (a first layer's)
//   test_writes_null_dx     backward writes dx without checking it (null for a first layer)
//
// Plain loops on host memory, CPU only. Everything is in an anonymous namespace (two
// plugins loaded with RTLD_GLOBAL must not interpose each other's symbols).
#include <cmath>
#include <memory>
#include <stdexcept>

#include "troupe/layer.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_broken_layers");

namespace {

using troupe::layer_context;
using troupe::shape_t;
using troupe::tensor;

enum class fault { none, no_slope, wrong_sign, missing_leak, writes_null_dx };

/// y = f(x) elementwise: a leaky ReLU (slope) or tanh(x) + 0.01 x, broken as `fault` says.
class elementwise final : public troupe::layer {
 public:
  elementwise(troupe::layer_settings& s, fault how)
      : type_(s.type()),
        how_(how),
        slope_(how == fault::missing_leak ? 0.0f
                                          : static_cast<float>(s.number("slope", 0.01, 0.0, 1.0))) {}
  std::string type() const override { return type_; }
  shape_t output_shape(const shape_t& input) const override { return input; }
  void bind(troupe::device_type type) override {
    if (type != troupe::device_type::cpu)
      throw std::runtime_error(type_ + " runs on CPU devices only");
  }
  void forward(const layer_context&, const std::vector<tensor>&, const tensor& x, const tensor& y,
               std::vector<tensor>& saved) const override {
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.f32()[i];
      y.f32()[i] = how_ == fault::missing_leak ? std::tanh(v) + 0.01f * v : v > 0 ? v : slope_ * v;
    }
    saved = {x};
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>& saved,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    if (dx == nullptr && how_ != fault::writes_null_dx)
      return;
    const float* x = saved.at(0).f32();
    for (std::int64_t i = 0; i < dy.numel(); ++i)
      dx->f32()[i] = dy.f32()[i] * derivative(x[i]);
  }

 private:
  float derivative(float v) const {
    switch (how_) {
      case fault::no_slope:
        return v > 0 ? 1.0f : 0.0f;
      case fault::wrong_sign:
        return v > 0 ? 1.0f : -slope_;
      case fault::missing_leak:
        return 1.0f - std::tanh(v) * std::tanh(v);
      default:
        return v > 0 ? 1.0f : slope_;
    }
  }
  std::string type_;
  fault how_;
  float slope_;
};

enum class dense_fault { transposed, overwrites, bias_mean, needs_dx };

/// y = W x + b for x of shape (batch, in), W (out, in), broken as `fault` says.
class dense final : public troupe::layer {
 public:
  dense(troupe::layer_settings& s, dense_fault how)
      : type_(s.type()), how_(how), out_(s.integer("out", 3, 1, 1 << 12)) {}
  std::string type() const override { return type_; }
  shape_t output_shape(const shape_t&) const override { return {out_}; }
  std::vector<troupe::param_spec> parameters(const shape_t& input) const override {
    return {{"weight", {out_, input.at(0)}, troupe::init_kind::kaiming_uniform, input.at(0), out_},
            {"bias", {out_}, troupe::init_kind::zeros, input.at(0), out_}};
  }
  void bind(troupe::device_type type) override {
    if (type != troupe::device_type::cpu)
      throw std::runtime_error(type_ + " runs on CPU devices only");
  }
  void forward(const layer_context&, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    const auto batch = x.dim(0), in = x.dim(1);
    const float *w = params[0].f32(), *b = params[1].f32();
    for (std::int64_t n = 0; n < batch; ++n)
      for (std::int64_t o = 0; o < out_; ++o) {
        double sum = b[o];
        for (std::int64_t i = 0; i < in; ++i)
          sum += static_cast<double>(w[o * in + i]) * x.f32()[n * in + i];
        y.f32()[n * out_ + o] = static_cast<float>(sum);
      }
    saved = {x};
  }
  void backward(const layer_context&, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    if (dx == nullptr && how_ == dense_fault::needs_dx)
      return;  // wrong: the parameter gradients are wanted all the same
    const auto& x = saved.at(0);
    const auto batch = x.dim(0), in = x.dim(1);
    const float* w = params[0].f32();
    float *dw = grads[0].f32(), *db = grads[1].f32();
    const bool add = accumulate && how_ != dense_fault::overwrites;
    for (std::int64_t o = 0; o < out_; ++o) {
      double bias = 0;
      for (std::int64_t n = 0; n < batch; ++n)
        bias += dy.f32()[n * out_ + o];
      if (how_ == dense_fault::bias_mean)
        bias /= static_cast<double>(batch);
      db[o] = static_cast<float>((add ? db[o] : 0) + bias);
      for (std::int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (std::int64_t n = 0; n < batch; ++n)
          sum += static_cast<double>(dy.f32()[n * out_ + o]) * x.f32()[n * in + i];
        const auto at = how_ == dense_fault::transposed ? i * out_ + o : o * in + i;
        dw[at] = static_cast<float>((add ? dw[at] : 0) + sum);
      }
    }
    if (dx != nullptr)
      for (std::int64_t n = 0; n < batch; ++n)
        for (std::int64_t i = 0; i < in; ++i) {
          double sum = 0;
          for (std::int64_t o = 0; o < out_; ++o)
            sum += static_cast<double>(w[o * in + i]) * dy.f32()[n * out_ + o];
          dx->f32()[n * in + i] = static_cast<float>(sum);
        }
  }

 private:
  std::string type_;
  dense_fault how_;
  std::int64_t out_;
};

template <class Layer, class Fault>
troupe::layer_factory factory(Fault how) {
  return [how](troupe::layer_settings& s) { return std::make_unique<Layer>(s, how); };
}

TROUPE_REGISTER_LAYER("test_leaky_right", "a correct leaky ReLU (test plugin)",
                      factory<elementwise>(fault::none));
TROUPE_REGISTER_LAYER("test_leaky_no_slope", "leaky ReLU, dx = 0 for x < 0 (test plugin)",
                      factory<elementwise>(fault::no_slope));
TROUPE_REGISTER_LAYER("test_leaky_wrong_sign", "leaky ReLU, dx = -slope dy for x < 0 (test plugin)",
                      factory<elementwise>(fault::wrong_sign));
TROUPE_REGISTER_LAYER("test_tanh_missing_leak", "tanh(x) + 0.01 x, dx without 0.01 (test plugin)",
                      factory<elementwise>(fault::missing_leak));
TROUPE_REGISTER_LAYER("test_writes_null_dx", "a leaky ReLU that writes dx unchecked (test plugin)",
                      factory<elementwise>(fault::writes_null_dx));
TROUPE_REGISTER_LAYER("test_dense_transposed", "dense, dW in W^T's layout (test plugin)",
                      factory<dense>(dense_fault::transposed));
TROUPE_REGISTER_LAYER("test_dense_overwrites", "dense, accumulate overwrites (test plugin)",
                      factory<dense>(dense_fault::overwrites));
TROUPE_REGISTER_LAYER("test_dense_bias_mean", "dense, db over the batch size (test plugin)",
                      factory<dense>(dense_fault::bias_mean));
TROUPE_REGISTER_LAYER("test_dense_needs_dx", "dense, no gradients without dx (test plugin)",
                      factory<dense>(dense_fault::needs_dx));

}  // namespace
