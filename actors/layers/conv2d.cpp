// conv2d.cpp: 2-D convolution over NCHW images, as torch.nn.Conv2d (dilation 1, groups 1).
//
// Parameters: weight (out, C, k, k) and optional bias (out). Settings:
//   out     = 16        (required) output channels
//   kernel  = 3         (required) square kernel side
//   stride  = 1
//   padding = 0         zeros on every side
//   init    = "kaiming" weight init (fan_in = C k k); bias starts at zero
//   bias    = true
//
// Sample by sample, forward unfolds x_n with im2col into cols (C k k, OH OW) and runs
// y_n (out, OH OW) = W (out, C k k) cols; backward unfolds x_n again for dW += dy_n cols^T,
// and folds dcols = W^T dy_n back into dx_n with col2im. The bias is a rank-1 GEMM with a
// row of ones (no op of its own). One sample's cols (220 KiB for the second conv of
// config/fashion_cnn.toml) stays in cache between im2col and its GEMM, and nothing of
// size (b, C k k, OH OW) is held per micro-batch in flight: unfolding the whole micro-batch
// and saving it for backward ran at the same speed (4.0K samples/s either way, batch 128,
// one core) with that memory held.
//
// Under [run] precision = "bf16" the weight arrives rounded to bf16 (bf16_parameters) and the
// three products run in bf16 with fp32 accumulation (ops::gemm_bf16): x is rounded once, saved
// for the backward in bf16 (half the bytes) and unfolded in bf16 (ops::im2col_bf16: a third
// of the bytes the fp32 cols and their rounding moved), and the incoming dy is rounded once
// for both its products; the gradients are fp32 as in an fp32 run, and the bias is added and
// its gradient summed in fp32. Its activations are bf16 (bf16_flow::made, Note [bf16
// activations] in actors/training/layer_actor.cpp): x comes in bf16 from a layer that made it
// so (then it is not rounded again), y is the f32 result rounded once (by the direct
// convolution's reorder into NCHW, or a sample at a time from an f32 buffer of one sample:
// no f32 copy of the whole y is held), dy comes in bf16 and dx goes out in x's dtype, alike.
//
// On a CPU the three passes are oneDNN's direct convolution instead, over the whole
// micro-batch (ops::conv2d_forward, _backward_data, _backward_weights): in bf16 always, in
// f32 where the device's f32 products are oneDNN's (Note [direct convolution] in
// kernels/cpu/conv2d.cpp says where each was measured faster). The operands' types and what
// is saved for the backward are the same either way.
#include <memory>

