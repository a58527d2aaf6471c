// The gloo averager, driven with real weight_grads_msg messages from a scoped actor that
// plays the layers, the sink (each replica's optimizer) and the trainer, as in
// grad_averager_test.cpp. The averagers of a test meet through an in-process store, as a
// session's do, under a prefix of their own. Sums are checked against a double-precision
// sum and for bit-identity across replicas (what keeps the replicas' optimizers equal);
// the failure tests use a short timeout so that a missing peer fails in well under a
// second.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "actors/averaging/grad_averager_actor.hpp"
#include "actors/session/session.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "tests/actors/grads_support.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "troupe/messages.hpp"

using namespace troupe;

namespace {

using test::check_against_double;
using test::flatten;
using test::make_grads;
using test::patience;

/// cpu:0..3, an actor system whose scoped actor plays the layers, the sinks and the
/// trainer, and one in-process store for the averagers of every test (each test's under
/// its own prefix, as concurrent sessions would be).
struct gloo_averagers : test::plain_actor_fixture {
  gloo_rendezvous rendezvous;

  gloo_averagers() : plain_actor_fixture(4) {
    rendezvous.store = make_in_process_store();
    rendezvous.prefix = unique_gloo_prefix();
  }

  /// The averager of replica `r` of R for layer 0 on cpu:r, wired to the scoped actor.
  caf::actor spawn(std::int32_t r, std::int32_t R, std::chrono::milliseconds timeout) {
    grad_averager_settings s;
    s.name = "r" + std::to_string(r) + ".avg.layer_0";
    s.method = averaging_method::gloo;
    s.layer_index = 0;
    s.replica = r;
    s.replicas = R;
    s.gloo = rendezvous;
    s.gloo_timeout = timeout;
    s.on = &devices.at({device_type::cpu, r});
    auto averager = spawn_grad_averager(system, std::move(s));
    test::wire_self_as_sink(self, averager);
    return averager;
  }

  /// The R averagers of a fresh context (a prefix of their own: each context meets once).
  std::vector<caf::actor> spawn_all(std::int32_t R,
                                    std::chrono::milliseconds timeout = std::chrono::seconds{30}) {
    rendezvous.prefix = unique_gloo_prefix();
    std::vector<caf::actor> out;
    for (std::int32_t r = 0; r < R; ++r)
      out.push_back(spawn(r, R, timeout));
    return out;
  }

  /// `count` sums, keyed by (step, replica); a failure fails the test.
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<tensor>> collect(int count) {
    std::map<std::pair<std::int64_t, std::int32_t>, std::vector<tensor>> out;
    for (int i = 0; i < count; ++i)
      self->receive(
          [&](weight_grads_msg& m) {
            CHECK(m.layer == 0);
            CHECK(out.count({m.step, m.replica}) == 0);
            out[{m.step, m.replica}] = std::move(m.grads);
          },
          [&](failure_msg& m) { FAIL(m.actor << ": " << m.what); },
          caf::after(patience) >> [&] { FAIL("no sums after " << patience.count() << " s"); });
    return out;
  }

  /// The next failure_msg (within patience), or a failed test.
  failure_msg next_failure() {
    failure_msg failure;
    self->receive(
        [&](failure_msg& m) { failure = std::move(m); },
        [&](weight_grads_msg& m) { FAIL("sums of step " << m.step << " despite a failure"); },
        caf::after(patience) >> [&] { FAIL("no failure reported"); });
    return failure;
  }

  void finish(const std::vector<caf::actor>& actors) {
    for (const auto& a : actors)
      self->send(a, finish_atom::value);
  }
};

}  // namespace

TEST_CASE_FIXTURE(
    gloo_averagers,
    "the gloo averagers of a layer sum every replica's gradients and agree bit for bit") {
  const std::vector<std::vector<shape_t>> layers = {
      {{5, 3}, {5}},  // n = 20: a weight and a bias, neither a multiple of R
      {{1}},          // n = 1: fewer elements than ranks
      {{300, 70}},    // n = 21000: several of gloo's segments per rank
  };
  for (std::int32_t R = 1; R <= 3; ++R)
    for (const auto& shapes : layers) {
      CAPTURE(R);
      CAPTURE(element_count(shapes[0]));
      auto averagers = spawn_all(R);
      std::vector<std::vector<float>> inputs;
      for (std::int32_t r = 0; r < R; ++r) {
        auto grads = make_grads(shapes, 0, r, {device_type::cpu, r});
        inputs.push_back(flatten(grads));
        self->send(averagers[static_cast<std::size_t>(r)], weight_grads_msg{0, 0, r, grads});
      }
      auto results = collect(R);
      REQUIRE(results.size() == static_cast<std::size_t>(R));
      const auto first = flatten(results.at({0, 0}));
      check_against_double(first, inputs);
      for (std::int32_t r = 0; r < R; ++r) {
        CAPTURE(r);
        const auto& sums = results.at({0, r});
        REQUIRE(sums.size() == shapes.size());
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          CHECK(sums[i].shape() == shapes[i]);
          CHECK(sums[i].device() == device_id{device_type::cpu, r});
        }
        CHECK(flatten(sums) == first);  // every replica's optimizer gets the same bits
      }
      if (R == 2) {  // one addition, a + b = b + a: exactly what the ring computes
        std::vector<float> plain(inputs[0].size());
        for (std::size_t i = 0; i < plain.size(); ++i)
          plain[i] = inputs[0][i] + inputs[1][i];
        CHECK(first == plain);
      }
      finish(averagers);
    }
  devices.synchronize();
}

