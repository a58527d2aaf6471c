// The layer actor, driven with real messages from a scoped actor that plays its previous
// and next neighbours, its optimizer (params), its grads sink and the trainer: version
// gating, the stash, one job at a time, gradient accumulation over micro-batches, and the
// credits of both of its activations wires.
//
// The numbers are exact: inputs, parameters and gradients are small integers, so every
// product and every partial sum of the linear layer's GEMMs is an integer far below 2^24
// and float computes it exactly in any summation order. The checks therefore compare for
// equality with a double-precision reference, and a wrong parameter version or a wrong
// stashed input (which change the result by whole units) cannot hide in a tolerance.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/training/layer_actor.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/model/layer.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr std::int64_t in_features = 4;
constexpr std::int64_t out_features = 3;

/// A row-major matrix of doubles, the reference's type.
using matrix = std::vector<double>;

/// Integer values in [-range, range], different for each seed.
std::vector<float> small_integers(std::size_t count, int seed, int range = 3) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i)
    out[i] =
        static_cast<float>((static_cast<int>(i) * 7 + seed * 13 + 5) % (2 * range + 1) - range);
  return out;
}

matrix to_double(const std::vector<float>& v) { return matrix(v.begin(), v.end()); }

/// c (n, m) = a (n, k) * b (k, m), with optional transposes of the stored a and b.
matrix multiply(const matrix& a, bool ta, const matrix& b, bool tb, std::int64_t n, std::int64_t k,
                std::int64_t m) {
  matrix c(static_cast<std::size_t>(n * m), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t l = 0; l < k; ++l) {
        double x =
            ta ? a[static_cast<std::size_t>(l * n + i)] : a[static_cast<std::size_t>(i * k + l)];
        double y =
            tb ? b[static_cast<std::size_t>(j * k + l)] : b[static_cast<std::size_t>(l * m + j)];
        c[static_cast<std::size_t>(i * m + j)] += x * y;
      }
  return c;
}

/// One parameter version of the linear layer: W (out, in) and b (out), small integers.
struct linear_params {
  std::vector<float> weight, bias;
  std::vector<tensor> tensors() const {
    return {tensor::from(weight, {out_features, in_features}, {device_type::cpu, 0}),
            tensor::from(bias, {out_features}, {device_type::cpu, 0})};
  }
};

linear_params version_params(int version) {
  return {small_integers(out_features * in_features, 10 + version),
          small_integers(out_features, 20 + version, 2)};
}

/// y (b, out) = x W^T + b.
matrix linear_forward(const std::vector<float>& x, const linear_params& p, std::int64_t rows) {
  auto y =
      multiply(to_double(x), false, to_double(p.weight), true, rows, in_features, out_features);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < out_features; ++j)
      y[static_cast<std::size_t>(i * out_features + j)] += p.bias[static_cast<std::size_t>(j)];
  return y;
}

/// dx (b, in) = dy W.
matrix linear_dx(const std::vector<float>& dy, const linear_params& p, std::int64_t rows) {
  return multiply(to_double(dy), false, to_double(p.weight), false, rows, out_features,
                  in_features);
}

/// dW (out, in) = dy^T x; db (out) = sum over rows of dy.
struct linear_grads {
  matrix weight = matrix(out_features * in_features, 0.0);
  matrix bias = matrix(out_features, 0.0);
  void add(const std::vector<float>& x, const std::vector<float>& dy, std::int64_t rows) {
    auto w = multiply(to_double(dy), true, to_double(x), false, out_features, rows, in_features);
    for (std::size_t i = 0; i < w.size(); ++i)
      weight[i] += w[i];
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < out_features; ++j)
        bias[static_cast<std::size_t>(j)] += dy[static_cast<std::size_t>(r * out_features + j)];
  }
};

layer_config linear_config() {
  layer_config c;
  c.type = "linear";
  c.settings["out"] = setting_value{std::int64_t{out_features}, {"layer_actor_test.toml", 2, 7}};
  c.where = {"layer_actor_test.toml", 1, 1};
  c.type_where = {"layer_actor_test.toml", 1, 8};
  return c;
}

