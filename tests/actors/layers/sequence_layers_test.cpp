// sequence_layers_test.cpp: the layers of a transformer block (attention, layer_norm, and
// linear over positions) beyond the gradient check of layers_test.cpp: attention's forward
// against a naive causal multi-head attention in double, layer_norm's parameters, and the
// config errors a user meets.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/layer.hpp"
#include "tests/actors/layer_test_support.hpp"

using namespace troupe;

namespace {

layer_config sequence_layer(const std::string& type, std::map<std::string, std::int64_t> values) {
  return test::layer_table("lm.toml", type, values);
}

using test::random_tensor;

}  // namespace

TEST_CASE("attention is causal multi-head self-attention with fused QKV and an output projection") {
  const int b = 2, t = 5, c = 6, heads = 3, d = c / heads;
  auto layer = create_layer(sequence_layer("attention", {{"heads", heads}}));
  layer->bind(device_type::cpu);
  const auto specs = layer->parameters({t, c});
  REQUIRE(specs.size() == 4);
  CHECK(specs[0].name == "in_proj_weight");
  CHECK(specs[0].shape == shape_t{3 * c, c});
  CHECK(specs[2].name == "out_proj.weight");
  const tensor x = random_tensor({b, t, c}, 1);
  const std::vector<tensor> params{random_tensor({3 * c, c}, 2), random_tensor({3 * c}, 3),
                                   random_tensor({c, c}, 4), random_tensor({c}, 5)};
  const tensor y = tensor::empty({b, t, c});
  std::vector<tensor> saved;
  layer->forward(layer_context{}, params, x, y, saved);

  const float* w_in = params[0].f32();
  const float* b_in = params[1].f32();
  const float* w_out = params[2].f32();
  const float* b_out = params[3].f32();
  double worst = 0;
  for (int n = 0; n < b; ++n) {
    // qkv[i][j] for position i, output j of the fused projection.
    std::vector<std::vector<double>> qkv(t, std::vector<double>(3 * c));
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < 3 * c; ++j) {
        double sum = b_in[j];
        for (int k = 0; k < c; ++k)
          sum += static_cast<double>(x.f32()[(n * t + i) * c + k]) * w_in[j * c + k];
        qkv[i][j] = sum;
      }
    std::vector<std::vector<double>> o(t, std::vector<double>(c, 0.0));
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < t; ++i) {
        std::vector<double> weights(i + 1);
        double most = -1e300, total = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int k = 0; k < d; ++k)
            dot += qkv[i][h * d + k] * qkv[j][c + h * d + k];
          weights[j] = dot / std::sqrt(static_cast<double>(d));
          most = std::max(most, weights[j]);
        }
        for (int j = 0; j <= i; ++j)
          total += (weights[j] = std::exp(weights[j] - most));
        for (int j = 0; j <= i; ++j)
          for (int k = 0; k < d; ++k)
            o[i][h * d + k] += weights[j] / total * qkv[j][2 * c + h * d + k];
      }
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < c; ++j) {
        double sum = b_out[j];
        for (int k = 0; k < c; ++k)
          sum += o[i][k] * w_out[j * c + k];
        worst = std::max(worst, std::fabs(sum - y.f32()[(n * t + i) * c + j]));
      }
  }
  // Three float GEMM stages of <= 6 terms in [-1, 1) and a softmax: a few hundred ulps of
  // O(1) values at most.
  CHECK(worst <= 1e-5);
}

TEST_CASE("attention's key bias gets an exact zero gradient, the query and value biases theirs") {
  // Note [the key bias] in actors/layers/attention.cpp: adding b_k to every key adds
  // q_i . b_k to all of row i's scores, which the softmax ignores.
  const int b = 2, t = 5, c = 6;
  auto layer = create_layer(sequence_layer("attention", {{"heads", 2}}));
  layer->bind(device_type::cpu);
  const tensor x = random_tensor({b, t, c}, 11);
  const std::vector<tensor> params{random_tensor({3 * c, c}, 12), random_tensor({3 * c}, 13),
                                   random_tensor({c, c}, 14), random_tensor({c}, 15)};
  const tensor y = tensor::empty({b, t, c});
  std::vector<tensor> saved;
  layer->forward(layer_context{}, params, x, y, saved);
  std::vector<tensor> grads;
  for (const auto& p : params)
    grads.push_back(tensor::zeros(p.shape()));
  const tensor dy = random_tensor({b, t, c}, 16);
  for (bool accumulate : {false, true}) {
    layer->backward(layer_context{}, params, saved, dy, nullptr, grads, accumulate);
    double query = 0, key = 0, value = 0;
    for (int i = 0; i < c; ++i) {
      query += std::fabs(grads[1].f32()[i]);
      key += std::fabs(grads[1].f32()[c + i]);
      value += std::fabs(grads[1].f32()[2 * c + i]);
    }
    CHECK(key == 0.0);
    CHECK(query > 1e-3);
    CHECK(value > 1e-3);
  }
}

TEST_CASE("attention and layer_norm refuse inputs they cannot take, at their position") {
  auto layer = create_layer(sequence_layer("attention", {{"heads", 4}}));
  CHECK_THROWS_WITH_AS(layer->output_shape({24}),
                       "lm.toml:3:1: layer 'attention' takes sequences of shape (positions, "
                       "channels), found (24)",
                       config_error);
  CHECK_THROWS_WITH_AS(layer->output_shape({8, 6}),
                       "lm.toml:3:1: layer 'attention': 4 heads do not divide 6 channels",
                       config_error);
  CHECK(layer->output_shape({8, 12}) == shape_t{8, 12});
  auto norm = create_layer(sequence_layer("layer_norm", {}));
  CHECK(norm->output_shape({8, 12}) == shape_t{8, 12});
  const auto specs = norm->parameters({8, 12});
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].shape == shape_t{12});
  CHECK(specs[0].init == init_kind::ones);
  CHECK(specs[1].init == init_kind::zeros);
}

TEST_CASE("dropout is the identity in evaluation and keys its mask by sample in training") {
  auto layer = create_layer(sequence_layer("dropout", {}));
  layer->bind(device_type::cpu);
  const tensor x = random_tensor({4, 10}, 3);
  const tensor eval_y = tensor::empty({4, 10});
  std::vector<tensor> saved;
  layer_context evaluation;
  evaluation.training = false;
  layer->forward(evaluation, {}, x, eval_y, saved);
  CHECK(std::vector<float>(eval_y.f32(), eval_y.f32() + 40) ==
        std::vector<float>(x.f32(), x.f32() + 40));
  // Training: samples 2 and 3 as a micro-batch of their own (first_sample = 2) get the
  // masks they get inside the whole batch; another step gets other masks.
  layer_context training;
  training.seed = 42;
  training.step = 7;
  training.layer = 3;
  const tensor whole = tensor::empty({4, 10});
  layer->forward(training, {}, x, whole, saved);
  training.first_sample = 2;
  const tensor part = tensor::empty({2, 10});
  layer->forward(training, {}, x.view(20, {2, 10}), part, saved);
  CHECK(std::vector<float>(part.f32(), part.f32() + 20) ==
        std::vector<float>(whole.f32() + 20, whole.f32() + 40));
  training.first_sample = 0;
  training.step = 8;
  const tensor next_step = tensor::empty({4, 10});
  layer->forward(training, {}, x, next_step, saved);
  CHECK(std::vector<float>(next_step.f32(), next_step.f32() + 40) !=
        std::vector<float>(whole.f32(), whole.f32() + 40));
}
