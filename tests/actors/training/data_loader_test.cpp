// The data loader actor, driven with real messages from a scoped actor that plays every
// replica's first layer (activations), every replica's loss (labels) and the trainer
// (start, item credits): the epoch order, the split of a step over replicas and
// micro-batches, the prefetch bound and the credits of the activations wires.
//
// Each sample's loader_features are its own index, so the rows a message carries say exactly which
// samples the loader picked; all values are small integers and compare exactly.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "actors/training/batch_assembler_actor.hpp"
#include "actors/training/data_loader_actor.hpp"
#include "runtime/core/transfer.hpp"
#include "tests/actors/actor_test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr std::int64_t train_count = 24;
constexpr std::int64_t loader_features = 2;
constexpr std::int64_t loader_classes = 3;

/// Sample i has loader_features (i, -i) and label i % loader_classes.
std::shared_ptr<const dataset_split> indexed_data() {
  auto data = std::make_shared<dataset_split>();
  for (auto* part : {&data->train, &data->test}) {
    part->count = part == &data->train ? train_count : 5;
    part->features = loader_features;
    part->classes = loader_classes;
    for (std::int64_t i = 0; i < part->count; ++i) {
      part->images.push_back(static_cast<float>(i));
      part->images.push_back(static_cast<float>(-i));
      part->labels.push_back(static_cast<std::int32_t>(i % loader_classes));
    }
  }
  return data;
}

/// B = 8 over R replicas x M micro-batches, 3 steps per epoch, 2 epochs, no evaluation.
run_plan plan_of(std::int64_t replicas, std::int64_t microbatches) {
  run_plan p;
  p.batch_size = 8;
  p.replicas = replicas;
  p.microbatches = microbatches;
  p.steps_per_epoch = train_count / p.batch_size;
  p.total_steps = 2 * p.steps_per_epoch;
  p.epochs = 2;
  p.evaluate = false;
  return p;
}

/// Which samples a message carries (its rows' first feature), checking the second.
std::vector<std::int64_t> samples_of(const tensor& x) {
  REQUIRE(x.rank() == 2);
  REQUIRE(x.dim(1) == loader_features);
  auto v = values(x);
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < x.dim(0); ++r) {
    CHECK(v[static_cast<std::size_t>(r * loader_features + 1)] ==
          -v[static_cast<std::size_t>(r * loader_features)]);
    out.push_back(static_cast<std::int64_t>(v[static_cast<std::size_t>(r * loader_features)]));
  }
  return out;
}

using item_key =
    std::tuple<std::int64_t, std::int32_t, std::int32_t>;  // step, replica, micro-batch

struct loader_fixture : actor_fixture {
  /// When set, replica 1's first layer is "on another node": its batches go through this
  /// actor (a batch assembler) as row numbers.
  caf::actor relay;

