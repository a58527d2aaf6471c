// predict_test.cpp: `troupe predict` (actors/tools/predict.hpp): a checkpoint's outputs for
// inputs from a .npy file or a CSV table agree with what the run's own evaluation computed
// on the same rows (the regression's mean squared error, the classifier's accuracy), in any
// batch size; probabilities sum to 1; .npy and CSV outputs hold the same numbers; and what
// cannot be predicted is refused with nothing written.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/tools/predict.hpp"
#include "runtime/data/npy.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::temp_directory;

namespace {

/// 3 features, y = x0 - 2 x1 + sin(x2): train.csv (256 rows) and test.csv (64), the
/// test's features also as tx.npy and without y as inputs.csv.
void write_tables(const temp_directory& dir) {
  auto make = [&](int count, int seed, bool with_y) {
    std::string text = with_y ? "x0,x1,x2,y\n" : "x0,x1,x2\n";
    std::vector<float> x;
    for (int i = 0; i < count; ++i) {
      const float a = static_cast<float>((i * 7 + seed) % 17 - 8) / 8;
      const float b = static_cast<float>((i * 5 + seed) % 13 - 6) / 8;
      const float c = static_cast<float>((i * 3 + seed) % 11 - 5) / 4;
      x.insert(x.end(), {a, b, c});
      text += std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c);
      text += with_y ? "," + std::to_string(a - 2 * b + std::sin(c)) + "\n" : "\n";
    }
    return std::make_pair(text, x);
  };
  dir.write("train.csv", make(256, 1, true).first);
  dir.write("test.csv", make(64, 2, true).first);
  const auto inputs = make(64, 2, false);
  dir.write("inputs.csv", inputs.first);
  test::write_float_npy(dir / "tx.npy", "(64, 3)", inputs.second);
}

std::string regression_config(const temp_directory& dir, bool standard = false) {
  return "[run]\nsteps = 60\nseed = 4\n[data]\n" +
         std::string(standard ? "normalize = \"standard\"\n" : "") +
         "source = \"csv\"\npath = \"" + dir / "train.csv" +
         "\"\ntest_path = \"" + dir / "test.csv" + "\"\ntarget = \"y\"\nbatch_size = 32\n"
         "eval_batch_size = 64\n[model]\nloss = \"mse\"\n" + test::linear(16) +
         test::layer("tanh") + test::linear(1) + "[optimizer]\ntype = \"adam\"\nlr = 0.01\n";
}

std::vector<float> floats_of_npy(const std::string& path) {
  const auto header = read_npy_header(path);
  std::ifstream in(path, std::ios::binary);
  in.seekg(header.data_offset);
  std::vector<float> out(static_cast<std::size_t>(header.elements));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  return out;
}

}  // namespace

TEST_CASE("predict gives the outputs the run's own evaluation scored, from .npy or CSV") {
  temp_directory dir{"troupe-predict"};
  write_tables(dir);
  // Standardised: the checkpoint's manifest records the training split's statistics, and
  // predict normalises the inputs with them.
  for (const bool standard : {false, true}) {
  CAPTURE(standard);
  const std::string ck = dir / (standard ? "ck_standard" : "ck");
  auto config = parse_config(regression_config(dir, standard), "r.toml");
  config.run.checkpoint = ck;
  const auto trained = test::run_ok(config, test::quiet_options()).outcome;

  prediction_request request;
  request.checkpoint = ck;
  request.input = dir / "tx.npy";
  request.output = dir / "out.npy";
  const auto summary = predict(config, request, stdout);
  CHECK(summary.rows == 64);
  CHECK(summary.width == 1);
  CHECK(summary.step == 60);
  const auto predicted = floats_of_npy(dir / "out.npy");
  REQUIRE(predicted.size() == 64);
  // The test targets, recomputed: the mean squared error of the predictions is the run's
  // test loss (the same forward in float; the sums in another order: 1e-5 relative).
  double squares = 0;
  std::istringstream table{[&] {
    std::ifstream in(dir / "test.csv");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }()};
  std::string line;
  std::getline(table, line);  // the header
  for (std::size_t i = 0; std::getline(table, line); ++i) {
    const double y = std::stod(line.substr(line.rfind(',') + 1));
    squares += (predicted[i] - y) * (predicted[i] - y);
  }
  CHECK(squares / 64 == doctest::Approx(trained.test_loss).epsilon(1e-5));

  // The same rows from a CSV without its target column, in batches of 5, to stdout's form.
  request.input = dir / "inputs.csv";
  request.output = dir / "out.csv";
  request.batch = 5;
  predict(config, request, stdout);
  std::ifstream csv(dir / "out.csv");
  std::getline(csv, line);
  CHECK(line == "y");  // the config's target column names the output
  for (std::size_t i = 0; std::getline(csv, line); ++i)
    CHECK(std::stof(line) == doctest::Approx(predicted[i]).epsilon(1e-6));
  }
}

