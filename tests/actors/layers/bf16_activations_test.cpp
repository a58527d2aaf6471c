// bf16_activations_test.cpp: layers given bf16 activations (Note [bf16 activations] in
// actors/training/layer_actor.cpp). Each layer's rule (made, kept, none) as the runtime asks
// it, and each layer that takes bf16 x, y, dy and dx computing exactly what it computes in
// f32 on the same values, its bf16 outputs that result rounded once.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/model/fused_layer.hpp"
#include "runtime/model/layer.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

layer_config act_config(const std::string& type,
                        std::vector<std::pair<std::string, std::int64_t>> keys = {}) {
  layer_config c;
  c.type = type;
  int line = 4;
  for (const auto& [key, value] : keys)
    c.settings[key] = setting_value{value, {"test.toml", line++, 7}};
  c.where = {"test.toml", 2, 1};
  c.type_where = {"test.toml", 3, 8};
  return c;
}

tensor act_random(const shape_t& shape, std::uint32_t seed) {
  return tensor::from(test::random_floats(static_cast<std::size_t>(element_count(shape)), seed),
                      shape);
}

tensor act_rounded(const tensor& t) {
  auto out = tensor::empty(t.shape(), dtype::bf16);
  kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu)(kernels::context{}, t.numel(),
                                                                    t.f32(), out.bf16());
  return out;
}

tensor act_widened(const tensor& t) {
  auto out = tensor::empty(t.shape(), dtype::f32);
  kernels::lookup<kernels::ops::from_bf16>(kernels::device_type::cpu)(kernels::context{}, t.numel(),
                                                                      t.bf16(), out.f32());
  return out;
}

std::vector<std::uint16_t> act_bits(const tensor& t) {
  REQUIRE(t.type() == dtype::bf16);
  return std::vector<std::uint16_t>(t.bf16(), t.bf16() + t.numel());
}

// A layer's pass in bf16 activations against its pass in f32 on the same values: x, dy given
// in bf16 and y, dx allocated in bf16 must be the f32 pass's y and dx rounded once (a layer
// that computes in f32 rounds once at the end), and the parameter gradients equal.
void check_against_f32(const layer_config& config, const shape_t& x_shape,
                       const std::vector<bool>& rounded_params) {
  auto math = create_layer(config);
  math->bind(kernels::device_type::cpu);
  shape_t per_sample(x_shape.begin() + 1, x_shape.end());
  shape_t y_shape{x_shape[0]};
  const auto out = math->output_shape(per_sample);
  y_shape.insert(y_shape.end(), out.begin(), out.end());
  std::vector<tensor> params;
  std::uint32_t seed = 40;
  for (const auto& spec : math->parameters(per_sample)) {
    params.push_back(act_random(spec.shape, ++seed));
    if (rounded_params.at(params.size() - 1))
      params.back() = act_rounded(params.back());
  }
  const auto x16 = act_rounded(act_random(x_shape, 1));
  const auto dy16 = act_rounded(act_random(y_shape, 2));
  layer_context context;
  auto pass = [&](const tensor& x, const tensor& y, const tensor& dy, tensor& dx) {
    std::vector<tensor> saved, grads;
    for (const auto& p : params)
      grads.push_back(tensor::zeros(p.shape()));
    math->forward(context, params, x, y, saved);
    math->backward(context, params, saved, dy, &dx, grads, false);
    return grads;
  };
  const auto y32 = tensor::zeros(y_shape);
  auto dx32 = tensor::zeros(x_shape);
  const auto grads32 = pass(act_widened(x16), y32, act_widened(dy16), dx32);
  const auto y16 = tensor::empty(y_shape, dtype::bf16);
  auto dx16 = tensor::empty(x_shape, dtype::bf16);
  const auto grads16 = pass(x16, y16, dy16, dx16);
  CHECK(act_bits(y16) == act_bits(act_rounded(y32)));
  CHECK(act_bits(dx16) == act_bits(act_rounded(dx32)));
  for (std::size_t k = 0; k < params.size(); ++k) {
    CAPTURE(k);
    CHECK(test::same_bits(grads16[k].to_vector(), grads32[k].to_vector()));
  }
}

}  // namespace

