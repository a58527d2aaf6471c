// Gradient averagers: the ring all-reduce and the central sum, driven with real
// weight_grads_msg messages from a scoped actor that plays the layers, the sink and the
// trainer. Sums are checked against a double-precision reference, and (because the
// averagers promise fixed summation orders) bit for bit against a float simulation of
// that order.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <utility>

#include "actors/averaging/grad_averager_actor.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "tests/actors/grads_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "troupe/messages.hpp"

using namespace troupe;

namespace {

using test::check_against_double;
using test::check_within;
using test::flatten;
using test::make_grads;
using test::patience;

/// `x` rounded to bf16 by the kernel the ring uses (tested against a reference in
/// tests/kernels/bf16_test.cpp), as a float.
float bf16_round(float x) {
  std::uint16_t h = 0;
  kernels::lookup<kernels::ops::to_bf16>(device_type::cpu)(test::cpu_context(), 1, &x, &h);
  return test::from_bits(static_cast<std::uint32_t>(h) << 16);
}

/// What the ring all-reduce must compute, bit for bit, simulated in float: in every
/// bucket, chunk c (sizes differing by at most one, the longer ones first) is summed
/// starting at replica c and going round the ring: ((g_c + g_c+1) + g_c+2) + ... With
/// `in_bf16` (reduce_dtype = "bf16", Note [a ring in bf16]) what travels is rounded to
/// bf16 before each addition, and the full sum once for everyone; one replica sends
/// nothing and rounds nothing.
std::vector<float> ring_allreduce_reference(const std::vector<std::vector<float>>& by_replica,
                                            std::int64_t bucket_elements, bool in_bf16 = false) {
  const auto R = static_cast<std::int64_t>(by_replica.size());
  const auto n = static_cast<std::int64_t>(by_replica[0].size());
  auto travel = [&](float x) { return in_bf16 && R > 1 ? bf16_round(x) : x; };
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t start = 0; start < n; start += bucket_elements) {
    const auto size = std::min(bucket_elements, n - start);
    std::int64_t offset = start;
    for (std::int64_t c = 0; c < R; ++c) {
      const auto chunk = size / R + (c < size % R ? 1 : 0);
      for (std::int64_t i = offset; i < offset + chunk; ++i) {
        float sum = by_replica[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)];
        for (std::int64_t k = 1; k < R; ++k)  // the same bits as sum += g when not rounded
          sum = by_replica[static_cast<std::size_t>((c + k) % R)][static_cast<std::size_t>(i)] +
                travel(sum);
        out[static_cast<std::size_t>(i)] = travel(sum);
      }
      offset += chunk;
    }
  }
  return out;
}

/// Sends each averager of a ring its wiring: who comes next, and the scoped actor as its
/// sink and trainer.
void connect_ring(caf::scoped_actor& self, const std::vector<caf::actor>& ring) {
  auto me = caf::actor_cast<caf::actor>(self);
  for (std::size_t r = 0; r < ring.size(); ++r) {
    wiring_msg wiring;
    wiring.trainer = me;
    wiring.outgoing.push_back(wire_end{"ring", "next", "averager", ring[(r + 1) % ring.size()],
                                       static_cast<std::int32_t>((r + 1) % ring.size()), 0, "", 0});
    wiring.outgoing.push_back(wire_end{"grads", "sink", "optimizer", me, -1, 0, "", 0});
    self->send(ring[r], std::move(wiring));
  }
}

/// The averagers of one layer in a ring, replica r on cpu:r, connected after spawning
/// (the ring is circular) unless `connect` is false. The scoped actor is their sink and
/// trainer (from the wiring).
std::vector<caf::actor> spawn_ring(caf::actor_system& system, device_set& devices,
                                   caf::scoped_actor& self, std::int32_t R,
                                   std::int64_t bucket_elements, bool connect = true,
                                   bool reduce_bf16 = false) {
  std::vector<caf::actor> ring;
  for (std::int32_t r = 0; r < R; ++r) {
    grad_averager_settings s;
    s.name = "r" + std::to_string(r) + ".avg.layer_0";
    s.method = averaging_method::ring;
    s.layer_index = 0;
    s.replica = r;
    s.replicas = R;
    s.bucket_elements = bucket_elements;
    s.reduce_bf16 = reduce_bf16;
    s.on = &devices.at({device_type::cpu, r});
    ring.push_back(spawn_grad_averager(system, std::move(s)));
  }
  if (connect)
    connect_ring(self, ring);
  return ring;
}