  /// A loader whose every replica's first layer and loss is the scoped actor; replica r's
  /// first layer is on cpu:r. Not placed on a device: runs keep it on the host.
  caf::actor spawn(const run_plan& plan, std::uint64_t seed, bool shuffle, std::int64_t prefetch,
                   std::int64_t capacity = 0) {
    data_loader_settings s;
    s.data = indexed_data();
    s.plan = plan;
    s.shuffle = shuffle;
    s.seed = seed;
    s.prefetch = prefetch;
    s.on = {device_type::cpu, 0};
    s.devices = &devices;
    auto actor = system.spawn<data_loader_actor>(std::move(s));
    std::vector<wire_end> out;
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan.replicas); ++r) {
      out.push_back(wire("activations", me(), "layer", capacity, r, "cpu:" + std::to_string(r)));
      if (r == 1)
        out.back().relay = relay;  // empty unless a test sets it
      out.push_back(wire("labels", me(), "loss", 0, r));
    }
    self->send(actor, wiring(std::move(out), {}));
    return actor;
  }

  /// Runs a whole loader (all items at once) and returns each epoch's samples in the
  /// order of the global batch: step by step, replica by replica, micro-batch by
  /// micro-batch. Checks every message's tag, device, labels and global batch on the way.
  std::vector<std::vector<std::int64_t>> epochs_of(const run_plan& plan, std::uint64_t seed,
                                                   bool shuffle) {
    auto actor = spawn(plan, seed, shuffle, plan.total_steps);
    self->send(actor, start_atom::value);
    const auto messages = plan.total_steps * plan.replicas * plan.microbatches;
    std::map<item_key, std::vector<std::int64_t>> batches;
    std::map<item_key, std::int64_t> first_samples;
    for (std::int64_t i = 0; i < messages; ++i) {
      auto m = next<activation_msg>("a micro-batch");
      const auto& t = m.tag;
      CHECK(t.stage == phase::train);
      CHECK(t.version == t.step);
      CHECK(t.epoch == t.step / plan.steps_per_epoch);
      CHECK(m.x.device() == device_id{device_type::cpu, t.replica});
      CHECK(batches.count({t.step, t.replica, t.microbatch}) == 0);
      batches[{t.step, t.replica, t.microbatch}] = samples_of(m.x);
      first_samples[{t.step, t.replica, t.microbatch}] = t.first_sample;
    }
    for (std::int64_t i = 0; i < messages; ++i) {
      auto m = next<labels_msg>("a micro-batch's labels");
      CHECK(m.global_batch == plan.batch_size);
      CHECK(m.global_terms == plan.batch_size);  // one label a sample, none ignored
      const auto& rows = batches.at({m.tag.step, m.tag.replica, m.tag.microbatch});
      std::vector<std::int32_t> want;
      for (auto sample : rows)
        want.push_back(static_cast<std::int32_t>(sample % loader_classes));
      CHECK(m.labels.to_int_vector() == want);
    }
    expect_quiet("nothing after the last step");
    finish(actor);
    // Replica r's rows of a step (B / R, or the plan's split) in M micro-batches of as
    // equal a size as they divide into, each tagged with its first sample's index in the
    // global batch.
    std::vector<std::vector<std::int64_t>> epochs(static_cast<std::size_t>(plan.epochs));
    std::int64_t first = 0;
    for (const auto& [key, rows] : batches) {
      const auto [step, replica, microbatch] = key;
      const auto replica_rows = plan.replica_rows.empty()
                                    ? plan.batch_size / plan.replicas
                                    : plan.replica_rows[static_cast<std::size_t>(replica)];
      const auto want = replica_rows / plan.microbatches +
                        (microbatch < replica_rows % plan.microbatches ? 1 : 0);
      CHECK(static_cast<std::int64_t>(rows.size()) == want);
      if (replica == 0 && microbatch == 0)
        first = 0;
      CHECK(first_samples.at(key) == first);
      first += static_cast<std::int64_t>(rows.size());
      auto& epoch = epochs[static_cast<std::size_t>(step / plan.steps_per_epoch)];
      epoch.insert(epoch.end(), rows.begin(), rows.end());
    }
    return epochs;
  }
};

}  // namespace

TEST_CASE_FIXTURE(loader_fixture,
                  "each epoch the data loader sends every sample once, in a permutation keyed by "
                  "seed and epoch") {
  const auto plan = plan_of(2, 2);
  const auto epochs = epochs_of(plan, 5, true);
  std::vector<std::int64_t> all(train_count);
  std::iota(all.begin(), all.end(), 0);
  for (const auto& epoch : epochs) {
    auto sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == all);  // each sample exactly once per epoch
    CHECK(epoch != all);   // and shuffled
  }
  CHECK(epochs[0] != epochs[1]);
  // The order is the documented permutation of (seed, epoch), split over replicas and
  // micro-batches in order.
  for (std::int64_t e = 0; e < 2; ++e)
    CHECK(epochs[static_cast<std::size_t>(e)] == epoch_order(train_count, 5, e, true));
  // The same seed gives the same order with another split; another seed another order.
  CHECK(epochs_of(plan_of(1, 1), 5, true) == epochs);
  CHECK(epochs_of(plan, 6, true) != epochs);
  // Without shuffling: the samples in order, every epoch.
  const auto plain = epochs_of(plan, 5, false);
  CHECK(plain[0] == all);
  CHECK(plain[1] == all);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "an uneven split gives each replica its rows of the global batch in epoch "
                  "order, in micro-batches as equal as they divide into") {
  for (const auto& split : {std::vector<std::int64_t>{2, 6}, std::vector<std::int64_t>{5, 3},
                            std::vector<std::int64_t>{7, 1}}) {
    auto plan = plan_of(2, split[1] == 1 ? 1 : 2);
    plan.replica_rows = split;
    INFO("rows " << split[0] << " and " << split[1] << ", M = " << plan.microbatches);
    // epochs_of checks each micro-batch's size and first sample against the split.
    const auto epochs = epochs_of(plan, 5, true);
    for (std::int64_t e = 0; e < 2; ++e)
      CHECK(epochs[static_cast<std::size_t>(e)] == epoch_order(train_count, 5, e, true));
  }
}

