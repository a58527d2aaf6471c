// own_data_examples_test.cpp: the shipped examples of examples/own_data/ do what their
// comments say: make_data.py writes scikit-learn's bundled digits, breast cancer and
// diabetes data (Debian's python3-sklearn, installed by scripts/install-deps.sh) as .npy
// files and CSV tables, and each config trains on them with `troupe run` to its stated
// quality: digits >= 95% test accuracy (softmax_xent on .npy; and as a PNG folder with a
// conv net, then `troupe predict` on a folder of its images), breast cancer >= 95%
// (bce_with_logits on CSV, standardised), diabetes a test RMSE <= 60 (mse on CSV; predicting
// the mean scores about 77). Then `troupe predict` on the diabetes test table.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"

namespace fs = std::filesystem;

namespace {

/// The last evaluation line of a metrics file.
nlohmann::json last_evaluation(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("test_loss"))
      last = record;
  }
  return last;
}

}  // namespace

TEST_CASE("the own-data examples train scikit-learn's data sets to their stated quality") {
  troupe::test::temp_directory dir{"troupe-own-data"};
  const std::string examples = std::string{TROUPE_SOURCE_DIR} + "/examples/own_data";
  const auto made = troupe::testing::run_shell("/usr/bin/python3 " + examples + "/make_data.py " +
                                               dir / "data" + " 2>&1");
  INFO(made.output);
  REQUIRE_MESSAGE(made.exit_code == 0,
                  "make_data.py needs Debian's python3-sklearn (scripts/install-deps.sh)");
  struct example {
    const char* name;
    const char* metric;
    double bound;  // accuracy at least, or RMSE at most
  };
  for (const auto& e : {example{"digits", "test_accuracy", 0.95},
                        example{"digits_png", "test_accuracy", 0.95},
                        example{"breast_cancer", "test_accuracy", 0.95},
                        example{"diabetes", "test_rmse", 60.0}}) {
    CAPTURE(e.name);
    const auto config = dir / (std::string(e.name) + ".toml");
    fs::copy_file(examples + "/" + e.name + ".toml", config);
    const auto metrics = dir / (std::string(e.name) + ".jsonl");
    const auto run = troupe::testing::run_troupe("run " + config + " --metrics " + metrics +
                                                 " --checkpoint " + dir / e.name + " -q");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto result = last_evaluation(metrics);
    REQUIRE(result.contains(e.metric));
    const double value = result.at(e.metric).get<double>();
    INFO(e.metric << " = " << value);
    if (std::string(e.metric) == "test_rmse")
      CHECK(value <= e.bound);
    else
      CHECK(value >= e.bound);
  }
  // The diabetes test table (its target column too, which predict leaves out): 89 rows.
  const auto predicted = troupe::testing::run_troupe(
      "predict " + dir / "diabetes" + " --config " + dir / "diabetes.toml" + " --input " +
      dir / "data/diabetes/test.csv" + " -o " + dir / "progression.csv");
  INFO(predicted.output);
  CHECK(predicted.exit_code == 0);
  CHECK(predicted.output.find("89 rows of 1 outputs") != std::string::npos);
  // The test images of one digit, named by their class folders: nearly all called 7.
  const auto sevens = troupe::testing::run_troupe(
      "predict " + dir / "digits_png" + " --config " + dir / "digits_png.toml" + " --input " +
      dir / "data/digits_png/test/7");
  INFO(sevens.output);
  CHECK(sevens.exit_code == 0);
  std::istringstream lines(sevens.output);
  std::string line;
  int images = 0, called_seven = 0;
  while (std::getline(lines, line))
    if (line.find("/test/7/") != std::string::npos) {
      ++images;
      called_seven += line.find(".png,7,7,") != std::string::npos;
    }
  CHECK(images > 20);
  CHECK(called_seven >= images * 9 / 10);
}