TEST_CASE_FIXTURE(
    gloo_averagers,
    "the gloo averager sums gradients handed over as views of one buffer in that buffer") {
  const std::int32_t R = 2;
  const std::vector<shape_t> shapes = {{5, 3}, {5}};
  auto averagers = spawn_all(R);
  std::vector<tensor> buffers;
  for (std::int32_t r = 0; r < R; ++r) {
    auto buffer = tensor::from(flatten(make_grads(shapes, 0, r, {})), {20}, {device_type::cpu, r});
    buffers.push_back(buffer);
    self->send(averagers[static_cast<std::size_t>(r)],
               weight_grads_msg{0, 0, r, {buffer.view(0, shapes[0]), buffer.view(15, shapes[1])}});
  }
  auto results = collect(R);
  for (std::int32_t r = 0; r < R; ++r) {
    const auto& sums = results.at({0, r});
    REQUIRE(sums.size() == 2);
    CHECK(sums[0].shares_storage_with(buffers[static_cast<std::size_t>(r)]));
    CHECK(sums[1].raw() == static_cast<char*>(buffers[static_cast<std::size_t>(r)].raw()) + 15 * 4);
  }
  finish(averagers);
  devices.synchronize();
}

TEST_CASE_FIXTURE(gloo_averagers, "consecutive steps are all-reduced in order, each on its own") {
  const std::int32_t R = 3;
  const std::vector<shape_t> shapes = {{4, 6}, {4}};
  auto averagers = spawn_all(R);
  std::map<std::int64_t, std::vector<std::vector<float>>> inputs;
  // Replica 2 sends both steps before replica 0 sends any: gloo keeps them apart by order
  // and tag (Note [gloo order]).
  for (std::int32_t r : {2, 1, 0})
    for (std::int64_t step : {0, 1}) {
      auto grads = make_grads(shapes, step, r, {device_type::cpu, r});
      inputs[step].resize(R);
      inputs[step][static_cast<std::size_t>(r)] = flatten(grads);
      self->send(averagers[static_cast<std::size_t>(r)], weight_grads_msg{step, 0, r, grads});
    }
  auto results = collect(2 * R);
  for (std::int64_t step : {0, 1}) {
    CAPTURE(step);
    const auto first = flatten(results.at({step, 0}));
    check_against_double(first, inputs[step]);
    for (std::int32_t r = 1; r < R; ++r)
      CHECK(flatten(results.at({step, r})) == first);
  }
  finish(averagers);
  devices.synchronize();
}

TEST_CASE_FIXTURE(gloo_averagers,
                  "a gloo averager whose peer never arrives reports a failure at its timeout") {
  // Rank 0 of 2 alone: its rendezvous waits for rank 1's address, which never comes.
  const auto timeout = std::chrono::milliseconds{300};
  auto started = std::chrono::steady_clock::now();
  auto lonely = spawn(0, 2, timeout);
  self->send(lonely, weight_grads_msg{0, 0, 0, make_grads({{3, 2}}, 0, 0, {})});
  auto failure = next_failure();
  auto waited = std::chrono::steady_clock::now() - started;
  CHECK(failure.actor == "r0.avg.layer_0");
  INFO(failure.what);
  CHECK(failure.what.find("r0.avg.layer_0: step 0") != std::string::npos);
  CHECK(failure.what.find("rank 0 of 2") != std::string::npos);
  CHECK(failure.what.find("could not connect to its 1 peer(s)") != std::string::npos);
  CHECK(failure.what.find("within 0.3 s") != std::string::npos);
  CHECK(waited >= timeout);
  devices.synchronize();
}

