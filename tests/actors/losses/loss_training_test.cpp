// loss_training_test.cpp: whole runs with the loss kinds of actors/losses/: a regression on
// .npy float targets learns its function and reports RMSE and MAE (in the metrics file
// too); every loss kind trains the single device's parameters on every wiring (DESIGN.md
// "Equivalence"), an ignored label included (the loader counts the global batch's terms);
// and a loss that does not fit the data or the model is refused before anything runs.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/actors/equivalence_support.hpp"
#include "tests/jsonl.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr int loss_features = 6;
constexpr int outputs = 2;

/// A regression problem in `dir`: x uniform in [-1, 1)^6, y = (sin(x0 + x1) + x2 x3,
/// x4 - 0.5 x5), train (x.npy, y.npy) and test (tx.npy, ty.npy); with `binary`, each target
/// becomes y > 0 (0 or 1, for bce_with_logits). Returns the RMSE of predicting the training
/// targets' mean on the test set (what a model that learnt nothing scores).
double write_regression(const temp_directory& dir, bool binary = false) {
  std::mt19937 engine{7};
  std::uniform_real_distribution<float> uniform{-1.0f, 1.0f};
  auto make = [&](int count, const std::string& x_name, const std::string& y_name) {
    std::vector<float> x(static_cast<std::size_t>(count * loss_features));
    std::vector<float> y(static_cast<std::size_t>(count * outputs));
    for (auto& v : x)
      v = uniform(engine);
    for (int i = 0; i < count; ++i) {
      const float* r = x.data() + i * loss_features;
      y[i * outputs] = std::sin(r[0] + r[1]) + r[2] * r[3];
      y[i * outputs + 1] = r[4] - 0.5f * r[5];
      if (binary)
        for (int k = 0; k < outputs; ++k)
          y[i * outputs + k] = y[i * outputs + k] > 0 ? 1.0f : 0.0f;
    }
    const auto n = std::to_string(count);
    write_float_npy(dir / x_name, "(" + n + ", " + std::to_string(loss_features) + ")", x);
    write_float_npy(dir / y_name, "(" + n + ", " + std::to_string(outputs) + ")", y);
    return y;
  };
  const auto train = make(1024, "x.npy", "y.npy");
  const auto test = make(256, "tx.npy", "ty.npy");
  double mean[outputs] = {};
  for (std::size_t i = 0; i < train.size(); ++i)
    mean[i % outputs] += train[i] / (train.size() / outputs);
  double squares = 0;
  for (std::size_t i = 0; i < test.size(); ++i)
    squares += (test[i] - mean[i % outputs]) * (test[i] - mean[i % outputs]);
  return std::sqrt(squares / static_cast<double>(test.size()));
}

/// A run on write_regression's files with `loss` ([model] loss's value), `steps` steps.
std::string regression_config(const temp_directory& dir, const std::string& loss,
                              std::int64_t steps, const std::string& parallel = "") {
  return "[run]\nsteps = " + std::to_string(steps) + "\nseed = 5\n" +
         "[data]\nsource = \"npy\"\nbatch_size = 32\neval_batch_size = 100\n" +
         "features = \"" + dir / "x.npy" + "\"\ntargets = \"" + dir / "y.npy" + "\"\n" +
         "test_features = \"" + dir / "tx.npy" + "\"\ntest_targets = \"" + dir / "ty.npy" +
         "\"\n[model]\nloss = " + loss + "\n" + linear(32) + test::layer("tanh") + linear(16) +
         test::layer("tanh") + linear(outputs) + "[optimizer]\ntype = \"adam\"\nlr = 0.01\n" + parallel;
}

}  // namespace