#include "actors/layers/window.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class conv2d final : public layer {
 public:
  explicit conv2d(layer_settings& settings)
      : where_(settings.where()),
        out_(settings.integer("out", 1, std::int64_t{1} << 16)),
        window_(read_window_settings(settings, 1, [](std::int64_t kernel) { return kernel; })),
        bias_(settings.boolean("bias", true)) {
    auto init = settings.text("init", "kaiming", init_kind_names());
    parse_init_kind(init, init_);
  }

  std::string type() const override { return "conv2d"; }

  shape_t output_shape(const shape_t& input) const override {
    const auto w = make_window("conv2d", where_, window_, input);
    return {out_, w.out_h(), w.out_w()};
  }

  std::vector<param_spec> parameters(const shape_t& input) const override {
    const auto area = window_.kernel * window_.kernel;
    const auto fan_in = input.at(0) * area, fan_out = out_ * area;
    std::vector<param_spec> specs{
        {"weight", {out_, input.at(0), window_.kernel, window_.kernel}, init_, fan_in, fan_out}};
    if (bias_)
      specs.push_back({"bias", {out_}, init_kind::zeros, fan_in, fan_out});
    return specs;
  }

  std::vector<std::string> bf16_parameters() const override { return {"weight"}; }

  void bind(device_type type) override {
    direct_ = type == device_type::cpu;
    if (direct_) {
      forward_direct_ = kernels::lookup<kernels::ops::conv2d_forward>(type);
      backward_data_direct_ = kernels::lookup<kernels::ops::conv2d_backward_data>(type);
      backward_weights_direct_ = kernels::lookup<kernels::ops::conv2d_backward_weights>(type);
    }
    gemm_ = kernels::lookup<kernels::ops::gemm>(type);
    fill_ = kernels::lookup<kernels::ops::fill>(type);
    im2col_ = kernels::lookup<kernels::ops::im2col>(type);
    im2col_bf16_ = kernels::lookup<kernels::ops::im2col_bf16>(type);
    col2im_ = kernels::lookup<kernels::ops::col2im>(type);
    gemm_bf16_ = kernels::lookup<kernels::ops::gemm_bf16>(type);
    round_ = kernels::lookup<kernels::ops::to_bf16>(type);
  }

  bf16_flow activations() const override { return bf16_flow::made; }

  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y_out, std::vector<tensor>& saved) const override {
    const auto g = geometry_of(x);
    const bool bf16 = params[0].type() == dtype::bf16;
    const tensor x_w = in_weight_type(context, params, x);
    if (context.training)
      saved.push_back(x_w);
    if (convolves_directly(context, bf16, g)) {  // y rounded, if bf16, as it is reordered
      forward_direct_(context.kernels, operands(bf16), g.batch, g.window, g.out, x_w.raw(),
                      params[0].raw(), bias_ ? params[1].f32() : nullptr,
                      operands(y_out.type() == dtype::bf16), y_out.raw());
      return;
    }
    // cols (C k k, OH OW), one sample at a time; a bf16 y through one sample's f32 buffer
    const tensor cols = sample_buffer(context, g, bf16 ? dtype::bf16 : dtype::f32);
    const tensor ones = bias_ ? ones_of(context, g.pixels) : tensor{};
    const tensor y_f32 = y_out.type() == dtype::f32 ? y_out : output_buffer(context, g.out, g);
    for (int n = 0; n < g.batch; ++n) {
      float* y_n = y_f32.f32() + (y_f32.shares_storage_with(y_out) ? n * g.y_per_sample : 0);
      unfold_sample(context, g, x_w, n, cols);
      // y_n (out, OH OW) = W (out, C k k) * cols (C k k, OH OW)
      if (bf16)
        gemm_bf16_(context.kernels, false, false, g.out, g.pixels, g.depth, 1.0f, params[0].bf16(),
                   g.depth, cols.bf16(), g.pixels, 0.0f, y_n, g.pixels);
      else
        gemm_(context.kernels, false, false, g.out, g.pixels, g.depth, 1.0f, params[0].f32(),
              g.depth, cols.f32(), g.pixels, 0.0f, y_n, g.pixels);
      if (bias_)
        // y_n (out, OH OW) += bias (out, 1) * ones (1, OH OW)
        gemm_(context.kernels, false, false, g.out, g.pixels, 1, 1.0f, params[1].f32(), 1,
              ones.f32(), g.pixels, 1.0f, y_n, g.pixels);
      round_sample(context, y_f32, y_out, n * g.y_per_sample);
    }
  }

  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    const tensor dy_w = in_weight_type(context, params, dy);  // once for both products
    weight_gradient(context, saved, dy_w, grads, accumulate);
    if (dx != nullptr)
      input_gradient(context, params, saved, dy_w, *dx);
  }

  bool splits_backward() const override { return true; }

  void backward_input(const layer_context& context, const std::vector<tensor>& params,
                      const std::vector<tensor>& saved, const tensor& dy,
                      const tensor& dx) const override {
    input_gradient(context, params, saved, in_weight_type(context, params, dy), dx);
  }

  void backward_weight(const layer_context& context, const std::vector<tensor>& params,
                       const std::vector<tensor>& saved, const tensor& dy,
                       std::vector<tensor>& grads, bool accumulate) const override {
    weight_gradient(context, saved, in_weight_type(context, params, dy), grads, accumulate);
  }

  double cost(const shape_t& input) const override {
    // Three GEMMs (forward, dW, dcols) of 2 * out * C k k * OH OW flops each.
    const auto w = make_window("conv2d", where_, window_, input);
    return 6.0 * static_cast<double>(out_) * static_cast<double>(input.at(0)) *
           static_cast<double>(window_.kernel * window_.kernel) *
           static_cast<double>(w.out_h()) * static_cast<double>(w.out_w());
  }

 private:
  // t (x or dy) rounded to bf16 when the weight is bf16 (a bf16 run), else widened to f32
  // (both no-ops when it is so already).
  static tensor in_weight_type(const layer_context& context, const std::vector<tensor>& params,
                               const tensor& t) {
    return params[0].type() == dtype::bf16 ? rounded_to_bf16(context, t)
                                           : widened_to_f32(context, t);
  }

  // dx from dy_w (dy in the weight's type).
  void input_gradient(const layer_context& context, const std::vector<tensor>& params,
                      const std::vector<tensor>& saved, const tensor& dy_w,
                      const tensor& dx_out) const {
    const auto g = geometry_of(saved.at(0));
    const bool bf16 = dy_w.type() == dtype::bf16;
    if (convolves_directly(context, bf16, g)) {  // dx rounded, if bf16, as it is reordered
      backward_data_direct_(context.kernels, operands(bf16), g.batch, g.window, g.out, dy_w.raw(),
                            params[0].raw(), operands(dx_out.type() == dtype::bf16), dx_out.raw());
      return;
    }
    // A bf16 dx through one sample's f32 buffer.
    const tensor dx = dx_out.type() == dtype::f32 ? dx_out : output_buffer(context, 0, g);
    const tensor dcols = sample_buffer(context, g);
    for (int n = 0; n < g.batch; ++n) {
      // dcols (C k k, OH OW) = W^T (C k k, out) * dy_n (out, OH OW)
      if (bf16)
        gemm_bf16_(context.kernels, true, false, g.depth, g.pixels, g.out, 1.0f, params[0].bf16(),
                   g.depth, dy_w.bf16() + n * g.y_per_sample, g.pixels, 0.0f, dcols.f32(),
                   g.pixels);
      else
        gemm_(context.kernels, true, false, g.depth, g.pixels, g.out, 1.0f, params[0].f32(),
              g.depth, dy_w.f32() + n * g.y_per_sample, g.pixels, 0.0f, dcols.f32(), g.pixels);
      col2im_(context.kernels, 1, g.window, dcols.f32(),
              dx.f32() + (dx.shares_storage_with(dx_out) ? n * g.x_per_sample : 0));
      round_sample(context, dx, dx_out, n * g.x_per_sample);
    }
  }

  // The parameter gradients from dy_w (dy in the weight's type).
  void weight_gradient(const layer_context& context, const std::vector<tensor>& saved,
                       const tensor& dy_w, std::vector<tensor>& grads, bool accumulate) const {
    const tensor& x = saved.at(0);  // in the weight's type (forward)
    const auto g = geometry_of(x);
    const bool bf16 = dy_w.type() == dtype::bf16;
    TROUPE_CHECK(x.type() == dy_w.type(), "conv2d: the saved input is " << to_string(x.type())
                                                                        << " and dy "
                                                                        << to_string(dy_w.type()));
    if (convolves_directly(context, bf16, g)) {
      backward_weights_direct_(context.kernels, operands(bf16), g.batch, g.window, g.out, x.raw(),
                               dy_w.raw(), accumulate ? 1.0f : 0.0f, grads[0].f32(),
                               bias_ ? grads[1].f32() : nullptr);
      return;
    }
    const tensor cols = sample_buffer(context, g, x.type());
    const tensor ones = bias_ ? ones_of(context, g.pixels) : tensor{};
    const tensor dy = bias_ ? widened_to_f32(context, dy_w) : dy_w;  // the bias's sum in f32
    for (int n = 0; n < g.batch; ++n) {
      const float beta = accumulate || n > 0 ? 1.0f : 0.0f;
      unfold_sample(context, g, x, n, cols);
      // dW (out, C k k) += dy_n (out, OH OW) * cols^T (OH OW, C k k)
      if (bf16) {
        gemm_bf16_(context.kernels, false, true, g.out, g.depth, g.pixels, 1.0f,
                   dy_w.bf16() + n * g.y_per_sample, g.pixels, cols.bf16(), g.pixels, beta,
                   grads[0].f32(), g.depth);
      } else {
        gemm_(context.kernels, false, true, g.out, g.depth, g.pixels, 1.0f,
              dy_w.f32() + n * g.y_per_sample, g.pixels, cols.f32(), g.pixels, beta, grads[0].f32(),
              g.depth);
      }
      if (bias_)
        // db (out, 1) += dy_n (out, OH OW) * ones (OH OW, 1)
        gemm_(context.kernels, false, false, g.out, 1, g.pixels, 1.0f,
              dy.f32() + n * g.y_per_sample, g.pixels, ones.f32(), 1, beta, grads[1].f32(), 1);
    }
  }

  /// The sizes of one forward or backward call, from its input x (b, C, H, W).
  struct geometry {
    kernels::window2d window;
    int batch = 0;                        // b
    int out = 0;                          // output channels
    int depth = 0;                        // C k k: rows of cols
    int pixels = 0;                       // OH OW: columns of cols
    std::int64_t x_per_sample = 0;        // C H W
    std::int64_t cols_per_sample = 0;     // C k k OH OW
    std::int64_t y_per_sample = 0;        // out OH OW
  };

  geometry geometry_of(const tensor& x) const {
    geometry g;
    g.window = window_of(window_, x);
    g.batch = static_cast<int>(x.dim(0));
    g.out = static_cast<int>(out_);
    g.depth = g.window.channels * g.window.kernel_h * g.window.kernel_w;
    g.pixels = g.window.out_h() * g.window.out_w();
    g.x_per_sample = static_cast<std::int64_t>(g.window.channels) * g.window.height * g.window.width;
    g.cols_per_sample = static_cast<std::int64_t>(g.depth) * g.pixels;
    g.y_per_sample = static_cast<std::int64_t>(g.out) * g.pixels;
    return g;
  }

  /// Whether this call convolves by oneDNN's direct convolution rather than im2col and gemm.
  /// Where the input's and the output's channels fill oneDNN's blocks of 16 (Note [direct
  /// convolution] says why only there).
  bool convolves_directly(const layer_context& context, bool bf16, const geometry& g) const {
    const bool blocks_fill = g.out % 16 == 0 && g.window.channels % 16 == 0;
    return direct_ && blocks_fill && (bf16 || kernels::cpu_gemm_is_onednn(context.kernels.gemm));
  }

  static kernels::conv_operands operands(bool bf16) {
    return bf16 ? kernels::conv_operands::bf16 : kernels::conv_operands::f32;
  }

  /// cols (C k k, OH OW) of one sample; refuses one past the tensor limit.
  tensor sample_buffer(const layer_context& context, const geometry& g,
                       dtype type = dtype::f32) const {
    if (g.cols_per_sample > max_tensor_elements())
      throw user_error("layer 'conv2d' at " + where_.to_string() +
                       ": unfolding one sample needs " + std::to_string(g.cols_per_sample) +
                       " values, more than the limit of " +
                       std::to_string(max_tensor_elements()));
    return tensor::empty({g.depth, g.pixels}, type, context.device);
  }

  /// cols (C k k, OH OW) of sample n of x, both f32 or both bf16.
  void unfold_sample(const layer_context& context, const geometry& g, const tensor& x, int n,
                     const tensor& cols) const {
    if (x.type() == dtype::bf16)
      im2col_bf16_(context.kernels, 1, g.window, x.bf16() + n * g.x_per_sample, cols.bf16());
    else
      im2col_(context.kernels, 1, g.window, x.f32() + n * g.x_per_sample, cols.f32());
  }

  /// One sample's f32 y (out > 0: out, OH OW) or dx (out 0: C, H, W), for a bf16 output.
  static tensor output_buffer(const layer_context& context, int out, const geometry& g) {
    if (out > 0)
      return tensor::empty({out, g.pixels}, dtype::f32, context.device);
    return tensor::empty({g.window.channels, g.window.height, g.window.width}, dtype::f32,
                         context.device);
  }

  /// A bf16 output's sample from its f32 buffer (`values`), at element `at` of `out`;
  /// nothing when `values` is `out` itself (f32).
  void round_sample(const layer_context& context, const tensor& values, const tensor& out,
                    std::int64_t at) const {
    if (values.shares_storage_with(out))
      return;
    round_(context.kernels, values.numel(), values.f32(), out.bf16() + at);
  }

  tensor ones_of(const layer_context& context, int count) const {
    tensor ones = tensor::empty({count}, dtype::f32, context.device);
    fill_(context.kernels, count, 1.0f, ones.f32());
    return ones;
  }

  source_position where_;
  std::int64_t out_;
  window_settings window_;
  bool bias_;
  init_kind init_ = init_kind::kaiming_uniform;
  bool direct_ = false;  // a CPU device: oneDNN's direct convolution where it is the faster
  kernels::ops::conv2d_forward::function forward_direct_ = nullptr;
  kernels::ops::conv2d_backward_data::function backward_data_direct_ = nullptr;
  kernels::ops::conv2d_backward_weights::function backward_weights_direct_ = nullptr;
  kernels::ops::gemm::function gemm_ = nullptr;
  kernels::ops::fill::function fill_ = nullptr;
  kernels::ops::im2col::function im2col_ = nullptr;
  kernels::ops::im2col_bf16::function im2col_bf16_ = nullptr;
  kernels::ops::col2im::function col2im_ = nullptr;
  kernels::ops::gemm_bf16::function gemm_bf16_ = nullptr;
  kernels::ops::to_bf16::function round_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("conv2d",
                      "2-D convolution over (channels, height, width) (settings: out, kernel, "
                      "stride, padding, init, bias)",
                      [](layer_settings& s) { return std::make_unique<conv2d>(s); });

}  // namespace troupe