TEST_CASE("each layer says how its activations travel in bf16, and the runtime's rules follow") {
  const auto f32 = dtype::f32, bf16 = dtype::bf16;
  struct expectation {
    layer_config config;
    bf16_flow flow;
  };
  const std::vector<expectation> layers = {
      {act_config("linear", {{"out", 4}}), bf16_flow::made},
      {act_config("conv2d", {{"out", 4}, {"kernel", 3}}), bf16_flow::made},
      {act_config("relu"), bf16_flow::kept},
      {act_config("max_pool2d", {{"kernel", 2}}), bf16_flow::kept},
      {act_config("flatten"), bf16_flow::kept},
      {act_config("gelu"), bf16_flow::none},
      {act_config("tanh"), bf16_flow::none},
      {act_config("layer_norm"), bf16_flow::none},
      {act_config("avg_pool2d", {{"kernel", 2}}), bf16_flow::none},
  };
  const std::vector<tensor> bf16_weight{tensor::empty({4, 4}, bf16), tensor::empty({4}, f32)};
  const std::vector<tensor> f32_weight{tensor::empty({4, 4}, f32), tensor::empty({4}, f32)};
  for (const auto& l : layers) {
    CAPTURE(l.config.type);
    auto math = create_layer(l.config);
    math->bind(kernels::device_type::cpu);
    CHECK(math->activations() == l.flow);
    const auto& params = l.flow == bf16_flow::made ? bf16_weight : std::vector<tensor>{};
    CHECK(math->input_dtype(f32, params) == f32);
    switch (l.flow) {
      case bf16_flow::made:
        CHECK(math->input_dtype(bf16, params) == bf16);
        CHECK(math->output_dtype(f32, params, true) == bf16);
        CHECK(math->output_dtype(bf16, params, false) == f32);  // for a reader in f32
        // Computing in fp32 (a layer kept in fp32, or an fp32 run): f32 in and out.
        CHECK(math->input_dtype(bf16, f32_weight) == f32);
        CHECK(math->output_dtype(f32, f32_weight, true) == f32);
        break;
      case bf16_flow::kept:
        CHECK(math->input_dtype(bf16, params) == bf16);
        CHECK(math->output_dtype(bf16, params, false) == bf16);
        CHECK(math->output_dtype(f32, params, true) == f32);
        break;
      case bf16_flow::none:
        CHECK(math->input_dtype(bf16, params) == f32);
        CHECK(math->output_dtype(f32, params, true) == f32);
        break;
    }
  }
}

TEST_CASE(
    "linear, conv2d, relu, max pooling and flatten in bf16 activations are f32 rounded once") {
  if (!kernels::cpu::onednn_has_bf16()) {
    MESSAGE("skipped: this CPU has no native bf16 (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                             << ")");
    return;
  }
  SUBCASE("linear over rows and over positions") {
    check_against_f32(act_config("linear", {{"out", 9}}), {6, 40}, {true, false});
    check_against_f32(act_config("linear", {{"out", 5}}), {3, 4, 7}, {true, false});
  }
  SUBCASE("conv2d by im2col (3 channels) and by oneDNN's direct convolution (16)") {
    check_against_f32(act_config("conv2d", {{"out", 5}, {"kernel", 3}, {"padding", 1}}),
                      {2, 3, 6, 6}, {true, false});
    check_against_f32(act_config("conv2d", {{"out", 16}, {"kernel", 3}, {"padding", 1}}),
                      {2, 16, 6, 5}, {true, false});
  }
  SUBCASE("relu, max pooling (overlapping windows too) and flatten move bits exactly") {
    check_against_f32(act_config("relu"), {3, 17}, {});
    check_against_f32(act_config("max_pool2d", {{"kernel", 2}}), {2, 3, 8, 6}, {});
    check_against_f32(act_config("max_pool2d", {{"kernel", 3}, {"stride", 1}, {"padding", 1}}),
                      {2, 2, 5, 5}, {});
    check_against_f32(act_config("flatten"), {2, 3, 4, 5}, {});
  }
}

