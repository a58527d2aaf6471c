// bf16_layers_test.cpp: the linear layer given a bf16 weight ([run] precision = "bf16")
// against the same layer in fp32, within bf16's rounding of its operands; and a layer's own
// `precision` setting, which create_layer reads for the runtime.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/config/precision.hpp"
#include "runtime/model/layer.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

layer_config linear_config(std::int64_t out) {
  layer_config c;
  c.type = "linear";
  c.settings["out"] = setting_value{out, {"test.toml", 4, 7}};
  c.where = {"test.toml", 2, 1};
  c.type_where = {"test.toml", 3, 8};
  return c;
}

tensor filled(const std::vector<float>& values, shape_t shape) { return tensor::from(values, shape); }

tensor rounded(const tensor& t) {
  auto out = tensor::empty(t.shape(), dtype::bf16);
  kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu)(kernels::context{}, t.numel(),
                                                                    t.f32(), out.bf16());
  return out;
}

// Each output of a product of rounded operands is within (2 u_b + u_b^2) sum |a| |b| of the
// fp32 product (each operand carries a relative error of at most u_b = 2^-8, bf16's unit
// roundoff: 8 significant bits), plus both products' fp32 summation, (k + 2) 2^-24
// sum |a| |b| each.
double allowed(double magnitude, int k) {
  const double u_b = std::ldexp(1.0, -8), u = std::ldexp(1.0, -24);
  return (2 * u_b + u_b * u_b + 2 * (k + 2) * u) * magnitude + 1e-30;
}

}  // namespace

TEST_CASE("linear with a bf16 weight computes y, dx and dW within bf16's rounding of fp32's") {
  if (!kernels::cpu::onednn_has_bf16()) {
    MESSAGE("skipped: this CPU has no native bf16 (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                             << ")");
    return;
  }
  const int batch = 6, in = 40, out = 9;
  auto math = create_layer(linear_config(out));
  math->bind(kernels::device_type::cpu);
  CHECK(math->bf16_parameters() == std::vector<std::string>{"weight"});
  const auto x = filled(test::random_floats(batch * in, 1), {batch, in});
  const auto w = filled(test::random_floats(out * in, 2), {out, in});
  const auto b = filled(test::random_floats(out, 3), {out});
  const auto dy = filled(test::random_floats(batch * out, 4), {batch, out});
  const std::vector<tensor> fp32{w, b}, mixed{rounded(w), b};
  layer_context context;
  std::vector<tensor> saved32, saved16;
  const auto y32 = tensor::zeros({batch, out}), y16 = tensor::zeros({batch, out});
  math->forward(context, fp32, x, y32, saved32);
  math->forward(context, mixed, x, y16, saved16);
  REQUIRE(saved16.size() == 1);
  CHECK(saved16[0].type() == dtype::bf16);  // x kept for the backward in half the bytes
  auto dx32 = tensor::zeros({batch, in}), dx16 = tensor::zeros({batch, in});
  std::vector<tensor> g32{tensor::zeros({out, in}), tensor::zeros({out})};
  std::vector<tensor> g16{tensor::zeros({out, in}), tensor::zeros({out})};
  math->backward(context, fp32, saved32, dy, &dx32, g32, false);
  math->backward(context, mixed, saved16, dy, &dx16, g16, false);

  const auto xs = x.to_vector(), ws = w.to_vector(), dys = dy.to_vector();
  int wrong = 0, differ = 0;
  auto compare = [&](float got, float want, double magnitude, int k) {
    wrong += std::fabs(double(got) - want) <= allowed(magnitude, k) ? 0 : 1;
    differ += got != want ? 1 : 0;
  };
  const auto y_a = y16.to_vector(), y_b = y32.to_vector();
  for (int r = 0; r < batch; ++r)
    for (int o = 0; o < out; ++o) {
      double m = 0;
      for (int i = 0; i < in; ++i)
        m += std::fabs(xs[r * in + i] * ws[o * in + i]);
      compare(y_a[r * out + o], y_b[r * out + o], m, in);
    }
  const auto dx_a = dx16.to_vector(), dx_b = dx32.to_vector();
  for (int r = 0; r < batch; ++r)
    for (int i = 0; i < in; ++i) {
      double m = 0;
      for (int o = 0; o < out; ++o)
        m += std::fabs(dys[r * out + o] * ws[o * in + i]);
      compare(dx_a[r * in + i], dx_b[r * in + i], m, out);
    }
  const auto dw_a = g16[0].to_vector(), dw_b = g32[0].to_vector();
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      double m = 0;
      for (int r = 0; r < batch; ++r)
        m += std::fabs(dys[r * out + o] * xs[r * in + i]);
      compare(dw_a[o * in + i], dw_b[o * in + i], m, batch);
    }
  CHECK(wrong == 0);
  CHECK(differ > 0);                                  // it did compute in bf16
  CHECK(g16[1].to_vector() == g32[1].to_vector());  // the bias's gradient: fp32 alike
}