activation_msg forward_of(const micro_tag& tag, const std::vector<float>& x, std::int64_t cols) {
  activation_msg m;
  m.tag = tag;
  m.x = tensor::from(x, {static_cast<std::int64_t>(x.size()) / cols, cols}, {device_type::cpu, 0});
  return m;
}

gradient_msg backward_of(const micro_tag& tag, const std::vector<float>& dy, std::int64_t cols) {
  gradient_msg m;
  m.tag = tag;
  m.dx =
      tensor::from(dy, {static_cast<std::int64_t>(dy.size()) / cols, cols}, {device_type::cpu, 0});
  return m;
}

params_msg params_of(std::int64_t version, const linear_params& p) {
  params_msg m;
  m.version = version;
  m.layer = 2;
  m.params = p.tensors();
  return m;
}

void check_equal(const tensor& got, const matrix& want, const char* what) {
  auto v = values(got);
  REQUIRE(v.size() == want.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    INFO(what << "[" << i << "]");
    CHECK(static_cast<double>(v[i]) == want[i]);
  }
}

// ---- a layer whose jobs can be held and whose calls are logged ----

/// Shared with the probe layer: a gate its forward waits at, and the order of its calls.
struct probe_log {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = true;
  std::vector<std::string> calls;

  void set_open(bool value) {
    {
      std::lock_guard<std::mutex> guard{mutex};
      open = value;
    }
    changed.notify_all();
  }
  std::vector<std::string> snapshot() {
    std::lock_guard<std::mutex> guard{mutex};
    return calls;
  }
};

/// The type of layer::forward's output parameter: `tensor&` today, `const tensor&` once the
/// output may no longer be re-assigned (issue 9). Taking it from the base keeps this test
/// layer an override of whichever it is.
template <class Method>
struct output_parameter;
template <class Result, class Class, class A, class B, class C, class Output, class E>
struct output_parameter<Result (Class::*)(A, B, C, Output, E) const> {
  using type = Output;
};
using forward_output = output_parameter<decltype(&layer::forward)>::type;

/// The identity, without parameters; forward waits while the gate is closed (at most
/// `patience`, so a failing test cannot hang its stream) and each call logs the first
/// value it reads ("forward 1", "backward 10").
class probe_layer final : public layer {
 public:
  explicit probe_layer(std::shared_ptr<probe_log> log) : log_(std::move(log)) {}
  std::string type() const override { return "test_probe"; }
  shape_t output_shape(const shape_t& input) const override { return input; }

  void forward(const layer_context&, const std::vector<tensor>&, const tensor& x, forward_output y,
               std::vector<tensor>&) const override {
    std::unique_lock<std::mutex> lock{log_->mutex};
    log_->changed.wait_for(lock, patience, [&] { return log_->open; });
    log_->calls.push_back("forward " + std::to_string(static_cast<int>(x.f32()[0])));
    std::copy(x.f32(), x.f32() + x.numel(), y.f32());
  }

  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    std::lock_guard<std::mutex> guard{log_->mutex};
    log_->calls.push_back("backward " + std::to_string(static_cast<int>(dy.f32()[0])));
    if (dx != nullptr)
      std::copy(dy.f32(), dy.f32() + dy.numel(), dx->f32());
  }

 private:
  std::shared_ptr<probe_log> log_;
};

/// Layer actors on cpu:0 whose every neighbour is the scoped actor.
struct layer_fixture : actor_fixture {
  /// The parameters the next spawned actor computes with in bf16 (empty: none).
  std::vector<bool> bf16_params;

