// max_pool2d.cpp: max pooling over NCHW images, as torch.nn.MaxPool2d (dilation 1, floor).
//
// Settings: kernel (required), stride (default = kernel), padding (default 0, at most
// kernel / 2, as torch requires; padding counts as -infinity). Forward saves the argmax of
// every window (int32, the index in its (H, W) plane) for backward, which routes dy there.
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
  }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    tensor argmax = tensor::empty(y.shape(), dtype::i32, context.device);  // (b, C, OH, OW)
    forward_(context.kernels, static_cast<int>(x.dim(0)), window_of(window_, x), x.f32(), y.f32(),
             argmax.i32());
    if (context.training) {
      saved.push_back(x);
      saved.push_back(argmax);
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>&, bool) const override {
    if (dx == nullptr)
      return;
    const tensor& x = saved.at(0);
    backward_(context.kernels, static_cast<int>(x.dim(0)), window_of(window_, x), dy.f32(),
              saved.at(1).i32(), dx->f32());
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
};

}  // namespace

TROUPE_REGISTER_LAYER("max_pool2d",
                      "max over windows of (channels, height, width) (settings: kernel, stride, "
                      "padding)",
                      [](layer_settings& s) { return std::make_unique<max_pool2d>(s); });

}  // namespace troupe
