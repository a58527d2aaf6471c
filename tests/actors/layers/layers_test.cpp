// Built-in layers: backward against finite differences (through the generic check any
// registered layer can use), shapes, and settings errors.
#include <doctest/doctest.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/model/layer.hpp"
#include "runtime/model/layer_check.hpp"

using namespace troupe;

namespace {

layer_config make_layer(const std::string& type,
                        std::map<std::string, setting_value> settings = {}) {
  layer_config c;
  c.type = type;
  c.settings = std::move(settings);
  c.where = {"test.toml", 3, 1};
  c.type_where = {"test.toml", 4, 8};
  return c;
}

setting_value integer(std::int64_t v, int line = 5) { return {v, {"test.toml", line, 7}}; }
setting_value text(const char* v, int line = 6) { return {std::string{v}, {"test.toml", line, 8}}; }
setting_value flag(bool v, int line = 7) { return {v, {"test.toml", line, 8}}; }

}  // namespace

/// Test layers (registered by tests and test plugins) are named "test_..."; every other
/// registered layer is one troupe ships, and must be covered below.
bool is_test_layer(const std::string& name) { return name.rfind("test_", 0) == 0; }

TEST_CASE("every registered layer's backward matches finite differences") {
  struct scenario {
    layer_config config;
    shape_t input;
    std::int64_t batch;
  };
  // The scenarios per layer type; the loop below goes by the registry, so a layer that is
  // registered but has no scenario here fails this test instead of going unchecked.
  const std::map<std::string, std::vector<scenario>> scenarios = {
      {"linear",
       {{make_layer("linear", {{"out", integer(5)}}), {7}, 3},
        {make_layer("linear", {{"out", integer(1)}}), {4}, 1},
        {make_layer("linear", {{"out", integer(6)}, {"bias", flag(false)}}), {3}, 2},
        {make_layer("linear", {{"out", integer(3)}}), {4, 5}, 2}}},
      {"relu", {{make_layer("relu"), {9}, 2}}},
      {"conv2d",
       {{make_layer("conv2d", {{"out", integer(3)}, {"kernel", integer(3)}}), {2, 5, 6}, 2},
        {make_layer("conv2d", {{"out", integer(2)}, {"kernel", integer(3)}, {"stride", integer(2)},
                               {"padding", integer(1)}}),
         {3, 6, 5}, 2},
        {make_layer("conv2d", {{"out", integer(4)}, {"kernel", integer(1)}, {"bias", flag(false)}}),
         {2, 3, 3}, 1}}},
      {"max_pool2d",
       {{make_layer("max_pool2d", {{"kernel", integer(2)}}), {2, 4, 6}, 2},
        {make_layer("max_pool2d", {{"kernel", integer(3)}, {"stride", integer(2)},
                                   {"padding", integer(1)}}),
         {1, 5, 5}, 2}}},
      {"avg_pool2d",
       {{make_layer("avg_pool2d", {{"kernel", integer(2)}}), {2, 4, 6}, 2},
        {make_layer("avg_pool2d", {{"kernel", integer(3)}, {"stride", integer(1)},
                                   {"padding", integer(1)}}),
         {2, 4, 4}, 1}}},
      {"flatten", {{make_layer("flatten"), {2, 3, 4}, 2}, {make_layer("flatten"), {5}, 1}}},
      // Alone, an add reads one input (its sum over ports is the actor's, tested in
      // tests/actors/session/residual_test.cpp).
      {"add", {{make_layer("add"), {3, 4}, 2}}},
      // Token ids in, drawn by the check (the layer's input_ids); dx is not checked.
      {"embedding",
       {{make_layer("embedding", {{"vocab", integer(7)}, {"dim", integer(3)}}), {5}, 3},
        {make_layer("embedding",
                    {{"vocab", integer(4)}, {"dim", integer(2)}, {"positions", flag(false)}}),
         {6}, 2}}},
      {"dropout", {{make_layer("dropout"), {10}, 3}, {make_layer("dropout"), {2, 5}, 2}}},
      {"layer_norm",
       {{make_layer("layer_norm"), {6}, 3}, {make_layer("layer_norm"), {3, 5}, 2}}},
      {"attention",
       {{make_layer("attention", {{"heads", integer(2)}}), {4, 6}, 2},
        {make_layer("attention", {{"heads", integer(1)}, {"bias", flag(false)}}), {3, 4}, 1}}},
      {"unflatten",
       {{make_layer("unflatten", {{"channels", integer(2)}, {"height", integer(3)},
                                  {"width", integer(2)}}),
         {12}, 2},
        {make_layer("unflatten", {{"positions", integer(4)}, {"features", integer(3)}}), {12},
         1}}},
      {"gelu", {{make_layer("gelu"), {9}, 2}}},
      {"tanh", {{make_layer("tanh"), {9}, 1}}},
      {"delay",
       {{make_layer("delay", {{"forward_us", integer(1)}}), {5}, 2},
        {make_layer("delay", {{"forward_us", integer(1)}, {"mode", text("spin")}}), {2, 3}, 1}}},
  };
  std::set<std::string> registered;
  for (const auto& layer : registered_layers()) {
    const auto& name = layer.first;  // not a binding: INFO's lambda captures it (clang 14)
    if (is_test_layer(name))
      continue;
    registered.insert(name);
    CAPTURE(name);
    auto found = scenarios.find(name);
    INFO("layer '" << name << "' is registered but has no gradient-check scenario here");
    REQUIRE(found != scenarios.end());
    // Several seeds: the check compares element by element, so a built-in layer must pass
    // wherever its inputs, parameters and drawn settings fall, not for one lucky draw.
    for (const auto& s : found->second)
      for (std::uint64_t seed = 1; seed <= 5; ++seed) {
        gradient_check_options options;
        options.input_shape = s.input;
        options.batch = s.batch;
        options.seed = seed;
        auto result = check_layer_gradients(s.config, options);
        std::string failures;
        for (const auto& f : result.failures)
          failures += f + "\n";
        INFO("seed " << seed << ": " << result.summary << "\n" << failures);
        CHECK(result.passed);
      }
  }
  // And no scenario is left for a layer that is no longer registered.
  for (const auto& scenario : scenarios) {
    const auto& name = scenario.first;
    CAPTURE(name);
    CHECK(registered.count(name) == 1);
  }
}