caf::actor spawn_central(caf::actor_system& system, device_set& devices, caf::scoped_actor& self,
                         std::int32_t R) {
  grad_averager_settings s;
  s.name = "avg.layer_0";
  s.method = averaging_method::central;
  s.layer_index = 0;
  s.replicas = R;
  s.on = &devices.at({device_type::cpu, 0});
  auto central = spawn_grad_averager(system, std::move(s));
  // Its sink and trainer come with the wiring, as in a run: the scoped actor plays both.
  test::wire_self_as_sink(self, central);
  return central;
}

/// Receives `count` weight_grads_msg, keyed by (step, replica); fails on a failure_msg.
std::map<std::pair<std::int64_t, std::int32_t>, std::vector<tensor>> collect(
    caf::scoped_actor& self, int count) {
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

void finish(caf::scoped_actor& self, const std::vector<caf::actor>& actors) {
  for (const auto& a : actors) self->send(a, finish_atom::value);
}

/// One all-reduce of a layer of `shapes` over a ring of R replicas: each replica's
/// gradients (flattened) and the sums every replica got, keyed by (step, replica).
struct ring_case {
  std::vector<std::vector<float>> inputs;
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<tensor>> results;
};
ring_case all_reduce_once(caf::actor_system& system, device_set& devices, caf::scoped_actor& self,
                          std::int32_t R, const std::vector<shape_t>& shapes, std::int64_t bucket,
                          bool reduce_bf16) {
  auto ring = spawn_ring(system, devices, self, R, bucket, true, reduce_bf16);
  ring_case out;
  for (std::int32_t r = 0; r < R; ++r) {
    auto grads = make_grads(shapes, 0, r, {device_type::cpu, r});
    out.inputs.push_back(flatten(grads));
    self->send(ring[static_cast<std::size_t>(r)], weight_grads_msg{0, 0, r, grads});
  }
  out.results = collect(self, R);
  REQUIRE(out.results.size() == static_cast<std::size_t>(R));
  finish(self, ring);
  return out;
}

/// What every test here drives averagers with: cpu:0..3 and an actor system whose scoped
/// actor plays the layers, the sink and the trainer. The devices outlive the system.
struct averagers : test::plain_actor_fixture {
  averagers() : plain_actor_fixture(4) {}
};

}  // namespace

