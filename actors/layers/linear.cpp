// linear.cpp: the fully connected layer y = x W^T + b, as torch.nn.Linear: over the last
// dimension, so (features) -> (out) and, for sequences, (T, features) -> (T, out) with
// every position a row of the same GEMM.
//
// Under [run] precision = "bf16" the weight arrives rounded to bf16 (bf16_parameters) and the
// three products run in bf16 with fp32 accumulation (ops::gemm_bf16). Its activations are
// bf16 (bf16_flow::made, Note [bf16 activations] in actors/training/layer_actor.cpp): x comes
// in bf16 from a layer that made it so, or is rounded here (the data's rows), and is saved
// for the backward in bf16; y is the f32 product plus the f32 bias rounded once; dy comes in
// bf16 and dx goes out in x's dtype; the weight's gradient accumulates in f32 and the bias's
// is summed in f32 from the bf16 dy.
//
// Parameters: weight (out, in) and optional bias (out). Settings:
//   out  = 256        (required) output features
//   init = "kaiming"  weight init (see init_kind); bias starts at zero
//   bias = true
#include <memory>

#include "troupe/check.hpp"
#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class linear final : public layer {
 public:
  explicit linear(layer_settings& settings)
      : where_(settings.where()),
        out_(settings.integer("out", 1, std::int64_t{1} << 24)),
        bias_(settings.boolean("bias", true)) {
    auto init = settings.text("init", "kaiming", init_kind_names());
    parse_init_kind(init, init_);
  }

  std::string type() const override { return "linear"; }

  shape_t output_shape(const shape_t& input) const override {
    if (input.empty())
      throw config_error(where_, "layer 'linear' takes inputs of shape (..., features), found " +
                                     shape_to_string(input));
    shape_t output = input;
    output.back() = out_;
    return output;
  }

  std::vector<param_spec> parameters(const shape_t& input) const override {
    auto in = input.back();
    std::vector<param_spec> specs{{"weight", {out_, in}, init_, in, out_}};
    if (bias_)
      specs.push_back({"bias", {out_}, init_kind::zeros, in, out_});
    return specs;
  }

  std::vector<std::string> bf16_parameters() const override { return {"weight"}; }

  void bind(device_type type) override {
    gemm_ = kernels::lookup<kernels::ops::gemm>(type);
    bias_add_ = kernels::lookup<kernels::ops::bias_add>(type);
    bias_grad_ = kernels::lookup<kernels::ops::bias_grad>(type);
    gemm_bf16_ = kernels::lookup<kernels::ops::gemm_bf16>(type);
  }

  bf16_flow activations() const override { return bf16_flow::made; }

  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    const auto in = static_cast<int>(x.shape().back());
    const auto batch = static_cast<int>(x.numel() / in);  // rows: samples x positions
    const auto out = static_cast<int>(out_);
    const tensor y32 = f32_output(context, y);
    if (params[0].type() == dtype::bf16) {
      const tensor x16 = rounded_to_bf16(context, x);  // (b, in) bf16
      // y (b, out) = x (b, in) * W^T (in, out), bf16 products accumulated in f32
      gemm_bf16_(context.kernels, false, true, batch, out, in, 1.0f, x16.bf16(), in,
                 params[0].bf16(), in, 0.0f, y32.f32(), out);
      if (context.training)
        saved.push_back(x16);
    } else {
      const tensor x32 = widened_to_f32(context, x);
      // y (b, out) = x (b, in) * W^T (in, out)
      gemm_(context.kernels, false, true, batch, out, in, 1.0f, x32.f32(), in, params[0].f32(), in,
            0.0f, y32.f32(), out);
      if (context.training)
        saved.push_back(x32);
    }
    if (bias_)
      bias_add_(context.kernels, batch, out, params[1].f32(), y32.f32());
    store_output(context, y32, y);
  }

  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    const tensor dy_w = in_weight_type(context, params, dy);  // once for both products
    weight_gradient(context, saved.at(0), dy, dy_w, grads, accumulate);
    if (dx != nullptr)
      input_gradient(context, params, dy_w, *dx);
  }

  bool splits_backward() const override { return true; }

  void backward_input(const layer_context& context, const std::vector<tensor>& params,
                      const std::vector<tensor>&, const tensor& dy,
                      const tensor& dx) const override {
    input_gradient(context, params, in_weight_type(context, params, dy), dx);
  }

  void backward_weight(const layer_context& context, const std::vector<tensor>& params,
                       const std::vector<tensor>& saved, const tensor& dy,
                       std::vector<tensor>& grads, bool accumulate) const override {
    weight_gradient(context, saved.at(0), dy, in_weight_type(context, params, dy), grads,
                    accumulate);
  }

  // dy rounded to bf16 when the weight is bf16, else widened to f32 (both no-ops when it is
  // so already).
  static tensor in_weight_type(const layer_context& context, const std::vector<tensor>& params,
                               const tensor& dy) {
    return params[0].type() == dtype::bf16 ? rounded_to_bf16(context, dy)
                                           : widened_to_f32(context, dy);
  }

  // dx (b, in) = dy (b, out) * W (out, in); `dy_w` is dy in W's type (f32 or bf16).
  void input_gradient(const layer_context& context, const std::vector<tensor>& params,
                      const tensor& dy_w, const tensor& dx) const {
    const auto in = static_cast<int>(dx.shape().back());
    const auto batch = static_cast<int>(dx.numel() / in);  // rows: samples x positions
    const auto out = static_cast<int>(out_);
    const tensor dx32 = f32_output(context, dx);
    if (dy_w.type() == dtype::bf16)
      gemm_bf16_(context.kernels, false, false, batch, in, out, 1.0f, dy_w.bf16(), out,
                 params[0].bf16(), in, 0.0f, dx32.f32(), in);
    else
      gemm_(context.kernels, false, false, batch, in, out, 1.0f, dy_w.f32(), out, params[0].f32(),
            in, 0.0f, dx32.f32(), in);
    store_output(context, dx32, dx);
  }

  // dW (out, in) (+)= dy^T (out, b) * x (b, in); db from dy in f32. `dy_w` is dy in W's type,
  // which the saved x has too.
  void weight_gradient(const layer_context& context, const tensor& x, const tensor& dy,
                       const tensor& dy_w, std::vector<tensor>& grads, bool accumulate) const {
    const auto in = static_cast<int>(x.shape().back());
    const auto batch = static_cast<int>(x.numel() / in);  // rows: samples x positions
    const auto out = static_cast<int>(out_);
    const float beta = accumulate ? 1.0f : 0.0f;
    TROUPE_CHECK(x.type() == dy_w.type(), "linear: the saved input is " << to_string(x.type())
                                                                        << " and dy "
                                                                        << to_string(dy_w.type()));
    if (x.type() == dtype::bf16)
      gemm_bf16_(context.kernels, true, false, out, in, batch, 1.0f, dy_w.bf16(), out, x.bf16(), in,
                 beta, grads[0].f32(), in);
    else
      gemm_(context.kernels, true, false, out, in, batch, 1.0f, dy_w.f32(), out, x.f32(), in, beta,
            grads[0].f32(), in);
    if (bias_)
      bias_grad_(context.kernels, batch, out, widened_to_f32(context, dy).f32(), beta,
                 grads[1].f32());
  }

  double cost(const shape_t& input) const override {
    // Three GEMMs of 2 * in * out flops per row (forward, dW, dx).
    return 6.0 * static_cast<double>(element_count(input)) * static_cast<double>(out_);
  }

 private:
  source_position where_;
  std::int64_t out_;
  bool bias_;
  init_kind init_ = init_kind::kaiming_uniform;
  kernels::ops::gemm::function gemm_ = nullptr;
  kernels::ops::bias_add::function bias_add_ = nullptr;
  kernels::ops::bias_grad::function bias_grad_ = nullptr;
  kernels::ops::gemm_bf16::function gemm_bf16_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("linear", "fully connected y = x W^T + b (settings: out, init, bias)",
                      [](layer_settings& s) { return std::make_unique<linear>(s); });

}  // namespace troupe