TEST_CASE("the split backward in bf16 computes what the whole one does") {
  if (!kernels::cpu::onednn_has_bf16())
    return;  // the test above says why
  struct layer_case {
    layer_config config;
    shape_t x, y, weight;
  };
  layer_config conv;
  conv.type = "conv2d";
  conv.settings["out"] = setting_value{std::int64_t{3}, {"test.toml", 4, 7}};
  conv.settings["kernel"] = setting_value{std::int64_t{3}, {"test.toml", 5, 7}};
  const std::vector<layer_case> cases{{linear_config(5), {4, 16}, {4, 5}, {5, 16}},
                                      {conv, {2, 2, 5, 5}, {2, 3, 3, 3}, {3, 2, 3, 3}}};
  for (const auto& c : cases) {
    CAPTURE(c.config.type);
    auto math = create_layer(c.config);
    math->bind(kernels::device_type::cpu);
    const auto out = c.weight[0];
    auto random = [](const shape_t& shape, std::uint32_t seed) {
      return filled(test::random_floats(std::size_t(element_count(shape)), seed), shape);
    };
    const auto x = random(c.x, 5), dy = random(c.y, 6);
    const std::vector<tensor> params{rounded(random(c.weight, 7)), random({out}, 8)};
    layer_context context;
    std::vector<tensor> saved;
    math->forward(context, params, x, tensor::zeros(c.y), saved);
    auto dx = tensor::zeros(c.x), dx_split = tensor::zeros(c.x);
    std::vector<tensor> g{tensor::zeros(c.weight), tensor::zeros({out})};
    std::vector<tensor> g_split{tensor::zeros(c.weight), tensor::zeros({out})};
    math->backward(context, params, saved, dy, &dx, g, false);
    math->backward_input(context, params, saved, dy, dx_split);
    math->backward_weight(context, params, saved, dy, g_split, false);
    CHECK(dx.to_vector() == dx_split.to_vector());
    CHECK(g[0].to_vector() == g_split[0].to_vector());
    CHECK(g[1].to_vector() == g_split[1].to_vector());
  }
}

TEST_CASE("[run] precision resolves by the CPU, and refuses bf16 where it is not native") {
  const source_position at{"t.toml", 9, 13};
  const cpu_bf16_support amx{true, "avx512_core_amx"}, avx2{false, "avx2"};
  CHECK(resolve_precision("fp32", "[run] precision", at, avx2) == numeric_precision::fp32);
  CHECK(resolve_precision("bf16", "[run] precision", at, amx) == numeric_precision::bf16);
  CHECK(resolve_precision("auto", "[run] precision", at, amx) == numeric_precision::bf16);
  CHECK(resolve_precision("auto", "[run] precision", at, avx2) == numeric_precision::fp32);
  try {
    resolve_precision("bf16", "[run] precision", at, avx2);
    FAIL("bf16 without native bf16 was accepted");
  } catch (const config_error& e) {
    const std::string message = e.what();
    CHECK(e.where().line == 9);
    CHECK(message.find("AVX512-BF16 or AMX") != std::string::npos);
    CHECK(message.find("avx2") != std::string::npos);
  }
}

