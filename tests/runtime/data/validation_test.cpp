// validation_test.cpp: [data] validation, a share of the training split held out by a
// permutation keyed by the seed (runtime/data/dataset.hpp hold_out): the two parts are
// disjoint, cover every sample, keep their order and are the same every time, for rows in
// memory and rows in a file alike; a run evaluates the held-out part (and needs no test
// files then), `troupe eval --split validation` gives the run's last evaluation, and a
// checkpoint refuses to be evaluated on another hold-out.
#include <doctest/doctest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/npy.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/data_error_of.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::temp_directory;

namespace {

/// Sample i: features (i, -i), label i % 3.
dataset indexed(std::int64_t count) {
  dataset d;
  d.count = count;
  d.features = 2;
  d.classes = 3;
  for (std::int64_t i = 0; i < count; ++i) {
    d.images.push_back(static_cast<float>(i));
    d.images.push_back(static_cast<float>(-i));
    d.labels.push_back(static_cast<std::int32_t>(i % 3));
  }
  return d;
}

/// Which samples a split holds (its rows' first feature), and checks each row's label.
std::vector<std::int64_t> samples_of(const dataset& d) {
  std::vector<std::int64_t> picked(static_cast<std::size_t>(d.count));
  std::iota(picked.begin(), picked.end(), 0);
  std::vector<float> rows(static_cast<std::size_t>(d.count * 2));
  d.gather(picked.data(), 0, picked.size(), rows.data());
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < d.count; ++i) {
    const auto sample = static_cast<std::int64_t>(rows[static_cast<std::size_t>(2 * i)]);
    CHECK(rows[static_cast<std::size_t>(2 * i + 1)] == -static_cast<float>(sample));
    CHECK(d.labels[static_cast<std::size_t>(i)] == sample % 3);
    out.push_back(sample);
  }
  return out;
}

}  // namespace

TEST_CASE("hold_out splits the samples in two by the seed, in order, in memory or in a file") {
  temp_directory dir{"troupe-hold-out"};
  auto in_memory = indexed(1000);
  std::vector<float> x(in_memory.images.begin(), in_memory.images.end());
  test::write_float_npy(dir / "x.npy", "(1000, 2)", x);
  std::vector<unsigned char> y;
  for (int i = 0; i < 1000; ++i)
    y.push_back(static_cast<unsigned char>(i % 3));
  test::write_test_file(dir / "y.npy", test::npy_file("|u1", "(1000,)", y));
  auto from_file = load_npy(dir / "x.npy", dir / "y.npy", "", "", {}).train;
  REQUIRE(from_file.rows != nullptr);

  std::vector<std::int64_t> first_held;
  for (auto* train : {&in_memory, &from_file}) {
    const auto held = hold_out(*train, 0.1, 42);
    CHECK(held.count == 100);
    CHECK(train->count == 900);
    const auto a = samples_of(*train);
    const auto b = samples_of(held);
    CHECK(std::is_sorted(a.begin(), a.end()));
    CHECK(std::is_sorted(b.begin(), b.end()));
    std::set<std::int64_t> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    CHECK(all.size() == 1000);  // disjoint, and every sample in one of them
    if (first_held.empty())
      first_held = b;
    else
      CHECK(b == first_held);  // the seed alone decides, wherever the rows are
  }
  auto again = indexed(1000);
  CHECK(samples_of(hold_out(again, 0.1, 42)) == first_held);
  auto other = indexed(1000);
  CHECK(samples_of(hold_out(other, 0.1, 43)) != first_held);
  auto tiny = indexed(3);
  CHECK(hold_out(tiny, 0.01, 1).count == 1);  // one each side at least
  CHECK(tiny.count == 2);
}

TEST_CASE("a run with [data] validation evaluates the held-out samples, without test files") {
  temp_directory dir{"troupe-validation-run"};
  std::string x_text, y_text;
  std::vector<float> x;
  std::vector<unsigned char> y;
  for (int i = 0; i < 200; ++i) {
    const float a = static_cast<float>(i % 13) / 13 - 0.5f, b = static_cast<float>(i % 7) / 7;
    x.insert(x.end(), {a, b});
    y.push_back(a + b > 0.2f ? 1 : 0);
  }
  test::write_float_npy(dir / "x.npy", "(200, 2)", x);
  test::write_test_file(dir / "y.npy", test::npy_file("|u1", "(200,)", y));
  const auto text = "[run]\nsteps = 20\nseed = 9\n[data]\nsource = \"npy\"\nfeatures = \"" +
                    dir / "x.npy" + "\"\ntargets = \"" + dir / "y.npy" +
                    "\"\nvalidation = 0.25\nbatch_size = 10\neval_batch_size = 7\n" +
                    test::linear(8) + test::layer("tanh") + test::linear(2) +
                    "[optimizer]\ntype = \"adam\"\nlr = 0.01\n";
  auto config = parse_config(text, "v.toml");
  config.run.checkpoint = dir / "ck";
  const auto metrics = dir / "m.jsonl";
  const auto trained = test::run_ok(config, test::quiet_options(metrics)).outcome;
  CHECK(trained.evaluated == "validation");
  CHECK(trained.test_samples == 50);
  // The same on two replicas: the hold-out is keyed by the seed, not by the wiring.
  CHECK(test::largest_difference(
            test::train_twenty_steps(text),
            test::train_twenty_steps(text + "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                            "data = 2\n")) <= 1e-5);

  auto options = test::quiet_options();
  options.purpose = session_purpose::evaluate;
  options.evaluation = evaluated_split::validation;
  options.resume = dir / "ck";
  const auto evaluated = test::run_ok(config, options).outcome;
  CHECK(evaluated.test_loss == trained.test_loss);
  CHECK(evaluated.test_metrics == trained.test_metrics);
  // No test files: --split test has nothing to evaluate.
  options.evaluation = evaluated_split::test;
  CHECK(test::data_error_of([&] { run_session(config, options); })
            .find("the config names no test split") != std::string::npos);
  // Another share (or seed) would hold out other samples: refused.
  options.evaluation = evaluated_split::validation;
  auto other = config;
  other.data.validation = 0.3;
  CHECK(test::data_error_of([&] { run_session(other, options); })
            .find("was trained holding out [data] validation = 0.25") != std::string::npos);
}
