// fused_layer_test.cpp: layers fused into one (runtime/model/fused_layer.hpp) compute what
// the same layers compute one after the other, bit for bit: the same kernels on the same
// inputs in the same order, each member with its own layer index (dropout's key).
#include "runtime/model/fused_layer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/model/layer.hpp"
#include "tests/actors/layer_test_support.hpp"

using namespace troupe;

namespace {

layer_config config_of(const std::string& type, std::map<std::string, std::int64_t> values = {}) {
  return test::layer_table("f.toml", type, values);
}

layer_config dropout() {
  auto c = config_of("dropout");
  c.settings["p"] = setting_value{0.3, {"f.toml", 5, 9}};
  return c;
}

// 12 -> linear 8 -> dropout -> tanh -> linear 5, as layers 3..6 of a model.
std::vector<layer_config> configs() {
  return {config_of("linear", {{"out", 8}}), dropout(), config_of("tanh"),
          config_of("linear", {{"out", 5}})};
}

// y = 2 x; it assigns its saved vector (as the layer API allows) and throws in backward
// when told to.
class assigning_layer final : public layer {
 public:
  explicit assigning_layer(bool throws) : throws_(throws) {}
  std::string type() const override { return "assigning"; }
  shape_t output_shape(const shape_t& input) const override { return input; }
  void forward(const layer_context&, const std::vector<tensor>&, const tensor& x, const tensor& y,
               std::vector<tensor>& saved) const override {
    for (std::int64_t i = 0; i < x.numel(); ++i)
      y.f32()[i] = 2 * x.f32()[i];
    saved = {x};
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>& saved,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    if (throws_)
      throw std::runtime_error("assigning layer fails on purpose");
    REQUIRE(saved.size() == 1);
    if (dx != nullptr)
      for (std::int64_t i = 0; i < dy.numel(); ++i)
        dx->f32()[i] = 2 * dy.f32()[i];
  }