TEST_CASE("apportion_rows splits by weight, the largest remainders taking the rows left") {
  CHECK(apportion_rows(24, {1, 1}) == std::vector<std::int64_t>{12, 12});
  CHECK(apportion_rows(25, {1, 1}) == std::vector<std::int64_t>{13, 12});  // ties: lower
  CHECK(apportion_rows(24, {1, 3}) == std::vector<std::int64_t>{6, 18});
  CHECK(apportion_rows(24, {1, 2.5}) == std::vector<std::int64_t>{7, 17});  // 6.86, 17.14
  CHECK(apportion_rows(10, {1, 1, 1}) == std::vector<std::int64_t>{4, 3, 3});
  CHECK(apportion_rows(8, {6.4, 1.6}) == std::vector<std::int64_t>{6, 2});
  CHECK(apportion_rows(8, {1000, 1}) == std::vector<std::int64_t>{8, 0});
  CHECK(apportion_rows(0, {1, 2}) == std::vector<std::int64_t>{0, 0});
  CHECK(apportion_rows(8, {1.5e308, 0.5e308}) == std::vector<std::int64_t>{6, 2});  // no inf
  CHECK(apportion_rows(8, {1e-300, 3e-300}) == std::vector<std::int64_t>{2, 6});
  for (std::int64_t total = 0; total < 40; ++total) {
    const std::vector<double> weights = {0.3, 1.7, 5};
    auto rows = apportion_rows(total, weights);
    CHECK(std::accumulate(rows.begin(), rows.end(), std::int64_t{0}) == total);
    for (std::size_t i = 0; i < rows.size(); ++i)  // within a row of the exact share
      CHECK(std::abs(static_cast<double>(rows[i]) - static_cast<double>(total) * weights[i] / 7) <
            1);
  }
}