TEST_CASE_FIXTURE(averagers,
                  "the ring all-reduce sums correctly for 1 to 4 replicas, odd sizes and several buckets") {

  const std::vector<std::vector<shape_t>> layers = {
      {{5, 3}, {5}},  // n = 20: a weight and a bias, neither a multiple of R
      {{1}},          // n = 1: every replica but one holds an empty chunk
      {{2}},          // n = 2 < R for R = 3 and 4
  };
  // R = 1 has no rounds at all: the sums are a copy of the one replica's gradients.
  for (std::int32_t R = 1; R <= 4; ++R)
    for (const auto& shapes : layers)
      for (std::int64_t bucket : {std::int64_t{1} << 18, std::int64_t{7}, std::int64_t{3}}) {
        CAPTURE(R);
        CAPTURE(bucket);
        CAPTURE(shapes.size());
        CAPTURE(element_count(shapes[0]));
        const auto run = all_reduce_once(system, devices, self, R, shapes, bucket, false);
        const auto& inputs = run.inputs;
        const auto& results = run.results;
        const auto expected = ring_allreduce_reference(inputs, bucket);
        for (std::int32_t r = 0; r < R; ++r) {
          CAPTURE(r);
          const auto& sums = results.at({0, r});
          REQUIRE(sums.size() == shapes.size());
          for (std::size_t i = 0; i < shapes.size(); ++i) {
            CHECK(sums[i].shape() == shapes[i]);
            // Each replica's sums live on its own device (they feed its optimizer).
            CHECK(sums[i].device() == device_id{device_type::cpu, r});
          }
          const auto got = flatten(sums);
          check_against_double(got, inputs);
          // Bit-identical on every replica, and exactly the documented summation order.
          CHECK(got == expected);
        }
      }
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "the ring reduces gradients handed over as views of one buffer in that buffer") {
  const std::int32_t R = 3;
  const std::vector<shape_t> shapes = {{5, 3}, {5}};
  auto ring = spawn_ring(system, devices, self, R, 7);
  std::vector<std::vector<float>> inputs;
  std::vector<tensor> buffers;
  for (std::int32_t r = 0; r < R; ++r) {
    // As a layer sends them: one buffer, a view per parameter.
    auto separate = make_grads(shapes, 0, r, {device_type::cpu, r});
    inputs.push_back(flatten(separate));
    auto buffer = tensor::from(inputs.back(), {20}, {device_type::cpu, r});
    buffers.push_back(buffer);
    self->send(ring[static_cast<std::size_t>(r)],
               weight_grads_msg{0, 0, r, {buffer.view(0, shapes[0]), buffer.view(15, shapes[1])}});
  }
  auto results = collect(self, R);
  const auto expected = ring_allreduce_reference(inputs, 7);
  for (std::int32_t r = 0; r < R; ++r) {
    const auto& sums = results.at({0, r});
    REQUIRE(sums.size() == 2);
    CHECK(flatten(sums) == expected);
    // No flattening and no unflattening: the sums are views of the buffer handed over.
    CHECK(sums[0].shares_storage_with(buffers[static_cast<std::size_t>(r)]));
    CHECK(sums[1].raw() == static_cast<char*>(buffers[static_cast<std::size_t>(r)].raw()) + 15 * 4);
  }
  finish(self, ring);
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "between CPU devices of one process the ring copies nothing: it reads what a "
                  "neighbour sent where it lies and sums its own chunk in place") {
  // Note [chunks in place] in actors/averaging/ring_collective.cpp and Note [reading a peer in
  // place] in runtime/core/transfer.cpp. What a device allocates while the ring runs shows
  // it: with two replicas nothing at all besides the buffer handed over (before: a copy
  // of the chunk sent, a copy of the chunk received and a sum, each a chunk long); with
  // three, one partial sum per bucket, which goes on to the next replica.
  const std::int64_t n = 1000;
  for (std::int32_t R : {2, 3}) {
    CAPTURE(R);
    devices.synchronize();
    for (std::int32_t r = 0; r < R; ++r)
      reset_storage_peak({device_type::cpu, r});
    auto ring = spawn_ring(system, devices, self, R, n);
    std::vector<std::vector<float>> inputs;
    for (std::int32_t r = 0; r < R; ++r) {
      inputs.push_back(flatten(make_grads({{n}}, 0, r, {device_type::cpu, r})));
      auto buffer = tensor::from(inputs.back(), {n}, {device_type::cpu, r});
      self->send(ring[static_cast<std::size_t>(r)], weight_grads_msg{0, 0, r, {buffer}});
    }
    auto results = collect(self, R);
    devices.synchronize();
    const auto expected = ring_allreduce_reference(inputs, n);
    const std::int64_t chunk_bytes = (n / R + 1) * static_cast<std::int64_t>(sizeof(float));
    for (std::int32_t r = 0; r < R; ++r) {
      CAPTURE(r);
      CHECK(flatten(results.at({0, r})) == expected);
      const auto peak = storage_bytes_peak({device_type::cpu, r});
      CHECK(peak >= n * static_cast<std::int64_t>(sizeof(float)));
      CHECK(peak <= n * static_cast<std::int64_t>(sizeof(float)) + (R - 2) * chunk_bytes);
    }
    // Gone before the next round's peaks start: an actor still finishing holds its buffer
    // (a round of three once counted two's leftover 4000 bytes).
    finish(self, ring);
    self->wait_for(ring);
    ring.clear();
  }
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "the ring keeps two consecutive steps apart when their messages interleave") {

  const std::vector<shape_t> shapes = {{5, 3}, {5}};
  const std::int32_t R = 3;
  auto ring = spawn_ring(system, devices, self, R, 7);
  // Step 1 of replicas 0 and 1 goes out before step 0 of replicas 1 and 2, so step 1's
  // ring messages reach averagers that are still waiting for step 0's gradients.
  const std::vector<std::pair<std::int64_t, std::int32_t>> order = {{0, 0}, {1, 0}, {1, 1},
                                                                    {0, 1}, {1, 2}, {0, 2}};
  std::map<std::int64_t, std::vector<std::vector<float>>> inputs;
  for (std::int64_t step : {0, 1}) inputs[step].resize(R);
  for (const auto& [step, r] : order) {
    auto grads = make_grads(shapes, step, r, {device_type::cpu, r});
    inputs[step][static_cast<std::size_t>(r)] = flatten(grads);
    self->send(ring[static_cast<std::size_t>(r)], weight_grads_msg{step, 0, r, grads});
  }
  auto results = collect(self, 2 * R);
  REQUIRE(results.size() == static_cast<std::size_t>(2 * R));
  for (std::int64_t step : {0, 1}) {
    CAPTURE(step);
    const auto expected = ring_allreduce_reference(inputs[step], 7);
    for (std::int32_t r = 0; r < R; ++r) {
      CAPTURE(r);
      const auto got = flatten(results.at({step, r}));
      check_against_double(got, inputs[step]);
      CHECK(got == expected);
    }
  }
  // The two steps' inputs differ, so mixing them up could not go unnoticed.
  CHECK(inputs[0][0] != inputs[1][0]);
  finish(self, ring);
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "ring messages sent before the ring is connected wait for the connection") {

  const std::vector<shape_t> shapes = {{5, 3}, {5}};
  const std::int32_t R = 3;
  auto ring = spawn_ring(system, devices, self, R, 7, false);
  std::vector<std::vector<float>> inputs;
  for (std::int32_t r = 0; r < R; ++r) {
    auto grads = make_grads(shapes, 0, r, {device_type::cpu, r});
    inputs.push_back(flatten(grads));
    self->send(ring[static_cast<std::size_t>(r)], weight_grads_msg{0, 0, r, grads});
  }
  connect_ring(self, ring);
  auto results = collect(self, R);
  REQUIRE(results.size() == static_cast<std::size_t>(R));
  const auto expected = ring_allreduce_reference(inputs, 7);
  for (std::int32_t r = 0; r < R; ++r)
    CHECK(flatten(results.at({0, r})) == expected);
  finish(self, ring);
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "the central averager sums 3 replicas in replica order whatever the arrival order") {

  const std::vector<shape_t> shapes = {{5, 3}, {5}};
  const std::int32_t R = 3;
  auto central = spawn_central(system, devices, self, R);
  // The same gradients for steps 0 and 1 (from each replica's own device); step 0 arrives
  // in order 0, 1, 2, step 1 in order 2, 0, 1, and the two steps interleave.
  // Gradients are handed over (weight_grads_msg), so each step gets its own tensors.
  std::vector<std::vector<float>> inputs;
  for (std::int32_t r = 0; r < R; ++r)
    inputs.push_back(flatten(make_grads(shapes, 0, r, {device_type::cpu, r})));
  const std::vector<std::pair<std::int64_t, std::int32_t>> order = {{1, 2}, {0, 0}, {1, 0},
                                                                    {0, 1}, {0, 2}, {1, 1}};
  for (const auto& [step, r] : order)
    self->send(central, weight_grads_msg{step, 0, r, make_grads(shapes, 0, r, {device_type::cpu, r})});
  auto results = collect(self, 2);
  REQUIRE(results.size() == 2);
  const auto& in_order = results.at({0, -1});
  const auto& shuffled = results.at({1, -1});
  REQUIRE(in_order.size() == shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    CHECK(in_order[i].shape() == shapes[i]);
    CHECK(in_order[i].device() == device_id{device_type::cpu, 0});
  }
  const auto a = flatten(in_order);
  const auto b = flatten(shuffled);
  check_against_double(a, inputs);
  CHECK(a == b);
  // Exactly (g0 + g1) + g2 in float; and these inputs are ones where the arrival order
  // (g2 + g0) + g1 would give other bits, so the check above has teeth.
  bool order_matters = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    float sum = inputs[0][i];
    sum += inputs[1][i];
    sum += inputs[2][i];
    CHECK(a[i] == sum);
    float arrival = inputs[2][i];
    arrival += inputs[0][i];
    arrival += inputs[1][i];
    order_matters = order_matters || arrival != sum;
  }
  CHECK(order_matters);
  finish(self, {central});
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "gradients with the wrong number of tensors or shapes are reported to the trainer") {
  const std::vector<shape_t> shapes = {{5, 3}, {5}};

  auto expect_failure = [&](const std::string& actor, const std::string& fragment) {
    self->receive(
        [&](failure_msg& m) {
          CHECK(m.actor == actor);
          INFO(m.what);
          CHECK(m.what.find(actor) != std::string::npos);
          CHECK(m.what.find(fragment) != std::string::npos);
        },
        [&](weight_grads_msg&) { FAIL("sums sent despite bad gradients"); },
        caf::after(patience) >> [&] { FAIL("no failure reported"); });
  };

  SUBCASE("central: a replica sends one tensor for a layer with two parameters") {
    auto central = spawn_central(system, devices, self, 2);
    self->send(central, weight_grads_msg{0, 0, 0, make_grads(shapes, 0, 0, {})});
    self->send(central, weight_grads_msg{0, 0, 1, make_grads({{5, 3}}, 0, 1, {})});
    expect_failure("avg.layer_0", "1 tensors, expected 2");
  }
  SUBCASE("central: a replica sends a transposed weight") {
    auto central = spawn_central(system, devices, self, 2);
    self->send(central, weight_grads_msg{0, 0, 1, make_grads(shapes, 0, 1, {})});
    self->send(central, weight_grads_msg{0, 0, 0, make_grads({{3, 5}, {5}}, 0, 0, {})});
    expect_failure("avg.layer_0", "gradient 0 has shape (3, 5), expected (5, 3)");
  }
  SUBCASE("ring: a later step changes a shape") {
    auto ring = spawn_ring(system, devices, self, 2, 7);
    for (std::int32_t r = 0; r < 2; ++r)
      self->send(ring[static_cast<std::size_t>(r)],
                 weight_grads_msg{0, 0, r, make_grads(shapes, 0, r, {device_type::cpu, r})});
    auto results = collect(self, 2);
    CHECK(results.size() == 2);
    self->send(ring[1], weight_grads_msg{1, 0, 1, make_grads({{5, 3}, {4}}, 1, 1, {})});
    expect_failure("r1.avg.layer_0", "gradient 1 has shape (4), expected (5)");
    finish(self, {ring[0]});
  }
  SUBCASE("ring: replicas disagree on the layer's size") {
    // Neither averager has seen a good message, so only the ring protocol can tell.
    auto ring = spawn_ring(system, devices, self, 2, 1 << 18);
    self->send(ring[0], weight_grads_msg{0, 0, 0, make_grads(shapes, 0, 0, {})});
    self->send(ring[1], weight_grads_msg{0, 0, 1, make_grads({{5, 3}}, 0, 1, {})});
    // Both notice: each receives a chunk of the wrong size from the other.
    std::vector<std::string> names;
    for (int i = 0; i < 2; ++i)
      self->receive(
          [&](failure_msg& m) {
            INFO(m.what);
            CHECK(m.what.find("do the replicas' gradients have the same size?") !=
                  std::string::npos);
            names.push_back(m.actor);
          },
          caf::after(patience) >> [&] { FAIL("no failure reported"); });
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"r0.avg.layer_0", "r1.avg.layer_0"});
  }
  devices.synchronize();
}

