// evaluate_test.cpp: a session whose purpose is to evaluate a checkpoint (`troupe eval`):
// it gives the loss and metrics the training run's own last evaluation gave, bit for bit on
// the same wiring and within float summation order on any other, on the test or the
// training split; it trains nothing and writes no checkpoint; and `troupe eval` prints it.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::temp_directory;

namespace {

/// The equivalence MLP on `parallel`, with evaluation (10 test samples in batches of 3: the
/// last one partial).
std::string evaluated_config(const std::string& parallel) {
  auto text = test::equivalence_config(parallel);
  text.replace(text.find("evaluate = false"), 16, "evaluate = true");
  return text.insert(text.find("synthetic_train"), "eval_batch_size = 3\n");
}

run_outcome evaluate(const std::string& text, const std::string& checkpoint, bool train = false) {
  auto config = parse_config(text, "e.toml");
  auto options = test::quiet_options();
  options.purpose = session_purpose::evaluate;
  options.evaluation = train ? evaluated_split::train : evaluated_split::automatic;
  options.resume = checkpoint;
  return test::run_ok(config, options).outcome;
}

}  // namespace

TEST_CASE("evaluating a checkpoint gives the run's last evaluation, on any wiring") {
  temp_directory dir{"troupe-evaluate"};
  auto config = parse_config(evaluated_config(""), "e.toml");
  config.run.checkpoint = dir / "ck";
  const auto trained = test::run_ok(config, test::quiet_options()).outcome;
  REQUIRE(trained.steps == 20);
  REQUIRE(trained.test_accuracy >= 0);

  const auto same = evaluate(evaluated_config(""), dir / "ck");
  CHECK(same.steps == 20);  // the checkpoint's step; nothing trained
  CHECK(same.test_samples == 10);
  CHECK(same.test_loss == trained.test_loss);
  CHECK(same.test_metrics == trained.test_metrics);
  // Nothing written: the checkpoint directory holds the one checkpoint still.
  CHECK(std::distance(std::filesystem::directory_iterator(dir / "ck"),
                      std::filesystem::directory_iterator()) == 1);

  for (const char* parallel :
       {"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 2\n"}) {
    CAPTURE(parallel);
    const auto other = evaluate(evaluated_config(parallel), dir / "ck");
    // The rows' losses summed in another order: float rounding of a sum of 10 terms.
    CHECK(other.test_loss == doctest::Approx(trained.test_loss).epsilon(1e-6));
    CHECK(other.test_accuracy == trained.test_accuracy);  // counts: exact
  }

  const auto on_train = evaluate(evaluated_config(""), dir / "ck", true);
  CHECK(on_train.test_samples == 480);  // synthetic_train of equivalence_config
  CHECK(on_train.test_loss != trained.test_loss);
}

TEST_CASE("troupe eval prints a checkpoint's loss and metrics, and refuses what it cannot do") {
  temp_directory dir{"troupe-eval-command"};
  const auto config = dir.write("e.toml", evaluated_config(""));
  const auto trained = troupe::testing::run_troupe("run " + config + " --checkpoint " +
                                                   dir / "ck" + " --metrics '' -q");
  REQUIRE(trained.exit_code == 0);
  const auto json = troupe::testing::run_troupe("eval " + config + " --checkpoint " + dir / "ck" +
                                                " --json");
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  const auto result = nlohmann::json::parse(json.output);
  CHECK(result.at("step") == 20);
  CHECK(result.at("split") == "test");
  CHECK(result.at("samples") == 10);
  CHECK(result.at("accuracy").get<double>() >= 0);
  CHECK(result.at("checkpoint").get<std::string>().find("step-000000020") != std::string::npos);
  const auto line = troupe::testing::run_troupe("eval " + config + " --checkpoint " + dir / "ck");
  CHECK(line.exit_code == 0);
  CHECK(line.output.find("(step 20) on the test split: loss ") != std::string::npos);
  CHECK(troupe::testing::run_troupe("eval " + config).exit_code == 2);
  CHECK(troupe::testing::run_troupe("eval " + config + " --checkpoint " + dir / "ck" +
                                    " --split validation")
            .exit_code == 2);
  const auto missing = troupe::testing::run_troupe("eval " + config + " --checkpoint " +
                                                   dir / "nothing");
  CHECK(missing.exit_code == 2);
}