TEST_CASE_FIXTURE(loader_fixture,
                  "the data loader keeps at most `prefetch` steps ahead until the trainer "
                  "returns a credit") {
  const auto plan = plan_of(1, 1);
  auto actor = spawn(plan, 1, true, /*prefetch=*/2);
  self->send(actor, start_atom::value);
  std::int64_t expected_step = 0;
  auto take_step = [&] {
    auto m = next<activation_msg>("a step");
    CHECK(m.tag.step == expected_step++);
    next<labels_msg>("its labels");
  };
  take_step();
  take_step();
  expect_quiet("two steps in flight with prefetch = 2");
  for (std::int64_t credit = 0; credit < plan.total_steps - 2; ++credit) {
    self->send(actor, credit_atom::value);
    take_step();
    expect_quiet("one credit, one step");
  }
  CHECK(expected_step == plan.total_steps);
  self->send(actor, credit_atom::value);
  expect_quiet("no step after the last one");
  finish(actor);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "the data loader sends a replica at most its wire's capacity of micro-batches "
                  "until the first layer releases one") {
  const auto plan = plan_of(2, 2);
  auto actor = spawn(plan, 1, true, /*prefetch=*/1, /*capacity=*/1);
  self->send(actor, start_atom::value);
  // Step 0's micro-batch 0 for each replica; micro-batch 1 waits for a credit. Labels have
  // no credits: all four arrive.
  std::map<std::int32_t, std::int32_t> first;
  for (int i = 0; i < 2; ++i) {
    auto m = next<activation_msg>("a replica's first micro-batch");
    first[m.tag.replica] = m.tag.microbatch;
  }
  CHECK(first == std::map<std::int32_t, std::int32_t>{{0, 0}, {1, 0}});
  for (int i = 0; i < 4; ++i)
    next<labels_msg>("labels");
  expect_quiet("capacity 1: micro-batch 1 waits");

  release_msg release;
  release.tag.step = 0;
  release.tag.replica = 1;
  self->send(actor, release);
  auto m = next<activation_msg>("replica 1's second micro-batch");
  CHECK(m.tag.replica == 1);
  CHECK(m.tag.microbatch == 1);
  expect_quiet("replica 0 has not released anything");
  release.tag.replica = 0;
  self->send(actor, release);
  m = next<activation_msg>("replica 0's second micro-batch");
  CHECK(m.tag.replica == 0);
  CHECK(m.tag.microbatch == 1);
  finish(actor);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "a replica behind a batch assembler gets the same batches, assembled on its "
                  "device from the rows the loader picked") {
  const auto plan = plan_of(2, 2);
  const auto direct = epochs_of(plan, 5, true);
  relay = system.spawn<batch_assembler_actor>(1, indexed_data(), &devices);
  self->send(relay, wiring({}, {}));
  // epochs_of checks each batch's device: replica 1's is cpu:1, as its wire says.
  CHECK(epochs_of(plan, 5, true) == direct);
  finish(relay);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "a batch assembler gathers test rows too and refuses rows its data set lacks") {
  auto assembler = system.spawn<batch_assembler_actor>(1, indexed_data(), &devices);
  self->send(assembler, wiring({}, {}));
  micro_tag tag;
  tag.stage = phase::eval;
  self->send(assembler, batch_rows_msg{tag, {4, 0, 3}, true, me(), "cpu:1", trace_stamp{}});
  auto batch = next<activation_msg>("an evaluation batch");
  CHECK(batch.tag.stage == phase::eval);
  CHECK(batch.x.device() == device_id{device_type::cpu, 1});
  CHECK(samples_of(batch.x) == std::vector<std::int64_t>{4, 0, 3});
  // The test split has 5 samples: row 5 is past it (the train split has 24).
  self->send(assembler, batch_rows_msg{tag, {1, 5}, true, me(), "cpu:1", trace_stamp{}, 1});
  auto failure = next<failure_msg>("the assembler's failure");
  CHECK(failure.actor == "loader@node1");
  CHECK(failure.what.find("row 5 of a batch is not in the test split (5 samples)") !=
        std::string::npos);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "a batch assembler gathers each replica's rows in the loader's order, however "
                  "they came, and refuses rows that come twice") {
  // Note [rows in order]: through CAF and shared memory, a later message can come first.
  auto assembler = system.spawn<batch_assembler_actor>(1, indexed_data(), &devices);
  self->send(assembler, wiring({}, {}));
  auto rows = [&](std::int32_t replica, std::int64_t row, std::uint64_t sequence) {
    micro_tag tag;
    tag.stage = phase::eval;
    tag.replica = replica;
    tag.microbatch = static_cast<std::int32_t>(sequence);
    return batch_rows_msg{tag, {row}, true, me(), "cpu:1", trace_stamp{}, sequence};
  };
  // Replica 0's rows numbered 2, 1, then replica 1's 0, then replica 0's 0: replica 1's
  // batch goes at once, replica 0's wait for its first and then go in order.
  self->send(assembler, rows(0, 2, 2));
  self->send(assembler, rows(0, 1, 1));
  self->send(assembler, rows(1, 4, 0));
  auto first = next<activation_msg>("replica 1's batch");
  CHECK(first.tag.replica == 1);
  CHECK(samples_of(first.x) == std::vector<std::int64_t>{4});
  self->send(assembler, rows(0, 0, 0));
  for (std::int64_t k = 0; k < 3; ++k) {
    auto batch = next<activation_msg>("replica 0's batches, in order");
    CHECK(batch.tag.replica == 0);
    CHECK(batch.tag.microbatch == k);
    CHECK(samples_of(batch.x) == std::vector<std::int64_t>{k});
  }
  self->send(assembler, rows(0, 3, 1));
  auto failure = next<failure_msg>("the assembler's failure");
  CHECK(failure.what.find("the rows of replica 0 numbered 1 came twice") != std::string::npos);
  // Rows that came early are checked before they are held.
  auto another = system.spawn<batch_assembler_actor>(1, indexed_data(), &devices);
  self->send(another, wiring({}, {}));
  self->send(another, rows(0, 7, 4));  // the test split has 5 samples
  failure = next<failure_msg>("the second assembler's failure");
  CHECK(failure.what.find("row 7 of a batch is not in the test split") != std::string::npos);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "a batch assembler refuses a batch of more rows than its split, or of none") {
  for (const auto& rows : {std::vector<std::int64_t>(6, 0), std::vector<std::int64_t>{}}) {
    auto assembler = system.spawn<batch_assembler_actor>(1, indexed_data(), &devices);
    self->send(assembler, wiring({}, {}));
    micro_tag tag;
    tag.stage = phase::eval;
    // Every row is in the test split (5 samples), but six of them cannot be one batch.
    self->send(assembler, batch_rows_msg{tag, rows, true, me(), "cpu:1", trace_stamp{}});
    auto failure = next<failure_msg>("the assembler's failure");
    CHECK(failure.what.find("a batch of " + std::to_string(rows.size()) +
                            " rows, but the test split has 5 samples") != std::string::npos);
  }
}