  /// Spawns the actor for `math` with M micro-batches; `previous_kind` is the kind of the
  /// sender of its activations ("layer" wants dx back, "data_loader" only the credit);
  /// `capacity` is the credit limit of its outgoing activations wire. Placed on cpu:0's
  /// stream like in a run, unless `placed` is false (then its handlers run on the host
  /// thread, which they must when a test holds that stream).
  caf::actor spawn(std::unique_ptr<troupe::layer> math, std::int32_t microbatches,
                   std::string previous_kind = "layer", std::int64_t capacity = 0,
                   bool placed = true) {
    auto s = std::make_shared<layer_actor_settings>();
    s->name = "layer_2";
    s->layer_index = 2;
    s->replica = 0;
    s->microbatches = microbatches;
    s->input_shape = {in_features};
    s->on = &cpu(0);
    s->bf16_params = bf16_params;
    const bool has_params = !math->parameters({in_features}).empty();
    s->math = std::move(math);
    auto actor = system.spawn<layer_actor>(std::move(s));
    if (placed)
      place(actor, cpu(0));
    std::vector<wire_end> out{wire("activations", me(), "layer", capacity)};
    if (has_params)
      out.push_back(wire("grads", me(), "optimizer"));
    self->send(actor, wiring(std::move(out), {wire("activations", me(), previous_kind)}));
    return actor;
  }

  caf::actor spawn_linear(std::int32_t microbatches) {
    return spawn(create_layer(linear_config()), microbatches);
  }
};

}  // namespace

