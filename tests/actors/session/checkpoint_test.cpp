// Checkpoints through whole runs (DESIGN.md "Checkpoints"): a run resumed at step k ends
// bit for bit where the uninterrupted run ends, on every shipped wiring; a checkpoint of
// one wiring resumes on the others within the equivalence tolerance; a checkpoint that
// does not fit is refused before anything starts; old checkpoints are pruned.
//
// The shipped configs run on the real Fashion-MNIST data for a handful of steps (loading
// it takes ~0.2 s a run); evaluation is off, so a run is its training steps only.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/manifest.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t total_steps = 12;
constexpr std::int64_t resumed_at = 6;

const char* const shipped[] = {
    "fashion_mlp",          "fashion_mlp_dp2",       "fashion_mlp_dp2_pp2", "fashion_mlp_mp2",
    "fashion_mlp_pp2_1f1b", "fashion_mlp_pp2_gpipe", "fashion_mlp_pp2_zbh1",
    "fashion_mlp_pp2_interleaved", "fashion_cnn",         "fashion_cnn_pp2",
    "char_lm_pp2"};  // of the language models one, for time (language_model_test.cpp plans all)

// Adam's eps for comparing wirings by tolerance (the rewiring test below says why); 0
// below: the config's own.
constexpr double comparable_eps = 1e-6;

run_config shipped_config(const std::string& name, std::int64_t steps,
                          const std::string& checkpoints = "", double adam_eps = 0) {
  auto config = load_config(std::string{TROUPE_SOURCE_DIR} + "/config/" + name + ".toml");
  if (adam_eps > 0)
    config.optimizer.eps = adam_eps;
  config.run.steps = steps;
  config.run.evaluate = false;
  config.run.checkpoint = checkpoints;
  return config;
}

using parameters = std::vector<std::vector<std::vector<float>>>;

parameters train_checkpointed(const run_config& config, const std::string& resume = "") {
  auto options = test::quiet_options();
  options.keep_parameters = true;
  options.resume = resume;
  auto result = test::run_ok(config, options);
  REQUIRE(result.outcome.steps == config.run.steps);
  return result.parameters;
}

/// A complete checkpoint of `config` after `resumed_at` steps, in `directory`.
std::string checkpoint_after_first_part(const std::string& name, const test::temp_directory& d,
                                        double adam_eps = 0) {
  const auto root = d.file("checkpoints");
  train_checkpointed(shipped_config(name, resumed_at, root, adam_eps));
  auto latest = latest_checkpoint(root);
  REQUIRE(latest);
  REQUIRE(latest->step == resumed_at);
  return latest->path;
}

}  // namespace

TEST_CASE(
    "k steps, then a resume to N, end bit for bit where N straight steps end, on every "
    "shipped wiring") {
  for (const std::string name : shipped) {
    INFO(name);
    test::temp_directory d{"troupe-resume"};
    const auto straight = train_checkpointed(shipped_config(name, total_steps));
    const auto checkpoint = checkpoint_after_first_part(name, d);
    const auto resumed = train_checkpointed(shipped_config(name, total_steps), checkpoint);
    CHECK(resumed == straight);
    // Without the checkpoint the second part would start from the seed instead.
    CHECK(train_checkpointed(shipped_config(name, total_steps - resumed_at)) != straight);
  }
}

