// avg_pool2d.cpp: average pooling over NCHW images, as torch.nn.AvgPool2d with its defaults
// (floor, count_include_pad = True: a window is divided by kernel^2 even where it overlaps
// the zero padding).
//
// Settings: kernel (required), stride (default = kernel), padding (default 0, at most
// kernel / 2, as torch requires). Nothing is saved but the input's shape (window.hpp's shape_only).
#include <memory>

#include "actors/layers/window.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class avg_pool2d final : public layer {
 public:
  explicit avg_pool2d(layer_settings& settings)
      : where_(settings.where()),
        window_(read_window_settings(settings, 0, [](std::int64_t kernel) { return kernel / 2; })) {}

  std::string type() const override { return "avg_pool2d"; }

  shape_t output_shape(const shape_t& input) const override {
    const auto w = make_window("avg_pool2d", where_, window_, input);
    return {input[0], w.out_h(), w.out_w()};
  }

  void bind(device_type type) override {
    forward_ = kernels::lookup<kernels::ops::avg_pool2d_forward>(type);
    backward_ = kernels::lookup<kernels::ops::avg_pool2d_backward>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    forward_(context.kernels, static_cast<int>(x.dim(0)), window_of(window_, x), x.f32(),
             y.f32());
    if (context.training)
      saved.push_back(shape_only(x.shape()));
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>&, bool) const override {
    if (dx == nullptr)
      return;
    const shape_t x = saved_shape(saved.at(0));
    backward_(context.kernels, static_cast<int>(x.at(0)), window_of(window_, x), dy.f32(),
              dx->f32());
  }

  double cost(const shape_t& input) const override {
    // An addition per window element, forward and backward.
    const auto w = make_window("avg_pool2d", where_, window_, input);
    return 2.0 * static_cast<double>(input[0]) * w.out_h() * w.out_w() *
           static_cast<double>(window_.kernel * window_.kernel);
  }

 private:
  source_position where_;
  window_settings window_;
  kernels::ops::avg_pool2d_forward::function forward_ = nullptr;
  kernels::ops::avg_pool2d_backward::function backward_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("avg_pool2d",
                      "average over windows of (channels, height, width) (settings: kernel, "
                      "stride, padding)",
                      [](layer_settings& s) { return std::make_unique<avg_pool2d>(s); });

}  // namespace troupe