TEST_CASE_FIXTURE(loader_fixture,
                  "a batch is gathered when its device has nothing else to run, or when the "
                  "forward that reads it arrives") {
  auto data = indexed_data();
  auto& work = cpu(0).work();
  std::atomic<bool> release{false};
  auto hold = [&] {
    release = false;
    work.submit([&release] {
      while (!release.load())
        std::this_thread::yield();
    });
  };
  // Main-lane work submitted after the gather runs before it.
  hold();
  auto x = gather_rows(data, data->train, {3, 1}, cpu(0), job_label{"load"}, -1);
  bool gathered_before = true;
  auto main = work.submit([&] { gathered_before = x.ready().reached(); });
  release = true;
  main.wait();
  CHECK_FALSE(gathered_before);
  CHECK(samples_of(x) == std::vector<std::int64_t>{3, 1});  // values() waits for it
  // A reader's arrival hurries it ahead of what is submitted after.
  hold();
  auto y = gather_rows(data, data->train, {0, 2, 5}, cpu(0), job_label{"load"}, -1);
  auto read = arrive(y, cpu(0));
  CHECK(read.shares_storage_with(y));  // on its own device: no copy
  gathered_before = false;
  main = work.submit([&] { gathered_before = y.ready().reached(); });
  release = true;
  main.wait();
  CHECK(gathered_before);
  CHECK(samples_of(y) == std::vector<std::int64_t>{0, 2, 5});
}

TEST_CASE_FIXTURE(loader_fixture,
                  "with an ignored label every micro-batch carries the global batch's count of "
                  "the labels not ignored") {
  auto plan = plan_of(2, 2);
  plan.loss.ignore_index = 1;  // labels are i % 3: a third of the samples
  auto actor = spawn(plan, 5, true, plan.total_steps);
  self->send(actor, start_atom::value);
  const auto messages = plan.total_steps * plan.replicas * plan.microbatches;
  std::map<item_key, std::vector<std::int64_t>> batches;
  std::map<std::int64_t, std::int64_t> terms_of_step;
  for (std::int64_t i = 0; i < messages; ++i) {
    auto m = next<activation_msg>("a micro-batch");
    batches[{m.tag.step, m.tag.replica, m.tag.microbatch}] = samples_of(m.x);
  }
  for (std::int64_t i = 0; i < messages; ++i) {
    auto m = next<labels_msg>("a micro-batch's labels");
    auto [it, first] = terms_of_step.emplace(m.tag.step, m.global_terms);
    CHECK(it->second == m.global_terms);  // the same for every micro-batch of the step
  }
  expect_quiet("nothing after the last step");
  finish(actor);
  std::map<std::int64_t, std::int64_t> counted;
  for (const auto& [key, samples] : batches)
    for (auto sample : samples)
      counted[std::get<0>(key)] += sample % loader_classes != 1 ? 1 : 0;
  CHECK(terms_of_step == counted);
  bool varies = false;  // the count is the step's, not a constant
  for (const auto& [step, terms] : counted)
    varies = varies || terms != counted.begin()->second;
  CHECK(varies);
}

TEST_CASE_FIXTURE(loader_fixture,
                  "float targets go to the loss as (b, K) values with K terms a sample") {
  auto data = std::make_shared<dataset_split>(*indexed_data());
  for (auto* part : {&data->train, &data->test}) {
    part->classes = 0;
    part->outputs = 2;
    part->labels.clear();
    for (std::int64_t i = 0; i < part->count; ++i) {
      part->values.push_back(static_cast<float>(i) + 0.5f);
      part->values.push_back(-static_cast<float>(i));
    }
  }
  data_loader_settings s;
  s.data = data;
  s.plan = plan_of(1, 1);
  s.seed = 5;
  s.prefetch = 1;
  s.on = {device_type::cpu, 0};
  s.devices = &devices;
  auto actor = system.spawn<data_loader_actor>(std::move(s));
  self->send(actor, wiring({wire("activations", me(), "layer", 0, 0, "cpu:0"),
                            wire("labels", me(), "loss", 0, 0)},
                           {}));
  self->send(actor, start_atom::value);
  auto batch = next<activation_msg>("a batch");
  auto targets = next<labels_msg>("its targets");
  CHECK(targets.labels.type() == dtype::f32);
  CHECK(targets.labels.shape() == shape_t{8, 2});
  CHECK(targets.global_terms == 16);
  const auto samples = samples_of(batch.x);
  const auto got = values(targets.labels);
  for (std::size_t r = 0; r < samples.size(); ++r) {
    CHECK(got[2 * r] == static_cast<float>(samples[r]) + 0.5f);
    CHECK(got[2 * r + 1] == -static_cast<float>(samples[r]));
  }
  finish(actor);
}