TEST_CASE(
    "a checkpoint of the sharded DP2 run resumes on every other wiring as if it had run "
    "all along") {
  // Tolerance: the equivalence test's (tests/actors/session/equivalence_test.cpp): the wirings
  // differ in float summation order only, ~1e-7 per gradient, far below 1e-5 after 12 steps.
  // With Adam's eps at 1e-6, not the shipped 1e-8: an element whose gradient is at eps's
  // scale (a pixel almost always 0) moves by a fraction of the learning rate that its
  // gradient's last bits decide (Note [the reference's micro-batches] in actors/tools/verify.cpp);
  // on an Intel Xeon one weight of layer 0 then differed by 1.57e-5 of the layer's largest
  // on every wiring, 5.9e-7 with eps 1e-6 (1.7e-7 with SGD).
  test::temp_directory d{"troupe-rewire"};
  const auto checkpoint = checkpoint_after_first_part("fashion_mlp_dp2", d, comparable_eps);
  const auto single =
      train_checkpointed(shipped_config("fashion_mlp", total_steps, "", comparable_eps));
  for (const std::string name : shipped) {
    if (name.rfind("fashion_mlp", 0) != 0)
      continue;  // another model (the conv nets, the language models): its own checkpoints only
    INFO(name);
    const auto resumed =
        train_checkpointed(shipped_config(name, total_steps, "", comparable_eps), checkpoint);
    double worst = 0;
    for (const auto& difference : compare_parameters(single, resumed))
      worst = std::max(worst, difference.relative);
    CHECK(worst <= 1e-5);
  }
}

TEST_CASE("the sharded optimizer writes each tensor once, in pieces the replicas own") {
  test::temp_directory d{"troupe-pieces"};
  const auto checkpoint = checkpoint_after_first_part("fashion_mlp_dp2", d);
  const auto manifest = verify_checkpoint(checkpoint);
  CHECK(manifest.shards.size() == 6);  // 3 parameterised layers x 2 replicas
  std::set<std::string> names;
  for (const auto& shard : manifest.shards)
    for (const auto& name : shard.tensors) {
      CHECK(name.find('@') != std::string::npos);  // pieces, not whole tensors
      CHECK(names.insert(name).second);            // nothing twice
    }
}

TEST_CASE(
    "a checkpoint that does not fit is refused before anything starts, saying what "
    "differs") {
  test::temp_directory d{"troupe-refuse"};
  const auto checkpoint = checkpoint_after_first_part("fashion_mlp", d);
  auto refused = [&](const run_config& config, const std::string& path, const char* message) {
    auto options = test::quiet_options();
    options.resume = path;
    CHECK_THROWS_WITH_AS(run_session(config, options), doctest::Contains(message), data_error);
  };
  auto config = shipped_config("fashion_mlp", total_steps);
  SUBCASE("another model") {
    auto other = config;
    other.model.layers[2].settings.at("out").value = std::int64_t{128};
    refused(other, checkpoint,
            "does not fit the model: layer 2 parameter 'weight' has shape "
            "(128, 256), the checkpoint's (256, 256)");
  }
  SUBCASE("another optimizer's state") {
    // With momentum or without (SGD without keeps no state: Adam's was dropped silently).
    for (double momentum : {0.9, 0.0}) {
      auto sgd = config;
      sgd.optimizer.type = optimizer_type::sgd;
      sgd.optimizer.momentum = momentum;
      refused(sgd, checkpoint,
              "holds the state of the optimizer 'adam', and the config trains with sgd; resume "
              "with that optimizer, or start from its weights alone: troupe export");
    }
    // AdamW keeps Adam's moments: it resumes.
    auto adamw = config;
    adamw.optimizer.type = optimizer_type::adamw;
    auto options = test::quiet_options();
    options.resume = checkpoint;
    CHECK(run_session(adamw, options).outcome.exit_code == exit_code::ok);
  }
  SUBCASE("a corrupted shard") {
    const auto shard = checkpoint + "/layer-2.safetensors";
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-10, std::ios::end);
    file.put('\x7f');
    file.close();
    refused(config, checkpoint, "layer-2.safetensors");
  }
  SUBCASE("a truncated shard") {
    fs::resize_file(checkpoint + "/layer-4.safetensors", 100);
    refused(config, checkpoint, "layer-4.safetensors");
  }
  SUBCASE("a missing shard") {
    fs::remove(checkpoint + "/layer-0.safetensors");
    refused(config, checkpoint, "layer-0.safetensors");
  }
  SUBCASE("a newer format version") {
    const auto path = checkpoint + "/manifest.json";
    auto manifest = read_manifest(path);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("\"format_version\": 1");
    REQUIRE(at != std::string::npos);
    text.replace(at, 19, "\"format_version\": 7");
    std::ofstream(path) << text;
    refused(config, checkpoint, "written by a newer troupe");
  }
  SUBCASE("a run that has no step left") {
    refused(shipped_config("fashion_mlp", resumed_at), checkpoint, "nothing is left to train");
  }
}

