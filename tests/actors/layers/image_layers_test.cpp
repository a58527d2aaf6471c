// image_layers_test.cpp: the image layers (conv2d, max_pool2d, avg_pool2d, flatten,
// unflatten) beyond the gradient check of layers_test.cpp: conv2d's forward against a naive
// convolution, the shapes and parameters they declare, and the config errors a user meets.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/layer.hpp"
#include "tests/actors/layer_test_support.hpp"

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