TEST_CASE_FIXTURE(layer_fixture,
                  "a forward of step k waits for parameter version k, and waiting forwards run "
                  "in arrival order once it comes") {
  auto actor = spawn_linear(2);
  const auto x0 = small_integers(2 * in_features, 1);
  const auto x1 = small_integers(2 * in_features, 2);
  const auto x2 = small_integers(1 * in_features, 3);
  self->send(actor, forward_of(tag_of(0, 0, 0), x0, in_features));
  self->send(actor, forward_of(tag_of(1, 0, 1), x1, in_features));
  self->send(actor, forward_of(tag_of(1, 1, 1), x2, in_features));
  expect_quiet("no forward may run before its parameter version arrived");

  const auto v0 = version_params(0), v1 = version_params(1);
  self->send(actor, params_of(0, v0));
  auto y0 = next<activation_msg>("the forward of step 0");
  CHECK(y0.tag.step == 0);
  check_equal(y0.x, linear_forward(x0, v0, 2), "y of step 0 with version 0");
  expect_quiet("step 1's forwards need version 1");

  self->send(actor, params_of(1, v1));
  auto first = next<activation_msg>("the first forward of step 1");
  auto second = next<activation_msg>("the second forward of step 1");
  CHECK(first.tag.step == 1);
  CHECK(first.tag.microbatch == 0);
  CHECK(second.tag.microbatch == 1);
  check_equal(first.x, linear_forward(x1, v1, 2), "y of step 1, micro-batch 0, version 1");
  check_equal(second.x, linear_forward(x2, v1, 1), "y of step 1, micro-batch 1, version 1");
  // Version 1 differs from version 0 where it matters, so the checks above have teeth.
  CHECK(linear_forward(x1, v0, 2) != linear_forward(x1, v1, 2));
  finish(actor);
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a backward uses what its forward saved and the parameter version that forward "
                  "used, and its stash entry is gone afterwards") {
  auto actor = spawn_linear(1);
  const auto v0 = version_params(0), v1 = version_params(1), v2 = version_params(2);
  const auto x0 = small_integers(2 * in_features, 4);
  const auto x1 = small_integers(2 * in_features, 5);
  const auto dy0 = small_integers(2 * out_features, 6, 2);
  const auto dy1 = small_integers(2 * out_features, 7, 2);

  self->send(actor, params_of(0, v0));
  self->send(actor, forward_of(tag_of(0, 0, 0), x0, in_features));
  next<activation_msg>("the forward of step 0");
  // Version 1 arrives (and is used by step 1) before step 0's backward.
  self->send(actor, params_of(1, v1));
  self->send(actor, forward_of(tag_of(1, 0, 1), x1, in_features));
  auto y1 = next<activation_msg>("the forward of step 1");
  check_equal(y1.x, linear_forward(x1, v1, 2), "y of step 1");

  self->send(actor, backward_of(tag_of(0, 0, 0), dy0, out_features));
  auto dx0 = next<gradient_msg>("dx of step 0");
  CHECK(dx0.tag.step == 0);
  check_equal(dx0.dx, linear_dx(dy0, v0, 2), "dx of step 0 (with version 0's W)");
  CHECK(linear_dx(dy0, v0, 2) != linear_dx(dy0, v1, 2));
  auto grads0 = next<weight_grads_msg>("the weight gradients of step 0");
  CHECK(grads0.step == 0);
  CHECK(grads0.layer == 2);
  CHECK(grads0.replica == 0);
  linear_grads want0;
  want0.add(x0, dy0, 2);  // step 0's input, not step 1's
  REQUIRE(grads0.grads.size() == 2);
  check_equal(grads0.grads[0], want0.weight, "dW of step 0");
  check_equal(grads0.grads[1], want0.bias, "db of step 0");

  self->send(actor, backward_of(tag_of(1, 0, 1), dy1, out_features));
  check_equal(next<gradient_msg>("dx of step 1").dx, linear_dx(dy1, v1, 2), "dx of step 1");
  auto grads1 = next<weight_grads_msg>("the weight gradients of step 1");
  linear_grads want1;
  want1.add(x1, dy1, 2);
  CHECK(grads1.step == 1);
  check_equal(grads1.grads[0], want1.weight, "dW of step 1");

  // The stash no longer holds step 0: a second gradient for it finds nothing. (A forward
  // goes first so that the wire has a credit in flight for that gradient to return.)
  self->send(actor, params_of(2, v2));
  self->send(actor, forward_of(tag_of(2, 0, 2), x0, in_features));
  next<activation_msg>("the forward of step 2");
  self->send(actor, backward_of(tag_of(0, 0, 0), dy0, out_features));
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "layer_2");
        INFO(m.what);
        CHECK(m.what.find("stash") != std::string::npos);
      },
      [&](gradient_msg&) { FAIL_CHECK("a backward ran twice for one forward"); },
      caf::after(patience) >> [&] { FAIL_CHECK("no failure for a gradient without a forward"); });
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a layer actor keeps one job in its stream at a time and runs a queued backward "
                  "before a queued forward") {
  auto log = std::make_shared<probe_log>();
  // Not placed: its stream is held by the gated forward, and its handlers must still run.
  auto actor = spawn(std::make_unique<probe_layer>(log), 2, "layer", 0, false);
  log->set_open(false);
  struct reopen {  // so that a failing check cannot leave cpu:0 held
    std::shared_ptr<probe_log> log;
    ~reopen() { log->set_open(true); }
  } guard{log};

  const std::vector<float> x0(in_features, 0.0f), x1(in_features, 1.0f);
  const std::vector<float> dy0(in_features, 10.0f);
  self->send(actor, forward_of(tag_of(0, 0, 0), x0, in_features));
  // The output goes on at once, its data not yet computed (it carries a ready event).
  auto y0 = next<activation_msg>("micro-batch 0's output");
  CHECK(y0.tag.microbatch == 0);
  self->send(actor, forward_of(tag_of(0, 1, 0), x1, in_features));
  self->send(actor, backward_of(tag_of(0, 0, 0), dy0, in_features));
  // Both wait in the actor, not in the stream: neither output has been sent.
  expect_quiet("nothing may be submitted while the actor's last job has not run");
  CHECK(log->snapshot().empty());

  log->set_open(true);
  auto dx0 = next<gradient_msg>("micro-batch 0's dx");
  auto y1 = next<activation_msg>("micro-batch 1's output");
  CHECK(dx0.tag.microbatch == 0);
  CHECK(y1.tag.microbatch == 1);
  CHECK(values(dx0.dx) == dy0);
  CHECK(values(y1.x) == x1);
  cpu(0).work().synchronize();
  // Submitting at once would have run forward 1 before backward 10.
  CHECK(log->snapshot() == std::vector<std::string>{"forward 0", "backward 10", "forward 1"});
  finish(actor);
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a layer actor sums weight gradients over its M micro-batches and sends them "
                  "once per step") {
  const std::int32_t M = 3;
  auto actor = spawn_linear(M);
  for (std::int64_t step = 0; step < 2; ++step) {
    CAPTURE(step);
    const auto p = version_params(static_cast<int>(step));
    self->send(actor, params_of(step, p));
    std::vector<std::vector<float>> xs, dys;
    for (std::int32_t m = 0; m < M; ++m) {
      xs.push_back(small_integers(2 * in_features, 30 + 10 * static_cast<int>(step) + m));
      dys.push_back(small_integers(2 * out_features, 60 + 10 * static_cast<int>(step) + m, 2));
      self->send(actor, forward_of(tag_of(step, m, step), xs.back(), in_features));
      next<activation_msg>("a forward");
    }
    linear_grads want;  // this step's micro-batches only
    for (std::int32_t m = 0; m < M; ++m) {
      CAPTURE(m);
      self->send(actor, backward_of(tag_of(step, m, step), dys[static_cast<std::size_t>(m)],
                                    out_features));
      check_equal(next<gradient_msg>("dx").dx, linear_dx(dys[static_cast<std::size_t>(m)], p, 2),
                  "dx");
      want.add(xs[static_cast<std::size_t>(m)], dys[static_cast<std::size_t>(m)], 2);
      if (m + 1 < M)
        expect_quiet("gradients go out only after the step's last micro-batch");
    }
    auto grads = next<weight_grads_msg>("the step's weight gradients");
    CHECK(grads.step == step);
    REQUIRE(grads.grads.size() == 2);
    check_equal(grads.grads[0], want.weight, "dW summed over the micro-batches");
    check_equal(grads.grads[1], want.bias, "db summed over the micro-batches");
    expect_quiet("one gradient message per step");
  }
  finish(actor);
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a layer actor returns the credit of its incoming wire with dx to a layer and "
                  "with a release_msg to the data loader") {
  auto log = std::make_shared<probe_log>();
  const std::vector<float> x(in_features, 2.0f), dy(in_features, 3.0f);

  SUBCASE("after a layer: the credit comes back with dx") {
    auto actor = spawn(std::make_unique<probe_layer>(log), 1, "layer");
    self->send(actor, forward_of(tag_of(0, 0, 0), x, in_features));
    next<activation_msg>("the forward");
    self->send(actor, backward_of(tag_of(0, 0, 0), dy, in_features));
    auto back = next<gradient_msg>("dx");
    CHECK(back.tag.step == 0);
    CHECK(values(back.dx) == dy);
    expect_quiet("dx alone returns the credit");
    finish(actor);
  }
  SUBCASE("after the data loader: no dx, a release_msg") {
    auto actor = spawn(std::make_unique<probe_layer>(log), 1, "data_loader");
    self->send(actor, forward_of(tag_of(4, 0, 4), x, in_features));
    next<activation_msg>("the forward");
    expect_quiet("a training forward keeps its credit until its backward");
    self->send(actor, backward_of(tag_of(4, 0, 4), dy, in_features));
    auto release = next<release_msg>("the release");
    CHECK(release.tag.step == 4);
    expect_quiet("no dx for the data loader");
    finish(actor);
  }
  SUBCASE("an evaluation forward is released at once and stashes nothing") {
    auto actor = spawn(std::make_unique<probe_layer>(log), 1, "layer");
    self->send(actor, forward_of(tag_of(7, 0, 0, phase::eval), x, in_features));
    auto release = next<release_msg>("the release of an evaluation batch");
    CHECK(release.tag.stage == phase::eval);
    CHECK(next<activation_msg>("the evaluation output").tag.stage == phase::eval);
    finish(actor);
  }
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a layer actor holds an output while its outgoing wire has no credit, and "
                  "sends it when a gradient returns one") {
  auto log = std::make_shared<probe_log>();
  auto actor = spawn(std::make_unique<probe_layer>(log), 2, "layer", /*capacity=*/1);
  const std::vector<float> x0(in_features, 0.0f), x1(in_features, 1.0f), dy(in_features, 5.0f);
  self->send(actor, forward_of(tag_of(0, 0, 0), x0, in_features));
  self->send(actor, forward_of(tag_of(0, 1, 0), x1, in_features));
  CHECK(next<activation_msg>("micro-batch 0").tag.microbatch == 0);
  expect_quiet("capacity 1: micro-batch 1 waits for micro-batch 0's credit");
  self->send(actor, backward_of(tag_of(0, 0, 0), dy, in_features));
  CHECK(next<activation_msg>("micro-batch 1, sent on the returned credit").tag.microbatch == 1);
  next<gradient_msg>("micro-batch 0's dx");
  finish(actor);
}