TEST_CASE_FIXTURE(
    gloo_averagers,
    "replicas that disagree on a layer's size fail at the timeout instead of mixing") {
  // Both connect; their all-reduces then carry different tags (the size is in the tag),
  // so neither ever matches the other's and both time out.
  auto averagers = spawn_all(2, std::chrono::milliseconds{500});
  self->send(averagers[0], weight_grads_msg{0, 0, 0, make_grads({{5, 3}, {5}}, 0, 0, {})});
  self->send(averagers[1], weight_grads_msg{0, 0, 1, make_grads({{5, 3}}, 0, 1, {})});
  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {
    auto failure = next_failure();
    INFO(failure.what);
    CHECK(failure.what.find("all-reduce of") != std::string::npos);
    CHECK(failure.what.find("(is a peer gone?)") != std::string::npos);
    names.push_back(failure.actor);
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"r0.avg.layer_0", "r1.avg.layer_0"});
  devices.synchronize();
}

namespace {

/// A store that loses what rank 1 of every context writes: rank 0 never learns its
/// address, as if replica 1's process never started.
class store_losing_rank_1 : public collective_store {
 public:
  void set(const std::string& key, const std::vector<char>& data) override {
    if (key.size() >= 2 && key.compare(key.size() - 2, 2, "/1") == 0)
      return;
    inner_->set(key, data);
  }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<collective_store> inner_ = make_in_process_store();
};

}  // namespace

TEST_CASE(
    "a run whose gloo peer never arrives fails cleanly at gloo_timeout, naming the averager") {
  // The session's store is injected (as a multi-node run's would be), here one that loses
  // replica 1's address; 0.5 s stands in for the default 30 s.
  auto config = parse_config(R"(
[run]
steps = 3
seed = 1
evaluate = false
)" + test::data_section({8, 64, 10, 8, 3}) +
                                 test::linear(3) + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
data = 2
averaging = "gloo"
gloo_timeout = 0.5
)",
                             "lonely.toml");
  auto options = test::quiet_options();
  options.gloo.store = std::make_shared<store_losing_rank_1>();
  auto started = std::chrono::steady_clock::now();
  auto result = run_session(config, options);
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(result.outcome.failure);
  CHECK(result.outcome.exit_code == exit_code::run_failed);
  CHECK(result.outcome.steps < 3);
  // Replica 0 times out waiting for replica 1's address and closes its context; replica 1,
  // which did find replica 0's, then sees its connection closed. Both report; which
  // reaches the trainer first is a race, so either is the run's failure.
  const auto& failure = result.outcome.failure;
  const bool rank_0 = failure.find("r0.avg_0") != std::string::npos &&
                      failure.find("could not connect to its 1 peer(s)") != std::string::npos;
  const bool rank_1 = failure.find("r1.avg_0") != std::string::npos &&
                      failure.find("(is a peer gone?)") != std::string::npos;
  CHECK((rank_0 || rank_1));
  CHECK(failure.find("within 0.5 s") != std::string::npos);
  CHECK(seconds < 20);  // the timeout ended it, not the watchdog (60 s)
}

TEST_CASE("an explicit config keeps method gloo and refuses ring wires between gloo averagers") {
  auto shorthand = parse_config(R"(
[run]
steps = 2
evaluate = false
)" + test::data_section({8, 64, 10, 8, 3}) +
                                    test::linear(3) + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
data = 2
averaging = "gloo"
gloo_timeout = 2.5
)",
                                "gloo.toml");
  auto ejected = format_explicit(prepare_session(shorthand).graph, shorthand);
  CHECK(ejected.find("method = \"gloo\"") != std::string::npos);
  CHECK(ejected.find("kind = \"ring\"") == std::string::npos);  // gloo needs no ring wires
  auto read_back = parse_config(ejected, "ejected.toml");
  CHECK(read_back.parallel.averaging == averaging_method::gloo);
  CHECK(read_back.parallel.gloo_timeout == 2.5);
  auto graph = prepare_session(read_back).graph;
  std::int32_t averagers = 0;
  for (const auto& a : graph.actors)
    if (a.kind == actor_kind::averager) {
      CHECK(a.method == averaging_method::gloo);
      CHECK(a.replica == averagers++);
    }
  CHECK(averagers == 2);

  auto with_ring =
      ejected + "\n[[wire]]\nfrom = \"r0.avg_0\"\nto = \"r1.avg_0\"\nkind = \"ring\"\n";
  CHECK_THROWS_WITH_AS(prepare_session(parse_config(with_ring, "ring.toml")),
                       doctest::Contains("averager 'r0.avg_0' averages through gloo; ring wires "
                                         "are for ring averagers"),
                       config_error);
}
