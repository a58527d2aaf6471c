// dropout.cpp: dropout, as torch.nn.Dropout(p): in training each value is zeroed with
// probability p and the rest scaled by 1 / (1 - p); in evaluation it is the identity.
//
// Setting: p (default 0.5, in [0, 1)). The masks are keyed by (seed, step, layer, global
// sample index) through layer_context (ops::dropout), so every wiring (micro-batches,
// replicas, stages) drops the same values of the same sample and the equivalence tests
// hold; nothing is saved: backward draws the same mask again.
#include <memory>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class dropout_layer final : public layer {
 public:
  explicit dropout_layer(layer_settings& settings)
      : p_(static_cast<float>(settings.number("p", 0.5, 0.0, 0.999))) {}

  std::string type() const override { return "dropout"; }
  shape_t output_shape(const shape_t& input) const override { return input; }

  void bind(device_type type) override {
    dropout_ = kernels::lookup<kernels::ops::dropout>(type);
    copy_ = kernels::lookup<kernels::ops::copy>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>&) const override {
    if (!context.training) {
      copy_(context.kernels, static_cast<std::int64_t>(x.bytes()), x.raw(), y.raw());
      return;
    }
    apply(context, x, y);
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>&, const tensor& dy, tensor* dx, std::vector<tensor>&,
                bool) const override {
    if (dx != nullptr)
      apply(context, dy, *dx);
  }

  double cost(const shape_t& input) const override {
    return 2.0 * static_cast<double>(element_count(input));
  }

 private:
  /// out = in * mask / (1 - p), the mask of this pass's key.
  void apply(const layer_context& context, const tensor& in, const tensor& out) const {
    const std::int64_t rows = in.dim(0);
    const std::int64_t cols = rows == 0 ? 0 : in.numel() / rows;
    // The pass key of (seed, step, layer); the sample index goes in per element.
    const std::uint64_t key = context.pass_key();
    dropout_(context.kernels, rows, cols, p_, key, context.first_sample, in.f32(), out.f32());
  }

  float p_;
  kernels::ops::dropout::function dropout_ = nullptr;
  kernels::ops::copy::function copy_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("dropout",
                      "zeroes values with probability p in training, keyed by sample (settings: p)",
                      [](layer_settings& s) { return std::make_unique<dropout_layer>(s); });

}  // namespace troupe