TEST_CASE("the gradient check fails a layer whose backward is wrong") {
  // A deliberately broken layer: backward returns twice the true dx.
  struct doubled final : layer {
    std::string type() const override { return "test_doubled"; }
    shape_t output_shape(const shape_t& in) const override { return in; }
    void forward(const layer_context&, const std::vector<tensor>&, const tensor& x, const tensor& y,
                 std::vector<tensor>&) const override {
      for (std::int64_t i = 0; i < x.numel(); ++i)
        y.f32()[i] = 3 * x.f32()[i];
    }
    void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                  const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
      if (dx == nullptr)
        return;
      for (std::int64_t i = 0; i < dy.numel(); ++i)
        dx->f32()[i] = 6 * dy.f32()[i];
    }
  };
  static bool registered = [] {
    register_layer("test_doubled", "a broken layer for tests",
                   [](layer_settings&) { return std::make_unique<doubled>(); });
    return true;
  }();
  CHECK(registered);
  auto result = check_layer_gradients(make_layer("test_doubled"), gradient_check_options{});
  CHECK_FALSE(result.passed);
  REQUIRE(result.failures.size() == 1);
  CHECK(result.failures[0].find("dx[") == 0);
}

TEST_CASE("linear maps (..., features) to (..., out) and declares weight and bias") {
  auto l = create_layer(make_layer("linear", {{"out", integer(4)}}));
  CHECK(l->output_shape({3}) == shape_t{4});
  auto params = l->parameters({3});
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "weight");
  CHECK(params[0].shape == shape_t{4, 3});
  CHECK(params[1].shape == shape_t{4});
  CHECK(l->cost({3}) == doctest::Approx(6.0 * 3 * 4));
  // Over the last dimension, as torch.nn.Linear: a sequence of 5 positions keeps its 5.
  CHECK(l->output_shape({5, 3}) == shape_t{5, 4});
  CHECK(l->parameters({5, 3})[0].shape == shape_t{4, 3});
  CHECK(l->cost({5, 3}) == doctest::Approx(6.0 * 15 * 4));
}

