// activation.hpp: the shared shape of elementwise activation layers (ReLU, GELU, Tanh).
//
// An activation layer has no parameters and no settings; it saves for backward the one of
// its input and output that its backward kernel reads (`Reads`: relu's and tanh's read y,
// gelu's x; the kernels read whichever they are given), so the other may be freed as soon
// as its readers are done, and calls its op's forward and backward kernels. With bf16 ops
// (relu) it keeps a bf16 run's activations in bf16 on a CPU (bf16_flow::kept): forward and
// backward run on the bit patterns, exactly. Each activation is one registration in its own
// file.
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {

/// Which of x and y an activation's backward reads.
enum class activation_reads { x, y };

template <class ForwardOp, class BackwardOp, activation_reads Reads, class ForwardBf16 = void,
          class BackwardBf16 = void>
class activation_layer final : public layer {
  static constexpr bool has_bf16 = !std::is_void_v<ForwardBf16>;

 public:
  explicit activation_layer(std::string name) : name_(std::move(name)) {}

  std::string type() const override { return name_; }
  shape_t output_shape(const shape_t& input) const override { return input; }

  void bind(device_type type) override {
    forward_ = kernels::lookup<ForwardOp>(type);
    backward_ = kernels::lookup<BackwardOp>(type);
    if constexpr (has_bf16) {
      // The bf16 ops are CPU only (kernels::ops::cpu_only_ops): elsewhere in f32.
      bf16_ = type == device_type::cpu;
      if (bf16_) {
        forward_bf16_ = kernels::lookup<ForwardBf16>(type);
        backward_bf16_ = kernels::lookup<BackwardBf16>(type);
      }
    }
  }

  bf16_flow activations() const override { return bf16_ ? bf16_flow::kept : bf16_flow::none; }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    if constexpr (has_bf16) {
      if (x.type() == dtype::bf16) {
        forward_bf16_(context.kernels, x.numel(), x.bf16(), y.bf16());
        if (context.training)
          saved.push_back(Reads == activation_reads::x ? x : y);
        return;
      }
    }
    forward_(context.kernels, x.numel(), x.f32(), y.f32());
    if (context.training)
      saved.push_back(Reads == activation_reads::x ? x : y);
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>&, bool) const override {
    if (dx == nullptr)
      return;
    const tensor& kept = saved.at(0);
    if constexpr (has_bf16) {
      if (kept.type() == dtype::bf16) {
        const auto* k = kept.bf16();
        backward_bf16_(context.kernels, dy.numel(), Reads == activation_reads::x ? k : nullptr,
                       Reads == activation_reads::y ? k : nullptr, dy.bf16(), dx->bf16());
        return;
      }
    }
    const float* k = kept.f32();
    backward_(context.kernels, dy.numel(), Reads == activation_reads::x ? k : nullptr,
              Reads == activation_reads::y ? k : nullptr, dy.f32(), dx->f32());
  }

 private:
  template <class Op>
  using function_of = typename std::conditional_t<std::is_void_v<Op>, ForwardOp, Op>::function;

  std::string name_;
  bool bf16_ = false;
  typename ForwardOp::function forward_ = nullptr;
  typename BackwardOp::function backward_ = nullptr;
  function_of<ForwardBf16> forward_bf16_ = nullptr;
  function_of<BackwardBf16> backward_bf16_ = nullptr;
};

}  // namespace troupe
