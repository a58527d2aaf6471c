// image_layers_test.cpp: the image layers (conv2d, max_pool2d, avg_pool2d, flatten,
// unflatten) beyond the gradient check of layers_test.cpp: conv2d's forward against a naive
// convolution, the shapes and parameters they declare, and the config errors a user meets.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/layer.hpp"
#include "tests/actors/layer_test_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace troupe;

namespace {

layer_config image_layer(const std::string& type, std::map<std::string, std::int64_t> values) {
  return test::layer_table("cnn.toml", type, values);
}

using test::random_tensor;

}  // namespace

TEST_CASE("conv2d's forward is the convolution of torch.nn.Conv2d, stride and padding included") {
  auto conv = create_layer(
      image_layer("conv2d", {{"out", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}));
  conv->bind(device_type::cpu);
  const shape_t input{2, 7, 6};  // C, H, W
  REQUIRE(conv->output_shape(input) == shape_t{3, 4, 3});
  const int batch = 2, channels = 2, height = 7, width = 6, out = 3, out_h = 4, out_w = 3;
  const tensor x = random_tensor({batch, channels, height, width}, 1);
  const tensor weight = random_tensor({out, channels, 3, 3}, 2);
  const tensor bias = random_tensor({out}, 3);
  const tensor y = tensor::empty({batch, out, out_h, out_w});
  std::vector<tensor> saved;
  conv->forward(layer_context{}, {weight, bias}, x, y, saved);
  CHECK(saved.size() == 1);  // x only: backward unfolds it again, sample by sample
  double worst = 0;
  for (int b = 0; b < batch; ++b)
    for (int o = 0; o < out; ++o)
      for (int oh = 0; oh < out_h; ++oh)
        for (int ow = 0; ow < out_w; ++ow) {
          double sum = bias.f32()[o];
          for (int c = 0; c < channels; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                const int ih = oh * 2 - 1 + i, iw = ow * 2 - 1 + j;
                if (ih < 0 || ih >= height || iw < 0 || iw >= width)
                  continue;
                sum += static_cast<double>(
                           x.f32()[((b * channels + c) * height + ih) * width + iw]) *
                       weight.f32()[((o * channels + c) * 3 + i) * 3 + j];
              }
          const double got = y.f32()[((b * out + o) * out_h + oh) * out_w + ow];
          worst = std::max(worst, std::fabs(got - sum));
        }
  // 19 products of terms in [-1, 1) and a bias: float rounding stays below 20 * 2^-23.
  CHECK(worst <= 20 * 1.2e-7);
}

TEST_CASE("conv2d declares torch's weight (out, C, k, k) and bias, and a GEMM cost") {
  auto conv = create_layer(image_layer("conv2d", {{"out", 8}, {"kernel", 5}, {"padding", 2}}));
  CHECK(conv->output_shape({1, 28, 28}) == shape_t{8, 28, 28});
  const auto params = conv->parameters({1, 28, 28});
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "weight");
  CHECK(params[0].shape == shape_t{8, 1, 5, 5});
  CHECK(params[0].fan_in == 25);
  CHECK(params[0].fan_out == 200);
  CHECK(params[1].name == "bias");
  CHECK(params[1].shape == shape_t{8});
  CHECK(conv->cost({1, 28, 28}) == doctest::Approx(6.0 * 8 * 25 * 28 * 28));
}

TEST_CASE("image layers refuse inputs that are not images and windows that do not fit") {
  auto conv = create_layer(image_layer("conv2d", {{"out", 4}, {"kernel", 3}}));
  CHECK_THROWS_WITH_AS(conv->output_shape({784}),
                       doctest::Contains("cnn.toml:3:1: layer 'conv2d' takes inputs of shape "
                                         "(channels, height, width), found (784); "),
                       config_error);
  CHECK_THROWS_WITH_AS(conv->output_shape({784}), doctest::Contains("type = \"unflatten\""),
                       config_error);
  CHECK_THROWS_WITH_AS(conv->output_shape({1, 2, 5}),
                       doctest::Contains("a 3x3 window does not fit the input (1, 2, 5) padded by 0"),
                       config_error);
  auto pool = create_layer(image_layer("max_pool2d", {{"kernel", 2}}));
  CHECK(pool->output_shape({4, 7, 8}) == shape_t{4, 3, 4});  // floor, stride = kernel
  CHECK(create_layer(image_layer("avg_pool2d", {{"kernel", 3}, {"stride", 1}, {"padding", 1}}))
            ->output_shape({2, 5, 5}) == shape_t{2, 5, 5});
  // torch: "pad should be at most half of effective kernel size".
  CHECK_THROWS_WITH_AS(create_layer(image_layer("max_pool2d", {{"kernel", 2}, {"padding", 2}})),
                       doctest::Contains("cnn.toml:6:9: layer 'max_pool2d' setting 'padding'"),
                       config_error);
}

TEST_CASE("unflatten turns features into an image and flatten turns it back") {
  auto unflatten =
      create_layer(image_layer("unflatten", {{"channels", 1}, {"height", 28}, {"width", 28}}));
  CHECK(unflatten->output_shape({784}) == shape_t{1, 28, 28});
  CHECK_THROWS_WITH_AS(unflatten->output_shape({780}),
                       "cnn.toml:3:1: layer 'unflatten' maps (784) features to (1, 28, 28), "
                       "found input (780)",
                       config_error);
  auto flatten = create_layer(image_layer("flatten", {}));
  CHECK(flatten->output_shape({16, 7, 7}) == shape_t{784});
  flatten->bind(device_type::cpu);
  const tensor x = random_tensor({2, 3, 2, 2}, 9);
  const tensor y = tensor::empty({2, 12});
  std::vector<tensor> saved;
  flatten->forward(layer_context{}, {}, x, y, saved);
  CHECK(std::vector<float>(y.f32(), y.f32() + 24) == std::vector<float>(x.f32(), x.f32() + 24));
}

