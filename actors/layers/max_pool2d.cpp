// max_pool2d.cpp: max pooling over NCHW images, as torch.nn.MaxPool2d (dilation 1, floor).
//
// Settings: kernel (required), stride (default = kernel), padding (default 0, at most
// kernel / 2, as torch requires; padding counts as -infinity). Forward saves the argmax of
// every window (int32, the index in its (H, W) plane) for backward, which routes dy there,
// and x's shape (as an empty tensor: the input itself need not stay alive for it). On a CPU
// it pools a bf16 run's activations in bf16 (Note [max pooling in bf16] in
// kernels/cpu/max_pool2d.cpp).
#include <memory>

#include "actors/layers/window.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class max_pool2d final : public layer {
 public:
  explicit max_pool2d(layer_settings& settings)
      : where_(settings.where()),
        window_(read_window_settings(settings, 0, [](std::int64_t kernel) { return kernel / 2; })) {}

  std::string type() const override { return "max_pool2d"; }

  shape_t output_shape(const shape_t& input) const override {
    const auto w = make_window("max_pool2d", where_, window_, input);
    return {input[0], w.out_h(), w.out_w()};
  }

  void bind(device_type type) override {
    forward_ = kernels::lookup<kernels::ops::max_pool2d_forward>(type);
    backward_ = kernels::lookup<kernels::ops::max_pool2d_backward>(type);
    bf16_ = type == device_type::cpu;  // the bf16 ops are CPU only
    if (bf16_) {
      forward_bf16_ = kernels::lookup<kernels::ops::max_pool2d_forward_bf16>(type);
      backward_bf16_ = kernels::lookup<kernels::ops::max_pool2d_backward_bf16>(type);
    }
  }

  bf16_flow activations() const override { return bf16_ ? bf16_flow::kept : bf16_flow::none; }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    tensor argmax = tensor::empty(y.shape(), dtype::i32, context.device);  // (b, C, OH, OW)
    const auto batch = static_cast<int>(x.dim(0));
    if (x.type() == dtype::bf16)
      forward_bf16_(context.kernels, batch, window_of(window_, x), x.bf16(), y.bf16(),
                    argmax.i32());
    else
      forward_(context.kernels, batch, window_of(window_, x), x.f32(), y.f32(), argmax.i32());
    if (context.training) {
      saved.push_back(argmax);
      saved.push_back(shape_only(x.shape()));
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>&, bool) const override {
    if (dx == nullptr)
      return;
    const shape_t x_shape = saved_shape(saved.at(1));
    const auto window = window_of(window_, x_shape);
    const auto batch = static_cast<int>(x_shape.at(0));
    if (dx->type() == dtype::bf16)
      backward_bf16_(context.kernels, batch, window, dy.bf16(), saved.at(0).i32(), dx->bf16());
    else
      backward_(context.kernels, batch, window, dy.f32(), saved.at(0).i32(), dx->f32());
  }

  double cost(const shape_t& input) const override {
    // A comparison per window element forward, an addition per output backward.
    const auto w = make_window("max_pool2d", where_, window_, input);
    return static_cast<double>(input[0]) * w.out_h() * w.out_w() *
           static_cast<double>(window_.kernel * window_.kernel + 1);
  }

 private:
  source_position where_;
  window_settings window_;
  kernels::ops::max_pool2d_forward::function forward_ = nullptr;
  kernels::ops::max_pool2d_backward::function backward_ = nullptr;
  bool bf16_ = false;
  kernels::ops::max_pool2d_forward_bf16::function forward_bf16_ = nullptr;
  kernels::ops::max_pool2d_backward_bf16::function backward_bf16_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("max_pool2d",
                      "max over windows of (channels, height, width) (settings: kernel, stride, "
                      "padding)",
                      [](layer_settings& s) { return std::make_unique<max_pool2d>(s); });

}  // namespace troupe