TEST_CASE("a layer's own precision is fp32 or bf16, and bf16 only where the layer computes it") {
  const cpu_bf16_support amx{true, "avx512_core_amx"};
  auto with = [](layer_config c, setting_value v) {
    c.settings["precision"] = std::move(v);
    return c;
  };
  const setting_value fp32{std::string{"fp32"}, {"test.toml", 5, 13}};
  const setting_value bf16{std::string{"bf16"}, {"test.toml", 5, 13}};
  CHECK(!layer_precision(linear_config(3).settings, amx));
  CHECK(layer_precision(with(linear_config(3), fp32).settings, amx) == numeric_precision::fp32);
  CHECK(layer_precision(with(linear_config(3), bf16).settings, amx) == numeric_precision::bf16);
  // The layer itself never sees the key (it would refuse an unknown setting).
  CHECK(create_layer(with(linear_config(3), fp32)) != nullptr);
  for (const setting_value& bad : {setting_value{std::string{"auto"}, {"test.toml", 5, 13}},
                                   setting_value{std::string{"half"}, {"test.toml", 5, 13}},
                                   setting_value{std::int64_t{16}, {"test.toml", 5, 13}}})
    CHECK_THROWS_AS(layer_precision(with(linear_config(3), bad).settings, amx), config_error);
  if (kernels::cpu::onednn_has_bf16()) {
    layer_config relu;
    relu.type = "relu";
    CHECK_THROWS_WITH_AS(create_layer(with(relu, bf16)),
                         doctest::Contains("computes in fp32 only"), config_error);
  }
}

TEST_CASE("conv2d with a bf16 weight computes y, dx and dW within bf16's rounding of fp32's") {
  if (!kernels::cpu::onednn_has_bf16())
    return;  // the linear test above says why
  layer_config c;
  c.type = "conv2d";
  c.settings["out"] = setting_value{std::int64_t{3}, {"test.toml", 4, 7}};
  c.settings["kernel"] = setting_value{std::int64_t{3}, {"test.toml", 5, 7}};
  c.settings["padding"] = setting_value{std::int64_t{1}, {"test.toml", 6, 7}};
  auto math = create_layer(c);
  math->bind(kernels::device_type::cpu);
  CHECK(math->bf16_parameters() == std::vector<std::string>{"weight"});
  const int batch = 2, channels = 2, side = 6, out = 3, depth = channels * 9;
  auto values = [](int count, std::uint32_t seed) { return test::random_floats(count, seed); };
  const auto xs = values(batch * channels * side * side, 11), ws = values(out * depth, 12);
  const auto dys = values(batch * out * side * side, 13);
  auto absolute = [](std::vector<float> v) {
    for (auto& e : v)
      e = std::fabs(e);
    return v;
  };
  const shape_t x_shape{batch, channels, side, side}, y_shape{batch, out, side, side};
  const shape_t w_shape{out, channels, 3, 3};
  layer_context context;
  // One pass of the fp32 layer: y, dx and dW of the given operands.
  struct pass {
    std::vector<float> y, dx, dw;
  };
  auto run = [&](const std::vector<tensor>& params, const tensor& x, const tensor& dy) {
    std::vector<tensor> saved;
    const auto y = tensor::zeros(y_shape);
    math->forward(context, params, x, y, saved);
    auto dx = tensor::zeros(x_shape);
    std::vector<tensor> grads{tensor::zeros(w_shape), tensor::zeros({out})};
    math->backward(context, params, saved, dy, &dx, grads, false);
    return pass{y.to_vector(), dx.to_vector(), grads[0].to_vector()};
  };
  const auto x = filled(xs, x_shape), dy = filled(dys, y_shape), w = filled(ws, w_shape);
  const auto zero_bias = tensor::zeros({out});
  const auto fp32 = run({w, zero_bias}, x, dy);
  const auto mixed = run({rounded(w), zero_bias}, x, dy);
  // The fp32 layer on |x|, |W| and |dy| gives every output's sum |a| |b|, the scale of
  // bf16's rounding error in it (allowed() above).
  const auto scale = run({filled(absolute(ws), w_shape), zero_bias}, filled(absolute(xs), x_shape),
                         filled(absolute(dys), y_shape));
  int wrong = 0, differ = 0;
  auto compare = [&](const std::vector<float>& got, const std::vector<float>& want,
                     const std::vector<float>& magnitude, int k) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      wrong += std::fabs(double(got[i]) - want[i]) <= allowed(magnitude[i], k) ? 0 : 1;
      differ += got[i] != want[i] ? 1 : 0;
    }
  };
  compare(mixed.y, fp32.y, scale.y, depth);
  compare(mixed.dx, fp32.dx, scale.dx, out * 9);
  compare(mixed.dw, fp32.dw, scale.dw, batch * side * side);
  CHECK(wrong == 0);
  CHECK(differ > 0);
}

