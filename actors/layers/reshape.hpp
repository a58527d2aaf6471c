// reshape.hpp: the shared shape of layers that change a sample's shape and not its values
// (flatten, unflatten; add when it reads one input): forward copies x into y and backward
// dy into dx, element for element; only output_shape differs. Each is one registration in
// its own file.
//
// A copy and not a view: a layer writes into the y the runtime allocated for it (see
// layer.hpp), and a micro-batch's copy is small next to the layers around it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {

class reshape_layer : public layer {
 public:
  using shape_rule = std::function<shape_t(const shape_t& input)>;

  reshape_layer(std::string name, shape_rule rule)
      : name_(std::move(name)), rule_(std::move(rule)) {}

  std::string type() const override { return name_; }
  shape_t output_shape(const shape_t& input) const override { return rule_(input); }

  void bind(device_type type) override { copy_ = kernels::lookup<kernels::ops::copy>(type); }

  // Bytes are copied as they are: y in x's dtype, dx in dy's.
  bf16_flow activations() const override { return bf16_flow::kept; }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>&) const override {
    copy_(context.kernels, static_cast<std::int64_t>(x.bytes()), x.raw(), y.raw());
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>&, const tensor& dy, tensor* dx, std::vector<tensor>&,
                bool) const override {
    if (dx != nullptr)
      copy_(context.kernels, static_cast<std::int64_t>(dy.bytes()), dy.raw(), dx->raw());
  }

  double cost(const shape_t& input) const override {
    return 2.0 * static_cast<double>(element_count(input));  // a copy each way
  }

 private:
  std::string name_;
  shape_rule rule_;
  kernels::ops::copy::function copy_ = nullptr;
};

}  // namespace troupe