TEST_CASE("layer settings errors name the position, the setting and the nearest name") {
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linear")),
                       "test.toml:3:1: layer 'linear' needs the integer setting 'out'",
                       config_error);
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("linear", {{"out", integer(4)}, {"outs", integer(3, 9)}})),
      doctest::Contains("test.toml:9:7: unknown setting 'outs' for layer 'linear'; did you mean "
                        "'out'?"),
      config_error);
  // Without the setting it needs, a near miss of its name is the typo it is, at its line.
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linear", {{"outs", integer(3, 9)}})),
                       "test.toml:9:7: unknown setting 'outs' for layer 'linear'; did you mean "
                       "'out'? (it needs 'out')",
                       config_error);
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linear", {{"out", text("wide")}})),
                       "test.toml:6:8: layer 'linear' setting 'out': expected an integer, found a "
                       "string",
                       config_error);
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linear", {{"out", integer(0)}})),
                       doctest::Contains("test.toml:5:7: layer 'linear' setting 'out' = 0 is out "
                                         "of range"),
                       config_error);
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linear", {{"out", integer(4)}, {"init", text("kaimin")}})),
                       doctest::Contains("unknown value 'kaimin'; did you mean 'kaiming'?"),
                       config_error);
  CHECK_THROWS_WITH_AS(create_layer(make_layer("relu", {{"out", integer(4)}})),
                       doctest::Contains("unknown setting 'out' for layer 'relu' (this layer "
                                         "takes no settings)"),
                       config_error);
}

TEST_CASE("an unknown layer type names the nearest type and lists the registered ones") {
  CHECK_THROWS_WITH_AS(create_layer(make_layer("linaer")),
                       doctest::Contains("test.toml:4:8: unknown layer type 'linaer'; did you "
                                         "mean 'linear'? (registered: "),
                       config_error);
  try {
    create_layer(make_layer("linaer"));
  } catch (const config_error& e) {
    std::string message = e.what();
    for (const auto& layer : registered_layers()) {
      const auto& name = layer.first;
      CAPTURE(name);
      CHECK(message.find(name) != std::string::npos);
    }
  }
}

TEST_CASE("parameter init is keyed by seed, layer and parameter, and has the right scale") {
  param_spec spec{"weight", {256, 784}, init_kind::kaiming_uniform, 784, 256};
  std::vector<float> a(256 * 784), b(256 * 784), c(256 * 784);
  initialise_parameter(spec, 42, 0, 0, a.data());
  initialise_parameter(spec, 42, 0, 0, b.data());
  initialise_parameter(spec, 42, 2, 0, c.data());
  CHECK(a == b);
  CHECK(a != c);
  // Kaiming uniform: U(-sqrt(6/784), sqrt(6/784)); variance bound^2 / 3 = 2 / 784.
  double sum = 0, square = 0, bound = std::sqrt(6.0 / 784);
  for (float v : a) {
    CHECK(std::abs(v) <= bound);
    sum += v;
    square += static_cast<double>(v) * v;
  }
  double n = static_cast<double>(a.size());
  double variance = square / n - (sum / n) * (sum / n);
  // 200k samples: the sample variance is within 1% of 2/784 with overwhelming probability.
  CHECK(variance == doctest::Approx(2.0 / 784).epsilon(0.01));
  param_spec zeros{"bias", {10}, init_kind::zeros, 1, 1};
  std::vector<float> z(10, 5.0f);
  initialise_parameter(zeros, 42, 0, 1, z.data());
  CHECK(z == std::vector<float>(10, 0.0f));
}