namespace {

// ||got - want|| / ||want|| over all elements (Frobenius).
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("attention with bf16 projection weights computes y, dx and dW within bf16's rounding") {
  if (!kernels::cpu::onednn_has_bf16())
    return;  // the linear test above says why
  const int b = 2, t = 5, c = 8, heads = 2;
  layer_config config;
  config.type = "attention";
  config.settings["heads"] = setting_value{std::int64_t{heads}, {"test.toml", 4, 9}};
  auto math = create_layer(config);
  math->bind(kernels::device_type::cpu);
  CHECK(math->bf16_parameters() == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
  auto random = [](const shape_t& shape, std::uint32_t seed) {
    return filled(test::random_floats(std::size_t(element_count(shape)), seed), shape);
  };
  const auto x = random({b, t, c}, 21), dy = random({b, t, c}, 22);
  const auto w_in = random({3 * c, c}, 23), b_in = random({3 * c}, 24);
  const auto w_out = random({c, c}, 25), b_out = random({c}, 26);
  struct pass {
    std::vector<tensor> saved;
    std::vector<float> y, dx;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](const std::vector<tensor>& params) {
    pass out;
    layer_context context;
    const auto y = tensor::zeros({b, t, c});
    math->forward(context, params, x, y, out.saved);
    auto dx = tensor::zeros({b, t, c});
    std::vector<tensor> grads{tensor::zeros({3 * c, c}), tensor::zeros({3 * c}),
                              tensor::zeros({c, c}), tensor::zeros({c})};
    math->backward(context, params, out.saved, dy, &dx, grads, false);
    out.y = y.to_vector();
    out.dx = dx.to_vector();
    for (const auto& g : grads)
      out.grads.push_back(g.to_vector());
    return out;
  };
  const auto fp32 = run({w_in, b_in, w_out, b_out});
  const auto mixed = run({rounded(w_in), b_in, rounded(w_out), b_out});
  REQUIRE(mixed.saved.size() == 4);
  CHECK(mixed.saved[0].type() == dtype::bf16);  // x, kept for dW_in in half the bytes
  CHECK(mixed.saved[3].type() == dtype::bf16);  // o, kept for dW_out likewise
  CHECK(mixed.saved[1].type() == dtype::f32);   // qkv and the scores stay fp32
  CHECK(mixed.saved[2].type() == dtype::f32);
  // Each rounding (x, W_in, o, W_out forward; dy, dqkv backward) moves its operand by at most
  // u_b = 2^-8 relative, element by element; the fp32 scores, softmax and mixing pass such a
  // perturbation on without amplifying it for inputs in [-1, 1) (scores of O(1), where the
  // softmax's Jacobian has norm <= 1/2). y carries four roundings, the gradients up to six:
  // within 8 u_b of fp32's, relative over the whole tensor.
  const double bound = 8 * std::ldexp(1.0, -8);
  CHECK(relative_error(mixed.y, fp32.y) <= bound);
  CHECK(relative_error(mixed.dx, fp32.dx) <= bound);
  CHECK(relative_error(mixed.grads[0], fp32.grads[0]) <= bound);  // dW_in
  CHECK(relative_error(mixed.grads[2], fp32.grads[2]) <= bound);  // dW_out
  CHECK(relative_error(mixed.grads[1], fp32.grads[1]) <= bound);  // db_in, from dqkv
  CHECK(mixed.y != fp32.y);                                       // it did compute in bf16
  CHECK(mixed.grads[3] == fp32.grads[3]);  // db_out: dy's column sums, fp32 alike
  MESSAGE("bf16 attention, relative to fp32: y " << relative_error(mixed.y, fp32.y) << ", dx "
                                                 << relative_error(mixed.dx, fp32.dx));
}