TEST_CASE("a run keeps the newest checkpoint_keep checkpoints, and the metrics name each") {
  test::temp_directory d{"troupe-keep"};
  auto config = shipped_config("fashion_mlp", 10, d.file("checkpoints"));
  config.run.checkpoint_every = 2;
  config.run.checkpoint_keep = 2;
  auto options = test::quiet_options(d.file("metrics.jsonl"));
  test::run_ok(config, options);
  std::vector<std::int64_t> steps;
  for (const auto& c : list_checkpoints(d.file("checkpoints")))
    steps.push_back(c.step);
  CHECK(steps == std::vector<std::int64_t>{8, 10});
  std::ifstream metrics(d.file("metrics.jsonl"));
  std::string text((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  for (int step : {2, 4, 6, 8, 10})
    CHECK(text.find("\"event\":\"checkpoint\",\"path\":\"" + d.file("checkpoints") + "/" +
                    checkpoint_directory_name(step) + "\",\"steps\":" + std::to_string(step)) !=
          std::string::npos);
}

TEST_CASE("a resume skips a newer checkpoint that a crash left without its manifest") {
  test::temp_directory d{"troupe-torn"};
  const auto root = d.file("checkpoints");
  const auto checkpoint = checkpoint_after_first_part("fashion_mlp", d);
  // What a crash while writing step 9 leaves: its directory and a partial shard, no manifest.
  const auto torn = make_checkpoint_directory(root, 9);
  std::ofstream(torn + "/layer-0.safetensors") << "half a shard";
  const auto straight = train_checkpointed(shipped_config("fashion_mlp", total_steps));
  CHECK(train_checkpointed(shipped_config("fashion_mlp", total_steps), root) == straight);
}

TEST_CASE("checkpoint_keep_best also keeps the checkpoint of the best evaluation") {
  // Synthetic data, 8 steps an epoch, 5 epochs: an evaluation (and, with keep_best, a
  // checkpoint) after every epoch; only the newest one is kept besides the best.
  test::temp_directory d{"troupe-best"};
  auto config = parse_config(R"(
[run]
epochs = 5
seed = 3
)" + test::data_section({32, 256, 200, 12, 4}) +
                                 test::linear(8) + test::layer("tanh") + test::linear(4) + R"(
[optimizer]
type = "sgd"
lr = 0.5
)",
                             "best.toml");
  config.run.checkpoint = d.file("checkpoints");
  config.run.checkpoint_keep = 1;
  config.run.checkpoint_keep_best = true;
  test::run_ok(config, test::quiet_options(d.file("metrics.jsonl")));
  // The best evaluation, as the metrics report it (the first of equal ones).
  std::ifstream metrics(d.file("metrics.jsonl"));
  std::string line;
  std::int64_t best_steps = -1;
  double best = -1;
  while (std::getline(metrics, line)) {
    auto record = nlohmann::json::parse(line);
    if (!record.contains("test_accuracy") || record.contains("event"))
      continue;
    if (record["test_accuracy"].get<double>() > best) {
      best = record["test_accuracy"].get<double>();
      best_steps = (record["epoch"].get<std::int64_t>() + 1) * 8;
    }
  }
  REQUIRE(best_steps > 0);
  std::set<std::int64_t> kept;
  for (const auto& c : list_checkpoints(d.file("checkpoints")))
    kept.insert(c.step);
  CHECK(kept == std::set<std::int64_t>{best_steps, 40});
}
