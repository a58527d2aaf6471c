// scale_layer.hpp: the test plugins' layer, y = a * x with one learnable factor a per
// feature, and its deliberately broken variants.
//
// Plain loops on host memory: the plugins are for the CPU tests, and bind() refuses
// other devices. Everything is in an anonymous namespace so that two plugins including
// this header (loaded with RTLD_GLOBAL) cannot interpose each other's symbols.
#pragma once

#include <memory>
#include <stdexcept>

#include "troupe/layer.hpp"

namespace {

/// How a variant breaks the layer contract (runtime/model/layer.hpp).
enum class scale_fault {
  none,
  wrong_gradient,     // backward leaves a out of dx (dx = dy): check-layer must catch it
  throwing_backward,  // backward throws
  // (A forward that puts another tensor into y cannot be written any more: y is a
  // const tensor&, checked at compile time in tests/runtime/plugin/plugin_test.cpp.)
};

class scale_layer final : public troupe::layer {
 public:
  scale_layer(troupe::layer_settings& settings, scale_fault fault)
      : type_(settings.type()), fault_(fault) {
    settings.finish();  // no settings
  }

  std::string type() const override { return type_; }

  troupe::shape_t output_shape(const troupe::shape_t& input) const override { return input; }

  std::vector<troupe::param_spec> parameters(const troupe::shape_t& input) const override {
    troupe::param_spec a{"scale", input, troupe::init_kind::ones, 1, 1};
    return {a};
  }

  void bind(troupe::device_type type) override {
    if (type != troupe::device_type::cpu)
      throw std::runtime_error(type_ + " runs on CPU devices only");
  }

  // x, y: (b, D); a = params[0]: (D); saved = {x}
  void forward(const troupe::layer_context&, const std::vector<troupe::tensor>& params,
               const troupe::tensor& x, const troupe::tensor& y,
               std::vector<troupe::tensor>& saved) const override {
    const auto rows = x.dim(0), features = x.dim(1);
    const float* a = params[0].f32();
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < features; ++j)
        y.f32()[i * y.dim(1) + j] = a[j] * x.f32()[i * features + j];
    saved = {x};
  }

  // dx = a * dy; da (+)= sum over rows of dy * x
  void backward(const troupe::layer_context&, const std::vector<troupe::tensor>& params,
                const std::vector<troupe::tensor>& saved, const troupe::tensor& dy,
                troupe::tensor* dx, std::vector<troupe::tensor>& grads,
                bool accumulate) const override {
    if (fault_ == scale_fault::throwing_backward)
      throw std::runtime_error("the test plugin's backward fails on purpose");
    const auto& x = saved.at(0);
    const auto rows = x.dim(0), features = x.dim(1);
    const float* a = params[0].f32();
    float* da = grads[0].f32();
    for (std::int64_t j = 0; j < features; ++j) {
      double sum = accumulate ? da[j] : 0.0;
      for (std::int64_t i = 0; i < rows; ++i)
        sum += static_cast<double>(dy.f32()[i * features + j]) * x.f32()[i * features + j];
      da[j] = static_cast<float>(sum);
    }
    if (dx)
      for (std::int64_t i = 0; i < rows * features; ++i)
        dx->f32()[i] = (fault_ == scale_fault::wrong_gradient ? 1.0f : a[i % features]) *
                       dy.f32()[i];
  }

 private:
  std::string type_;
  scale_fault fault_;
};

/// A TROUPE_REGISTER_LAYER factory of the layer broken as `fault` says.
inline troupe::layer_factory scale_layer_factory(scale_fault fault) {
  return [fault](troupe::layer_settings& s) { return std::make_unique<scale_layer>(s, fault); };
}

}  // namespace