 private:
  bool throws_;
};

bool same_bits(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.f32(), b.f32(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a fused layer computes its members' forward and backward bit for bit") {
  const std::int64_t rows = 6;
  std::vector<fused_layer::member> members;
  std::vector<std::unique_ptr<troupe::layer>> alone;
  std::vector<shape_t> inputs{{12}};
  std::int32_t index = 3;
  for (const auto& c : configs()) {
    alone.push_back(create_layer(c));
    alone.back()->bind(device_type::cpu);
    members.push_back(fused_layer::member{create_layer(c), index, "layer_" + std::to_string(index),
                                          inputs.back()});
    ++index;
    inputs.push_back(alone.back()->output_shape(inputs.back()));
  }
  fused_layer fused{std::move(members)};
  fused.bind(device_type::cpu);
  CHECK(fused.output_shape({12}) == shape_t{5});
  const auto specs = fused.parameters({12});
  REQUIRE(specs.size() == 4);  // the two linears' weight and bias, in order
  CHECK(specs[0].shape == shape_t{8, 12});
  CHECK(specs[2].shape == shape_t{5, 8});
  CHECK(fused.cost({12}) > 0);

  std::vector<tensor> params;
  std::uint32_t seed = 10;
  for (const auto& s : specs)
    params.push_back(test::random_tensor(s.shape, seed++));
  const auto x = test::random_tensor({rows, 12}, 1);
  const auto dy = test::random_tensor({rows, 5}, 2);
  layer_context context;
  context.step = 4;
  context.first_sample = 32;
  context.layer = 99;  // each member must use its own index, not the fused layer's

  // One after the other, as unfused actors run them.
  std::vector<std::vector<tensor>> saved_alone(alone.size());
  std::vector<tensor> outs{x};
  const std::vector<std::pair<std::size_t, std::size_t>> param_range{{0, 2}, {2, 2}, {2, 2}, {2, 4}};
  for (std::size_t i = 0; i < alone.size(); ++i) {
    auto own_context = context;
    own_context.layer = static_cast<std::int32_t>(3 + i);
    std::vector<tensor> own(params.begin() + static_cast<std::ptrdiff_t>(param_range[i].first),
                            params.begin() + static_cast<std::ptrdiff_t>(param_range[i].second));
    shape_t shape{rows};
    shape.insert(shape.end(), inputs[i + 1].begin(), inputs[i + 1].end());
    outs.push_back(tensor::empty(shape));
    alone[i]->forward(own_context, own, outs[i], outs[i + 1], saved_alone[i]);
  }
  std::vector<tensor> grads_alone;
  for (const auto& s : specs)
    grads_alone.push_back(tensor::zeros(s.shape));
  tensor upstream = dy;
  tensor dx_alone;
  for (std::size_t i = alone.size(); i-- > 0;) {
    auto own_context = context;
    own_context.layer = static_cast<std::int32_t>(3 + i);
    std::vector<tensor> own(params.begin() + static_cast<std::ptrdiff_t>(param_range[i].first),
                            params.begin() + static_cast<std::ptrdiff_t>(param_range[i].second));
    std::vector<tensor> own_grads(
        grads_alone.begin() + static_cast<std::ptrdiff_t>(param_range[i].first),
        grads_alone.begin() + static_cast<std::ptrdiff_t>(param_range[i].second));
    auto below = tensor::empty(outs[i].shape());
    alone[i]->backward(own_context, own, saved_alone[i], upstream, &below, own_grads, false);
    upstream = below;
  }
  dx_alone = upstream;

  // Fused.
  auto y = tensor::empty({rows, 5});
  std::vector<tensor> saved;
  fused.forward(context, params, x, y, saved);
  CHECK(same_bits(y, outs.back()));
  std::vector<tensor> grads;
  for (const auto& s : specs)
    grads.push_back(tensor::zeros(s.shape));
  auto dx = tensor::empty({rows, 12});
  fused.backward(context, params, saved, dy, &dx, grads, false);
  CHECK(same_bits(dx, dx_alone));
  for (std::size_t i = 0; i < grads.size(); ++i) {
    INFO("gradient " << i);
    CHECK(same_bits(grads[i], grads_alone[i]));
  }
  // Without dx (a first layer), and accumulating: the weight gradients double.
  fused.backward(context, params, saved, dy, nullptr, grads, true);
  for (std::size_t i = 0; i < grads.size(); ++i)
    for (std::int64_t k = 0; k < grads[i].numel(); ++k)
      CHECK(grads[i].f32()[k] == doctest::Approx(2 * grads_alone[i].f32()[k]).epsilon(1e-6));
}

TEST_CASE("a fused layer refuses a backward without its forward's saved tensors") {
  std::vector<fused_layer::member> members;
  members.push_back(fused_layer::member{create_layer(config_of("relu")), 0, "a", {4}});
  members.push_back(fused_layer::member{create_layer(config_of("tanh")), 1, "b", {4}});
  fused_layer fused{std::move(members)};
  fused.bind(device_type::cpu);
  std::vector<tensor> grads;
  auto dy = test::random_tensor({2, 4}, 3);
  CHECK_THROWS_AS(fused.backward(layer_context{}, {}, {}, dy, nullptr, grads, false),
                  check_failure);
  std::vector<fused_layer::member> one;
  one.push_back(fused_layer::member{create_layer(config_of("relu")), 0, "a", {4}});
  CHECK_THROWS_AS(fused_layer{std::move(one)}, check_failure);
}

TEST_CASE("members that assign their saved tensors keep them apart, and a member's failure names it") {
  std::vector<fused_layer::member> members;
  members.push_back(fused_layer::member{std::make_unique<assigning_layer>(false), 0, "a", {3}});
  members.push_back(fused_layer::member{create_layer(config_of("tanh")), 1, "b", {3}});
  members.push_back(fused_layer::member{std::make_unique<assigning_layer>(true), 2, "c", {3}});
  fused_layer fused{std::move(members)};
  fused.bind(device_type::cpu);
  const auto x = test::random_tensor({2, 3}, 5);
  auto y = tensor::empty({2, 3});
  std::vector<tensor> saved;
  fused.forward(layer_context{}, {}, x, y, saved);
  for (std::int64_t i = 0; i < 6; ++i)
    CHECK(y.f32()[i] == doctest::Approx(2 * std::tanh(2 * x.f32()[i])).epsilon(1e-6));
  std::vector<tensor> grads;
  const auto dy = test::random_tensor({2, 3}, 6);
  try {
    fused.backward(layer_context{}, {}, saved, dy, nullptr, grads, false);
    FAIL("the last member's backward should have thrown");
  } catch (const fused_layer::member_error& e) {
    CHECK(e.member == 2);
    CHECK(std::string{e.what()} == "assigning layer fails on purpose");
  }
}

TEST_CASE("a long chain of members, each saving tensors, forwards and backwards") {
  // The saved tensors' marker holds one count a member: 80 counts of 1 or more multiply
  // past 64 bits, which the marker's element count must never do.
  constexpr int chain = 80;
  std::vector<fused_layer::member> members;
  for (int i = 0; i < chain; ++i)
    members.push_back(fused_layer::member{std::make_unique<assigning_layer>(false), i,
                                          "m" + std::to_string(i), {2}});
  fused_layer fused{std::move(members)};
  fused.bind(device_type::cpu);
  const auto x = tensor::from({1.0f, -0.5f}, {1, 2});
  auto y = tensor::empty({1, 2});
  std::vector<tensor> saved;
  fused.forward(layer_context{}, {}, x, y, saved);
  CHECK(saved.size() == chain + 1);
  CHECK(y.f32()[0] == std::ldexp(1.0f, chain));
  std::vector<tensor> grads;
  auto dx = tensor::empty({1, 2});
  fused.backward(layer_context{}, {}, saved, tensor::from({1.0f, 1.0f}, {1, 2}), &dx, grads, false);
  CHECK(dx.f32()[1] == std::ldexp(1.0f, chain));
}