TEST_CASE("a classifier's predicted probabilities sum to 1 and score the run's test accuracy") {
  temp_directory dir{"troupe-predict-classes"};
  auto text = test::equivalence_config("");
  text.replace(text.find("evaluate = false"), 16, "evaluate = true");
  auto config = parse_config(text, "c.toml");
  config.run.checkpoint = dir / "ck";
  const auto trained = test::run_ok(config, test::quiet_options()).outcome;
  // The test split's rows as a .npy, exactly as the loader holds them.
  const auto data = load_session_data(config);
  const auto& test_split = data->test;
  test::write_float_npy(dir / "x.npy", "(10, 20)",
                        std::vector<float>(test_split.images.begin(), test_split.images.end()));
  prediction_request request;
  request.checkpoint = dir / "ck";
  request.input = dir / "x.npy";
  request.output = dir / "p.npy";
  request.softmax = true;
  predict(config, request, stdout);
  const auto p = floats_of_npy(dir / "p.npy");
  REQUIRE(p.size() == 50);
  int right = 0;
  for (int r = 0; r < 10; ++r) {
    double sum = 0;
    int best = 0;
    for (int c = 0; c < 5; ++c) {
      sum += p[r * 5 + c];
      best = p[r * 5 + c] > p[r * 5 + best] ? c : best;
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    right += best == test_split.labels[static_cast<std::size_t>(r)] ? 1 : 0;
  }
  CHECK(right / 10.0 == trained.test_accuracy);
}

TEST_CASE("troupe predict refuses what it cannot predict, writing nothing") {
  temp_directory dir{"troupe-predict-refused"};
  write_tables(dir);
  const auto config = dir.write("r.toml", regression_config(dir));
  REQUIRE(troupe::testing::run_troupe("run " + config + " --checkpoint " + dir / "ck" +
                                      " --metrics '' -q")
              .exit_code == 0);
  const auto base = "predict " + dir / "ck" + " --config " + config;
  auto softmax = troupe::testing::run_troupe(base + " --input " + dir / "tx.npy" + " --softmax");
  CHECK(softmax.exit_code == 2);
  CHECK(softmax.output.find("--softmax needs a loss of class labels") != std::string::npos);
  // Inputs of 2 features where the model reads 3: the checkpoint's weights do not fit.
  test::write_float_npy(dir / "narrow.npy", "(2, 2)", {1, 2, 3, 4});
  const auto narrow = troupe::testing::run_troupe(base + " --input " + dir / "narrow.npy" +
                                                  " -o " + dir / "never.npy");
  CHECK(narrow.exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "never.npy"));
  CHECK(troupe::testing::run_troupe(base).exit_code == 2);  // no --input
  const auto stdout_csv = troupe::testing::run_troupe(base + " --input " + dir / "inputs.csv");
  CHECK(stdout_csv.exit_code == 0);
  CHECK(stdout_csv.output.rfind("y\n", 0) == 0);
}