TEST_CASE_FIXTURE(layer_fixture,
                  "a layer computes with a bf16 weight alike whether its optimizer rounded it or "
                  "it came in fp32, and widens a bf16 parameter it computes with in fp32") {
  if (!kernels::cpu::onednn_has_bf16()) {
    MESSAGE("skipped: this CPU has no native bf16 (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                             << ")");
    return;
  }
  // A weight and an input with more bits than bf16 keeps, so that rounding either shows.
  linear_params exact = version_params(0);
  for (std::size_t i = 0; i < exact.weight.size(); ++i)
    exact.weight[i] += std::ldexp(static_cast<float>(i + 1), -12);
  auto x = small_integers(2 * in_features, 1);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] += std::ldexp(static_cast<float>(i + 1), -11);
  // The weight as the optimizer sends it (Note [bf16 parameters]), and its values in fp32.
  std::vector<std::uint16_t> bits(exact.weight.size());
  kernels::lookup<kernels::ops::to_bf16>(device_type::cpu)(test::cpu_context(),
                                                           static_cast<std::int64_t>(bits.size()),
                                                           exact.weight.data(), bits.data());
  auto weight_bf16 = tensor::empty({out_features, in_features}, dtype::bf16, {device_type::cpu, 0});
  std::copy(bits.begin(), bits.end(), weight_bf16.bf16());
  linear_params rounded = exact;
  for (std::size_t i = 0; i < bits.size(); ++i)
    rounded.weight[i] = test::from_bits(static_cast<std::uint32_t>(bits[i]) << 16);
  REQUIRE(rounded.weight != exact.weight);

  // y of one forward by a fresh actor computing `mask` in bf16, given version 0 as `params`.
  auto forward_with = [&](std::vector<bool> mask, std::vector<tensor> params) {
    bf16_params = std::move(mask);
    auto actor = spawn_linear(1);
    params_msg version;
    version.version = 0;
    version.layer = 2;
    version.params = std::move(params);
    self->send(actor, std::move(version));
    self->send(actor, forward_of(tag_of(0, 0, 0), x, in_features));
    auto y = values(next<activation_msg>("the forward").x);
    finish(actor);
    return y;
  };
  const auto bias = exact.tensors()[1];
  const auto rounded_here = forward_with({true, false}, exact.tensors());
  const auto rounded_before = forward_with({true, false}, {weight_bf16, bias});
  CHECK(rounded_here == rounded_before);  // bit for bit
  const auto widened = forward_with({}, {weight_bf16, bias});
  const auto fp32 = forward_with({}, rounded.tensors());
  CHECK(widened == fp32);  // bit for bit: the fp32 product of the rounded weight
  // Teeth: the bf16 product rounds x too, so it differs from the fp32 one, and the fp32
  // product of the exact weight differs from both.
  CHECK(rounded_here != fp32);
  CHECK(forward_with({}, exact.tensors()) != fp32);
}
