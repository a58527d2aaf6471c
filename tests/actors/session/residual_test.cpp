// residual_test.cpp: the math of a skip connection, against a model known in closed form.
//
// A residual block a -> b = B a + c, out = a + b is the linear map (I + B) a + c, so the
// residual model [linear A, linear B, add(A, B), relu, linear D] computes what the chain
// [linear A, linear C, relu, linear D] computes when C = I + B. Plain SGD keeps it so:
// the gradient of B is the gradient of C, so C - lr g = I + (B - lr g), step after step.
// Started from such weights (init_from), both models must end with A equal, C = I + B,
// D equal. A's gradient in the residual model is the sum over its two readers (the add
// and B), B's input is A's output, the add passes its gradient to both: a lost or
// doubled path, a gradient not summed, or an add that does not add breaks the identity
// by far more than float rounding. The equivalence tests then carry the residual model
// to every wiring (tests/actors/session/equivalence_test.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t residual_features = 12, hidden = 8, residual_classes = 5;

std::vector<float> pseudo_random(std::size_t n, std::uint32_t seed, float scale) {
  std::vector<float> out(n);
  std::uint32_t state = seed * 2654435761u + 1;
  for (auto& v : out) {
    state = state * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> train_residual(const std::string& layers,
                                                            const std::string& weights,
                                                            const std::string& parallel) {
  auto config =
      parse_config("[run]\nsteps = 8\nseed = 3\nevaluate = false\n" +
                       test::data_section({16, 128, 16, residual_features, residual_classes}) +
                       "\n[model]\ninit_from = \"" + weights + "\"\n" + layers +
                       "\n[optimizer]\ntype = \"sgd\"\nlr = 0.1\n" + parallel,
                   "residual.toml");
  auto options = test::quiet_options();
  options.keep_parameters = true;
  auto result = test::run_ok(config, options);
  REQUIRE(result.outcome.steps == 8);
  return result.parameters;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

}  // namespace

TEST_CASE("a residual block trains as the chain with I + B in its place") {
  const test::temp_directory dir{"troupe-residual"};
  auto a_w = pseudo_random(hidden * residual_features, 1, 0.6f),
       a_b = pseudo_random(hidden, 2, 0.2f);
  auto b_w = pseudo_random(hidden * hidden, 3, 0.5f), b_b = pseudo_random(hidden, 4, 0.2f);
  auto d_w = pseudo_random(residual_classes * hidden, 5, 0.6f),
       d_b = pseudo_random(residual_classes, 6, 0.2f);
  auto c_w = b_w;
  for (std::int64_t i = 0; i < hidden; ++i)
    c_w[static_cast<std::size_t>(i * hidden + i)] += 1.0f;
  const auto f32 = safetensors_dtype::f32;
  write_safetensors(dir / "residual.safetensors",
                    {{"0.weight", f32, {hidden, residual_features}, a_w.data()},
                     {"0.bias", f32, {hidden}, a_b.data()},
                     {"1.weight", f32, {hidden, hidden}, b_w.data()},
                     {"1.bias", f32, {hidden}, b_b.data()},
                     {"4.weight", f32, {residual_classes, hidden}, d_w.data()},
                     {"4.bias", f32, {residual_classes}, d_b.data()}},
                    {{"format", "pt"}});
  write_safetensors(dir / "chain.safetensors",
                    {{"0.weight", f32, {hidden, residual_features}, a_w.data()},
                     {"0.bias", f32, {hidden}, a_b.data()},
                     {"1.weight", f32, {hidden, hidden}, c_w.data()},
                     {"1.bias", f32, {hidden}, b_b.data()},
                     {"3.weight", f32, {residual_classes, hidden}, d_w.data()},
                     {"3.bias", f32, {residual_classes}, d_b.data()}},
                    {{"format", "pt"}});
  const auto chain_layers = test::linear(hidden) + test::linear(hidden) + test::layer("relu") +
                            test::linear(residual_classes);
  const auto residual_layers =
      test::layer("linear", "name = \"a\"\nout = " + std::to_string(hidden) + "\n") +
      test::layer("linear", "name = \"b\"\nout = " + std::to_string(hidden) + "\n") +
      test::layer("add", "inputs = [\"a\", \"b\"]\n") + test::layer("relu") +
      test::linear(residual_classes);
  const auto chain = train_residual(chain_layers, dir / "chain.safetensors", "");

  // One device, and a pipeline whose cut lies on the skip wire (a to the add).
  for (const auto& parallel :
       {std::string{}, std::string{"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                   "stages = [[0, 1], [2, 4]]\nmicrobatches = 2\n"}}) {
    CAPTURE(parallel);
    const auto residual = train_residual(residual_layers, dir / "residual.safetensors", parallel);
    REQUIRE(residual.size() == 5);
    CHECK(residual[2].empty());  // add
    auto b_plus_i = residual[1][0];
    for (std::int64_t i = 0; i < hidden; ++i)
      b_plus_i[static_cast<std::size_t>(i * hidden + i)] += 1.0f;
    // The weights moved by ~0.1 over 8 steps; float rounding of the two forms differs by
    // ~1e-7 a step.
    CHECK(largest_difference(residual[0][0], chain[0][0]) < 1e-5);
    CHECK(largest_difference(residual[0][1], chain[0][1]) < 1e-5);
    CHECK(largest_difference(b_plus_i, chain[1][0]) < 1e-5);
    CHECK(largest_difference(residual[1][1], chain[1][1]) < 1e-5);
    CHECK(largest_difference(residual[4][0], chain[3][0]) < 1e-5);
    CHECK(largest_difference(residual[4][1], chain[3][1]) < 1e-5);
    // And they did move: the identity is not the start held still.
    CHECK(largest_difference(residual[0][0], a_w) > 1e-3);
    CHECK(largest_difference(residual[1][0], b_w) > 1e-3);
  }
}