TEST_CASE("a layer whose output for a batch passes the tensor limit is a config error at it") {
  const auto config = parse_config(R"(
[data]
source = "synthetic"
batch_size = 128
eval_batch_size = 1000
synthetic_features = 784

[[model.layers]]
type = "unflatten"
height = 28
width = 28

[[model.layers]]
type = "conv2d"
out = 65536
kernel = 1

[[model.layers]]
type = "flatten"

[[model.layers]]
type = "linear"
out = 10
)",
                                   "huge.toml");
  CHECK_THROWS_WITH_AS(check_model(config, 784, 10),
                       "huge.toml:13:1: layer 'conv2d' outputs (65536, 28, 28) per sample, more "
                       "than the limit of 1073741824 values for a batch of 1000; use a smaller "
                       "layer or batch",
                       config_error);
}

namespace {

// A bf16 copy of t, and the floats that copy holds.
tensor as_bf16(const tensor& t) {
  auto out = tensor::empty(t.shape(), dtype::bf16);
  kernels::lookup<kernels::ops::to_bf16>(device_type::cpu)(kernels::context{}, t.numel(), t.f32(),
                                                           out.bf16());
  return out;
}
tensor bf16_values(const tensor& t) {
  auto out = tensor::empty(t.shape());
  kernels::lookup<kernels::ops::from_bf16>(device_type::cpu)(kernels::context{}, t.numel(),
                                                             as_bf16(t).bf16(), out.f32());
  return out;
}

struct conv_pass {
  std::vector<float> y, dx, dw, db;
};

// One forward and backward of `conv` on the given operands, with the CPU's f32 products on
// `gemm` (openblas: im2col and gemm; onednn: oneDNN's direct convolution where it applies).
conv_pass conv_pass_of(troupe::layer& conv, kernels::cpu_gemm gemm, const tensor& weight,
                       const tensor& bias, const tensor& x, const tensor& dy) {
  layer_context context;
  context.kernels.gemm = gemm;
  std::vector<tensor> saved;
  const tensor y = tensor::empty(dy.shape());
  conv.forward(context, {weight, bias}, x, y, saved);
  tensor dx = tensor::empty(x.shape());
  std::vector<tensor> grads{tensor::empty(weight.shape()), tensor::empty(bias.shape())};
  conv.backward(context, {weight, bias}, saved, dy, &dx, grads, false);
  return {y.to_vector(), dx.to_vector(), grads[0].to_vector(), grads[1].to_vector()};
}

}  // namespace

TEST_CASE(
    "conv2d on a CPU convolves directly where its channels fill oneDNN's blocks, as im2col does") {
  struct geometry {
    std::int64_t channels, side, out, kernel, stride, padding;
  };
  for (const auto& g : std::vector<geometry>{{16, 9, 16, 3, 1, 1},
                                             {32, 8, 32, 3, 2, 1},
                                             {16, 6, 16, 2, 1, 0},
                                             {1, 6, 16, 3, 1, 1}}) {  // 1 channel: im2col
    CAPTURE(g.channels);
    CAPTURE(g.out);
    auto conv = create_layer(image_layer(
        "conv2d",
        {{"out", g.out}, {"kernel", g.kernel}, {"stride", g.stride}, {"padding", g.padding}}));
    conv->bind(device_type::cpu);
    const auto y_shape = conv->output_shape({g.channels, g.side, g.side});
    const std::int64_t batch = 3;
    const tensor x = random_tensor({batch, g.channels, g.side, g.side}, 11);
    const tensor dy = random_tensor({batch, y_shape[0], y_shape[1], y_shape[2]}, 12);
    const tensor weight = random_tensor({g.out, g.channels, g.kernel, g.kernel}, 13);
    const tensor bias = random_tensor({g.out}, 14);
    // f32: sums of at most 3 x 32 x 9 products of terms in [-1, 1) in other orders.
    const auto im2col = conv_pass_of(*conv, kernels::cpu_gemm::openblas, weight, bias, x, dy);
    const auto direct = conv_pass_of(*conv, kernels::cpu_gemm::onednn, weight, bias, x, dy);
    TROUPE_CHECK_CLOSE(direct.y, im2col.y, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(direct.dx, im2col.dx, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(direct.dw, im2col.dw, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(direct.db, im2col.db, 2e-5, 1e-5);
    if (!kernels::cpu::onednn_has_bf16())
      continue;  // bf16: refused on this CPU ([run] precision), so untested
    // bf16: the products of the rounded operands, exact in f32, summed in another order: the
    // f32 layer on the rounded values gives the same within f32's rounding, not bf16's.
    const auto mixed = conv_pass_of(*conv, kernels::cpu_gemm::automatic, as_bf16(weight), bias, x,
                                    bf16_values(dy));
    const auto exact = conv_pass_of(*conv, kernels::cpu_gemm::openblas, bf16_values(weight), bias,
                                    bf16_values(x), bf16_values(dy));
    TROUPE_CHECK_CLOSE(mixed.y, exact.y, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(mixed.dx, exact.dx, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(mixed.dw, exact.dw, 2e-5, 1e-5);
    TROUPE_CHECK_CLOSE(mixed.db, exact.db, 2e-5, 1e-5);
  }
}