namespace {

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

TEST_CASE("delay takes its set time, as identity, sleeping or spinning as told") {
  for (const char* mode : {"sleep", "spin"}) {
    CAPTURE(mode);
    auto l =
        create_layer(make_layer("delay", {{"forward_us", integer(30000)}, {"mode", text(mode)}}));
    CHECK(l->output_shape({2, 3}) == shape_t{2, 3});
    REQUIRE(l->parameters({2, 3}).size() == 1);
    CHECK(l->cost({2, 3}) == 90000);  // forward 30 ms + backward 2 x 30 ms
    l->bind(device_type::cpu);
    auto x = tensor::empty({2, 3});
    auto y = tensor::empty({2, 3});
    auto dx = tensor::empty({2, 3});
    auto grad = tensor::empty({1});
    for (std::int64_t i = 0; i < 6; ++i)
      x.f32()[i] = static_cast<float>(i) - 2.5f;
    grad.f32()[0] = 7;
    std::vector<tensor> saved, grads{grad};
    layer_context context;
    auto cpu = thread_cpu_seconds();
    auto started = std::chrono::steady_clock::now();
    l->forward(context, {}, x, y, saved);
    auto forward =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    l->backward(context, {}, saved, y, &dx, grads, false);
    auto both = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    cpu = thread_cpu_seconds() - cpu;
    CHECK(forward >= 0.030);
    CHECK(both >= 0.090);
    CHECK(both < 2.0);  // only a very loaded machine would take this long
    for (std::int64_t i = 0; i < 6; ++i) {
      CHECK(y.f32()[i] == x.f32()[i]);
      CHECK(dx.f32()[i] == x.f32()[i]);
    }
    CHECK(grad.f32()[0] == 0);
    // Sleeping leaves the core to others; spinning holds it for the whole time.
    if (std::string{mode} == "sleep")
      CHECK(cpu < 0.5 * both);
    else
      CHECK(cpu > 0.5 * both);
  }
  CHECK_THROWS_WITH_AS(create_layer(make_layer("delay")),
                       "test.toml:3:1: layer 'delay' needs the integer setting 'forward_us'",
                       config_error);
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("delay", {{"forward_us", integer(5)}, {"mode", text("nap")}})),
      doctest::Contains("test.toml:6:8: layer 'delay' setting 'mode'"), config_error);
  CHECK_THROWS_WITH_AS(create_layer(make_layer("delay", {{"forward_us", integer(0)}})),
                       doctest::Contains("'forward_us' = 0 is out of range"), config_error);
  // Oversized: at most 10 s a job, either way.
  CHECK_THROWS_WITH_AS(create_layer(make_layer("delay", {{"forward_us", integer(10'000'001)}})),
                       doctest::Contains("'forward_us' = 10000001 is out of range"), config_error);
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("delay", {{"forward_us", integer(1)}, {"backward_us", integer(-1, 8)}})),
      doctest::Contains("test.toml:8:7: layer 'delay' setting 'backward_us' = -1 is out of range"),
      config_error);
}

TEST_CASE("the gradient check fails a layer whose split backward disagrees with its backward") {
  // y = 2 w x: backward is right, backward_weight forgets the factor 2.
  struct scaled final : layer {
    std::string type() const override { return "test_bad_split"; }
    shape_t output_shape(const shape_t& in) const override { return in; }
    std::vector<param_spec> parameters(const shape_t&) const override {
      return {{"w", {1}, init_kind::ones, 1, 1}};
    }
    void forward(const layer_context&, const std::vector<tensor>& p, const tensor& x,
                 const tensor& y, std::vector<tensor>& saved) const override {
      for (std::int64_t i = 0; i < x.numel(); ++i)
        y.f32()[i] = 2 * p[0].f32()[0] * x.f32()[i];
      saved = {x};
    }
    void backward(const layer_context& c, const std::vector<tensor>& p,
                  const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                  std::vector<tensor>& grads, bool accumulate) const override {
      if (dx != nullptr)
        backward_input(c, p, saved, dy, *dx);
      float g = 0;
      for (std::int64_t i = 0; i < dy.numel(); ++i)
        g += 2 * dy.f32()[i] * saved[0].f32()[i];
      grads[0].f32()[0] = (accumulate ? grads[0].f32()[0] : 0) + g;
    }
    bool splits_backward() const override { return true; }
    void backward_input(const layer_context&, const std::vector<tensor>& p,
                        const std::vector<tensor>&, const tensor& dy,
                        const tensor& dx) const override {
      for (std::int64_t i = 0; i < dy.numel(); ++i)
        dx.f32()[i] = 2 * p[0].f32()[0] * dy.f32()[i];
    }
    void backward_weight(const layer_context&, const std::vector<tensor>&,
                         const std::vector<tensor>& saved, const tensor& dy,
                         std::vector<tensor>& grads, bool accumulate) const override {
      float g = 0;
      for (std::int64_t i = 0; i < dy.numel(); ++i)
        g += dy.f32()[i] * saved[0].f32()[i];  // the bug: no factor 2
      grads[0].f32()[0] = (accumulate ? grads[0].f32()[0] : 0) + g;
    }
  };
  static bool registered = [] {
    register_layer("test_bad_split", "a layer whose split backward is wrong, for tests",
                   [](layer_settings&) { return std::make_unique<scaled>(); });
    return true;
  }();
  CHECK(registered);
  auto result = check_layer_gradients(make_layer("test_bad_split"), gradient_check_options{});
  CHECK_FALSE(result.passed);
  REQUIRE_FALSE(result.failures.empty());
  CHECK(result.failures[0].find("dw[0]: backward_weight gives") == 0);
  CHECK(result.summary.find("split backward") != std::string::npos);
}