TEST_CASE_FIXTURE(averagers,
                  "the ring in bf16 sends bf16 chunks, sums each in fp32 and leaves every "
                  "replica the same bits, within bf16's rounding of the sum") {
  const std::vector<std::vector<shape_t>> layers = {{{5, 3}, {5}}, {{1}}, {{2}}};
  for (std::int32_t R = 1; R <= 4; ++R)
    for (const auto& shapes : layers)
      for (std::int64_t bucket : {std::int64_t{1} << 18, std::int64_t{7}, std::int64_t{3}}) {
        CAPTURE(R);
        CAPTURE(bucket);
        CAPTURE(element_count(shapes[0]));
        const auto run = all_reduce_once(system, devices, self, R, shapes, bucket, true);
        const auto& inputs = run.inputs;
        const auto& results = run.results;
        const auto expected = ring_allreduce_reference(inputs, bucket, true);
        for (std::int32_t r = 0; r < R; ++r) {
          CAPTURE(r);
          const auto got = flatten(results.at({0, r}));
          CHECK(got == expected);  // bit for bit, on every replica
          // R - 1 roundings of partial sums and one of the full sum, each within 2^-9 of
          // the magnitudes summed so far (2^-8 leaves room for the fp32 additions' 2^-24).
          check_within(got, inputs, R * std::ldexp(1.0, -8));
        }
        // Teeth: with R > 1 somewhere a chunk differs from the fp32 ring's.
        if (R > 1 && element_count(shapes[0]) > 2)
          CHECK(expected != ring_allreduce_reference(inputs, bucket));
      }
  devices.synchronize();
}