TEST_CASE("a regression on .npy float targets learns with mse and reports RMSE and MAE") {
  temp_directory dir{"troupe-regression"};
  const double baseline = write_regression(dir);
  const auto metrics = dir / "metrics.jsonl";
  auto result = run_ok(parse_config(regression_config(dir, "\"mse\"", 600), "r.toml"),
                       quiet_options(metrics));
  const auto& test = result.outcome.test_metrics;
  REQUIRE(test.size() == 2);
  CHECK(test[0].first == "rmse");
  CHECK(test[1].first == "mae");
  CHECK(result.outcome.test_accuracy == -1);  // a regression has none
  // The mean loss is the mean square error over every element: RMSE squared.
  CHECK(result.outcome.test_loss == doctest::Approx(test[0].second * test[0].second));
  CHECK(test[1].second <= test[0].second);  // MAE <= RMSE always
  // Predicting the mean scores `baseline` (~0.6); 600 steps of a small MLP learn the smooth
  // function to a tenth of that (measured: about 0.03).
  INFO("test RMSE " << test[0].second << ", baseline " << baseline);
  CHECK(test[0].second < 0.1 * baseline);
  std::ifstream in{metrics};
  const auto lines = read_jsonl(in);
  REQUIRE(lines.size() > 2);
  CHECK(lines.front().contains("rmse"));
  CHECK(lines.front().contains("mae"));
  CHECK_FALSE(lines.front().contains("accuracy"));
  bool evaluated = false;
  for (const auto& line : lines)
    if (line.contains("test_loss")) {
      evaluated = true;
      CHECK(line.contains("test_rmse"));
      CHECK(line.contains("test_mae"));
    }
  CHECK(evaluated);
}

TEST_CASE("every loss kind trains the single device's parameters on every wiring") {
  temp_directory dir{"troupe-loss-wirings"};
  write_regression(dir);
  temp_directory binary_dir{"troupe-loss-wirings-binary"};
  write_regression(binary_dir, true);
  struct loss_case {
    const char* loss;
    const temp_directory* data;  // null: the synthetic classes of equivalence_config
  };
  const loss_case cases[] = {
      {"\"mse\"", &dir},
      {"\"l1\"", &dir},
      {"{ type = \"huber\", delta = 0.25 }", &dir},
      {"\"bce_with_logits\"", &binary_dir},
      // Class 2 of 5 ignored: a fifth of each batch, a different count every step, split
      // unevenly between replicas and micro-batches.
      {"{ type = \"softmax_xent\", label_smoothing = 0.1, ignore_index = 2 }", nullptr},
  };
  const char* wirings[] = {
      "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n",
      "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\n"
      "schedule = \"1f1b\"\n",
      "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nbalance = [1, 3]\n",
  };
  for (const auto& c : cases) {
    CAPTURE(c.loss);
    auto text_of = [&](const std::string& parallel) {
      if (c.data != nullptr)
        return regression_config(*c.data, c.loss, 20, parallel);
      std::string text = equivalence_config(parallel);
      return text.insert(text.find("[[model.layers]]"), std::string("[model]\nloss = ") +
                                                             c.loss + "\n");
    };
    const auto single = train_twenty_steps(text_of(""));
    for (const auto* parallel : wirings) {
      CAPTURE(parallel);
      // Float summation order only (DESIGN.md): 1e-5 relative after 20 steps.
      CHECK(largest_difference(single, train_twenty_steps(text_of(parallel))) <= 1e-5);
    }
  }
}

TEST_CASE("a loss that does not fit the data or the model is refused before the run") {
  temp_directory dir{"troupe-loss-refused"};
  write_regression(dir);
  // Float targets, a loss for class labels: the targets file is not read as labels.
  CHECK_THROWS_WITH_AS(
      run_session(parse_config(regression_config(dir, "\"softmax_xent\"", 5), "r.toml"),
                  quiet_options()),
      doctest::Contains("one class label a sample (K float targets a sample are for a loss "
                        "such as \"mse\""),
      data_error);
  // Class labels, a loss for float targets.
  auto classes = equivalence_config("");
  classes.insert(classes.find("[[model.layers]]"), "[model]\nloss = \"mse\"\n");
  check_refused(parse_config(classes, "e.toml"),
                "[model] loss = \"mse\" compares float targets, but [data] source = "
                "\"synthetic\" gives class labels");
  // A model whose output is not one value a target.
  auto wide = regression_config(dir, "\"mse\"", 5);
  wide.replace(wide.rfind("out = 2"), 7, "out = 3");
  check_refused(parse_config(wide, "r.toml"), "one value per target of a sample");
  // An unknown loss, with the nearest name.
  check_refused(parse_config(regression_config(dir, "\"huberr\"", 5), "r.toml"),
                "unknown loss 'huberr'; did you mean 'huber'?");
}
