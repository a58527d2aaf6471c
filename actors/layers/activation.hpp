// activation.hpp: the shared shape of elementwise activation layers (ReLU, GELU, Tanh).
//
// An activation layer has no parameters and no settings; it saves its input and output
// for backward (both are shared tensors, so saving costs nothing) and calls its op's
// forward and backward kernels. Each activation is one registration in its own file.
#pragma once

#include <memory>
#include <string>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {

template <class ForwardOp, class BackwardOp>
class activation_layer final : public layer {
 public:
  explicit activation_layer(std::string name) : name_(std::move(name)) {}

  std::string type() const override { return name_; }
  shape_t output_shape(const shape_t& input) const override { return input; }

  void bind(device_type type) override {
    forward_ = kernels::lookup<ForwardOp>(type);
    backward_ = kernels::lookup<BackwardOp>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    forward_(context.kernels, x.numel(), x.f32(), y.f32());
    if (context.training) {
      saved.push_back(x);
      saved.push_back(y);
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>&, bool) const override {
    if (dx != nullptr)
      backward_(context.kernels, dy.numel(), saved.at(0).f32(), saved.at(1).f32(), dy.f32(),
                dx->f32());
  }

 private:
  std::string name_;
  typename ForwardOp::function forward_ = nullptr;
  typename BackwardOp::function backward_ = nullptr;
};

}  // namespace troupe