TEST_CASE("a layer without a split backward refuses to be called split") {
  auto relu = create_layer(make_layer("relu"));
  CHECK_FALSE(relu->splits_backward());
  std::vector<tensor> none;
  auto t = tensor::empty({1, 2});
  CHECK_THROWS_WITH_AS(relu->backward_input({}, none, none, t, t),
                       "layer 'relu' does not split its backward", std::logic_error);
  CHECK_THROWS_WITH_AS(relu->backward_weight({}, none, none, t, none, false),
                       "layer 'relu' does not split its backward", std::logic_error);
  CHECK(create_layer(make_layer("linear", {{"out", integer(3)}}))->splits_backward());
}

TEST_CASE("a float setting out of range is quoted as the config would write it") {
  // std::to_string printed eps = 1e-20 as "0.000000 is out of range [0.000000, 1.000000]".
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("layer_norm", {{"eps", setting_value{1e-20, {"test.toml", 8, 7}}}})),
      doctest::Contains("test.toml:8:7: layer 'layer_norm' setting 'eps' = 1e-20 is out of range "
                        "[1e-12, 1]"),
      config_error);
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("dropout", {{"p", setting_value{0.9995, {"test.toml", 8, 7}}}})),
      doctest::Contains("setting 'p' = 0.9995 is out of range [0, 0.999]"), config_error);
}

TEST_CASE("delay split takes backward_us - weight_us for dx and weight_us for the weights") {
  auto l = create_layer(make_layer("delay", {{"forward_us", integer(1)},
                                             {"backward_us", integer(40000)},
                                             {"weight_us", integer(30000, 9)}}));
  REQUIRE(l->splits_backward());
  auto dy = tensor::empty({2, 3});
  auto dx = tensor::empty({2, 3});
  auto grad = tensor::empty({1});
  for (std::int64_t i = 0; i < 6; ++i)
    dy.f32()[i] = static_cast<float>(i);
  grad.f32()[0] = 7;
  std::vector<tensor> none, grads{grad};
  auto seconds = [](auto since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  auto started = std::chrono::steady_clock::now();
  l->backward_input({}, none, none, dy, dx);
  auto input = seconds(started);
  started = std::chrono::steady_clock::now();
  l->backward_weight({}, none, none, dy, grads, false);
  auto weight = seconds(started);
  CHECK(input >= 0.010);
  CHECK(weight >= 0.030);
  CHECK(input + weight < 2.0);
  for (std::int64_t i = 0; i < 6; ++i)
    CHECK(dx.f32()[i] == dy.f32()[i]);
  CHECK(grad.f32()[0] == 0);
  // The default is half; more than backward_us is refused at its position.
  CHECK_THROWS_WITH_AS(
      create_layer(make_layer("delay", {{"forward_us", integer(1)},
                                        {"backward_us", integer(100)},
                                        {"weight_us", integer(101, 9)}})),
      doctest::Contains("test.toml:9:7: layer 'delay' setting 'weight_us' = 101 is out of range "
                        "[0, 100]"),
      config_error);
}