TEST_CASE("a fused chain applies the rules between its members, as their actors would") {
  // linear -> relu -> linear -> gelu: the first linear makes bf16 for relu, relu keeps it,
  // the second linear makes f32 for gelu (which takes f32). The fused layer's y is gelu's.
  if (!kernels::cpu::onednn_has_bf16())
    return;  // the test above says why
  std::vector<fused_layer::member> members;
  const std::vector<layer_config> configs = {act_config("linear", {{"out", 8}}), act_config("relu"),
                                             act_config("linear", {{"out", 6}}),
                                             act_config("gelu")};
  std::vector<shape_t> inputs = {{5}, {8}, {8}, {6}};
  for (std::size_t i = 0; i < configs.size(); ++i) {
    auto math = create_layer(configs[i]);
    math->bind(kernels::device_type::cpu);
    members.push_back(fused_layer::member{std::move(math), static_cast<std::int32_t>(i),
                                          "layer_" + std::to_string(i), inputs[i]});
  }
  fused_layer fused{std::move(members)};
  std::vector<tensor> params{act_rounded(act_random({8, 5}, 3)), act_random({8}, 4),
                             act_rounded(act_random({6, 8}, 5)), act_random({6}, 6)};
  CHECK(fused.input_dtype(dtype::bf16, params) == dtype::bf16);
  CHECK(fused.output_dtype(dtype::f32, params, true) == dtype::f32);  // gelu's: f32

  // The members one by one, as their actors would run them (the runtime's rules by hand).
  layer_context context;
  const auto x = act_random({4, 5}, 7), dy = act_random({4, 6}, 8);
  const auto& m = fused.members();
  std::vector<std::vector<tensor>> saved(4);
  const auto y0 = tensor::empty({4, 8}, dtype::bf16), y1 = tensor::empty({4, 8}, dtype::bf16);
  const auto y2 = tensor::zeros({4, 6}), y3 = tensor::zeros({4, 6});
  m[0].math->forward(context, {params[0], params[1]}, x, y0, saved[0]);
  m[1].math->forward(context, {}, y0, y1, saved[1]);
  m[2].math->forward(context, {params[2], params[3]}, y1, y2, saved[2]);
  m[3].math->forward(context, {}, y2, y3, saved[3]);
  std::vector<tensor> grads;
  for (const auto& p : params)
    grads.push_back(tensor::zeros(p.shape()));
  auto dx3 = tensor::zeros({4, 6});
  std::vector<tensor> none;
  m[3].math->backward(context, {}, saved[3], dy, &dx3, none, false);
  auto dx2 = tensor::empty({4, 8}, dtype::bf16);  // x's dtype: relu's bf16 y
  std::vector<tensor> g2{grads[2], grads[3]};
  m[2].math->backward(context, {params[2], params[3]}, saved[2], dx3, &dx2, g2, false);
  auto dx1 = tensor::empty({4, 8}, dtype::bf16);
  m[1].math->backward(context, {}, saved[1], dx2, &dx1, none, false);
  auto dx0 = tensor::zeros({4, 5});
  std::vector<tensor> g0{grads[0], grads[1]};
  m[0].math->backward(context, {params[0], params[1]}, saved[0], dx1, &dx0, g0, false);

  std::vector<tensor> fused_saved, fused_grads;
  for (const auto& p : params)
    fused_grads.push_back(tensor::zeros(p.shape()));
  const auto y = tensor::zeros({4, 6});
  auto dx = tensor::zeros({4, 5});
  fused.forward(context, params, x, y, fused_saved);
  fused.backward(context, params, fused_saved, dy, &dx, fused_grads, false);
  CHECK(test::same_bits(y.to_vector(), y3.to_vector()));
  CHECK(test::same_bits(dx.to_vector(), dx0.to_vector()));
  for (std::size_t k = 0; k < params.size(); ++k) {
    CAPTURE(k);
    CHECK(test::same_bits(fused_grads[k].to_vector(), grads[k].to_vector()));
  }
}
