// language_model_test.cpp: a small character-level transformer on a text source, end to
// end: it learns a text it can learn (validation loss far below a uniform guess), writes
// its vocabulary next to the metrics, prints a sample of its own text, computes the same
// under data and pipeline parallelism (its residual wire across the cut), and refuses an
// embedding that does not cover the text's tokens.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "actors/tools/predict.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/data/text.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

// 40 fortunes of one repeating line: tokens "\n" and a..h, 9 in all.
std::string write_text(const test::temp_directory& dir) {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += (i ? "%\n" : "") + std::string("abcdefghabcdefghabcdefgh\n");
  return dir.write("lines", text);
}

std::string lm_config(const std::string& text, const std::string& run, const std::string& parallel,
                      std::int64_t vocab = 9,
                      const std::string& optimizer = "type = \"adam\"\nlr = 0.01\n") {
  return "[run]\nseed = 4\n" + run + "\n[data]\nsource = \"text\"\npath = \"" + text +
         "\"\ncontext = 8\nbatch_size = 16\neval_batch_size = 16\n\n" +
         test::layer("embedding", "name = \"x\"\nvocab = " + std::to_string(vocab) +
                                      "\ndim = 16\n") +
         test::layer("layer_norm") + test::layer("attention", "name = \"a\"\nheads = 2\n") +
         test::layer("add", "inputs = [\"x\", \"a\"]\n") + test::linear(9) +
         "\n[optimizer]\n" + optimizer + parallel;
}

/// The text's two parts as token files of its vocabulary's ids (uint16, nanoGPT's layout),
/// and the [data] table that trains on them.
std::string write_token_files(const test::temp_directory& dir, const std::string& text) {
  const auto corpus = read_text_corpus(text, 10, 8);
  auto write = [&](const std::string& name, const std::string& part) {
    std::ofstream out(dir / name, std::ios::binary);
    for (unsigned char c : part) {
      const auto id = static_cast<std::uint16_t>(corpus.vocabulary.find(static_cast<char>(c)));
      out.write(reinterpret_cast<const char*>(&id), sizeof(id));
    }
  };
  write("train.bin", corpus.train);
  write("val.bin", corpus.validation);
  return "source = \"tokens\"\npath = \"" + dir / "train.bin" + "\"\ntest_path = \"" +
         dir / "val.bin" + "\"\nvocab = " + std::to_string(corpus.vocabulary.size()) + "\n";
}

/// lm_config with its [data] source replaced by `data`'s keys.
std::string with_data(std::string config, const std::string& data) {
  const auto from = config.find("source = ");
  const auto to = config.find("context = ");
  return config.replace(from, to - from, data);
}

}  // namespace

TEST_CASE("a token file trains as the text it was made from: the same windows, the same steps") {
  const test::temp_directory dir{"troupe-lm"};
  const auto text = write_text(dir);
  const auto data = write_token_files(dir, text);
  auto train = [&](const std::string& config_text) {
    auto config = parse_config(config_text, "lm.toml");
    auto options = test::quiet_options();
    options.keep_parameters = true;
    return test::run_ok(config, options);
  };
  const auto base = lm_config(text, "steps = 20\n", "");
  const auto from_text = train(base);
  const auto tiled = train(with_data(base, data + "windows = \"tiled\"\n"));
  // Bit for bit: the same ids as floats, the same labels, the same order.
  for (const auto& d : compare_parameters(from_text.parameters, tiled.parameters))
    CHECK(d.relative == 0);
  CHECK(tiled.outcome.test_loss == from_text.outcome.test_loss);
  // troupe predict reads a token file as the config's windows: logits a position.
  const auto with_checkpoint = with_data(
      lm_config(text, "steps = 4\ncheckpoint = \"" + dir / "ck" + "\"\n", ""), data);
  train(with_checkpoint);
  prediction_request request;
  request.checkpoint = dir / "ck";
  request.input = dir / "val.bin";
  request.output = dir / "logits.npy";
  const auto predicted = predict(parse_config(with_checkpoint, "lm.toml"), request, stdout);
  const auto val_ids = static_cast<std::int64_t>(std::filesystem::file_size(dir / "val.bin") / 2);
  CHECK(predicted.rows == (val_ids - 1) / 8);
  CHECK(predicted.width == 8 * 9);
  // nanoGPT's random windows learn it too, and compute the same on two replicas.
  auto config = lm_config(text, "steps = 60\n", "");
  const auto random = train(with_data(config, data));
  CHECK(random.outcome.test_loss < 0.3);
  CHECK(random.outcome.test_accuracy > 0.9);
  const auto short_run = lm_config(text, "steps = 20\nevaluate = false\n", "", 9,
                                   "type = \"adamw\"\nlr = 0.01\n");
  const auto single = train(with_data(short_run, data)).parameters;
  const auto dp2 = train(with_data(short_run + "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                               "data = 2\naveraging = \"ring\"\n",
                                   data)).parameters;
  double difference = 0;
  for (const auto& d : compare_parameters(single, dp2))
    difference = std::max(difference, d.relative);
  CHECK(difference <= 1e-5);
}

TEST_CASE("a token config without a test file or a validation share, or with shuffle off, is refused") {
  const test::temp_directory dir{"troupe-lm"};
  const auto text = write_text(dir);
  const auto data = write_token_files(dir, text);
  const auto base = lm_config(text, "steps = 1\n", "");
  const auto no_test = data.substr(0, data.find("test_path")) + data.substr(data.find("vocab"));
  CHECK_THROWS_WITH_AS(parse_config(with_data(base, no_test), "lm.toml"),
                       doctest::Contains("needs test_path (a token file to evaluate on) or [data] "
                                         "validation"),
                       config_error);
  CHECK_NOTHROW(prepare_session(parse_config(with_data(base, no_test + "validation = 0.1\n"), "lm.toml")));
  CHECK_THROWS_WITH_AS(parse_config(with_data(base, data + "shuffle = false\n"), "lm.toml"),
                       doctest::Contains("set windows = \"tiled\""), config_error);
  CHECK_THROWS_WITH_AS(parse_config(with_data(base, data + "dtype = \"int8\"\n"), "lm.toml"),
                       doctest::Contains("unknown token type 'int8'"), config_error);
  const auto nowhere = "source = \"tokens\"\npath = \"nowhere.bin\"\n" + data.substr(data.find("test_path"));
  CHECK_THROWS_WITH_AS(parse_config(with_data(base, nowhere), "lm.toml"),
                       doctest::Contains("is not a file"), config_error);
  // A vocabulary larger than the embedding's: named at the layer.
  const auto wide = data.substr(0, data.find("vocab")) + "vocab = 12\n";
  CHECK_THROWS_WITH_AS(prepare_session(parse_config(with_data(base, wide), "lm.toml")),
                       doctest::Contains("reads token ids below 9, and the vocabulary has 12 ids"),
                       config_error);
}

TEST_CASE("a character-level transformer learns a text, keeps its vocabulary and writes text") {
  const test::temp_directory dir{"troupe-lm"};
  const auto text = write_text(dir);
  const auto metrics = dir / "lm.jsonl";
  auto config = parse_config(lm_config(text, "steps = 60\n", ""), "lm.toml");
  auto options = test::quiet_options();
  options.metrics_path = metrics;
  options.sample_length = 300;
  const auto result = test::run_ok(config, options);
  // Uniform over 9 tokens is ln 9 = 2.2 per character; the line is all but certain.
  CHECK(result.outcome.test_loss < 0.3);
  CHECK(result.outcome.test_accuracy > 0.9);
  REQUIRE(result.sample.size() == 300);
  CHECK(result.sample.find_first_not_of("\nabcdefgh") == std::string::npos);
  CHECK(result.sample.find("abcdefgh") != std::string::npos);
  std::ifstream vocabulary(dir / "lm.vocab.json");
  REQUIRE(vocabulary.good());
  const auto json = nlohmann::json::parse(vocabulary);
  CHECK(json.at("size") == 9);
  CHECK(json.at("vocabulary") == nlohmann::json::array({10, 97, 98, 99, 100, 101, 102, 103, 104}));
}

TEST_CASE("a language model computes the same under data and pipeline parallelism") {
  const test::temp_directory dir{"troupe-lm"};
  const auto text = write_text(dir);
  auto train = [&](const std::string& parallel) {
    // AdamW, as the shipped configs: attention's key bias, whose float noise Adam would turn
    // into steps of size lr, has its exact zero gradient (Note [the key bias] in
    // actors/layers/attention.cpp).
    auto config = parse_config(lm_config(text, "steps = 20\nevaluate = false\n", parallel, 9,
                                         "type = \"adamw\"\nlr = 0.01\n"),
                               "lm.toml");
    auto options = test::quiet_options();
    options.keep_parameters = true;
    return test::run_ok(config, options).parameters;
  };
  const auto single = train("");
  // Metrics to /dev/null (quiet_options): no vocabulary is written beside a device.
  CHECK_FALSE(std::filesystem::exists("/dev/null.vocab.json"));
  for (const std::string parallel :
       {"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 2], [3, 4]]\n"
        "microbatches = 4\nschedule = \"1f1b\"\n"}) {
    CAPTURE(parallel);
    double difference = 0;
    for (const auto& d : compare_parameters(single, train(parallel)))
      difference = std::max(difference, d.relative);
    CHECK(difference <= 1e-5);
  }
}

TEST_CASE("an embedding whose vocab does not cover the text is refused at its table") {
  const test::temp_directory dir{"troupe-lm"};
  auto config = parse_config(lm_config(write_text(dir), "steps = 1\n", "", 8), "lm.toml");
  CHECK_THROWS_WITH_AS(prepare_session(config),
                       doctest::Contains("reads token ids below 8, and the text has 9 distinct "
                                         "tokens (bytes); set its vocab to 9"),
                       config_error);
}

TEST_CASE("an embedding that would read images' values as token ids is refused at its table") {
  // It ran until step 0's kernel found "token id -0.17676": exit 1, not a config error.
  for (const char* source : {"synthetic", "fashion-mnist"}) {
    CAPTURE(source);
    auto config =
        parse_config(std::string{"[data]\nsource = \""} + source + "\"\nbatch_size = 8\n" +
                         test::layer("embedding", "vocab = 2\ndim = 4\n") + test::layer("flatten") +
                         test::linear(10),
                     "emb.toml");
    CHECK_THROWS_WITH_AS(prepare_session(config),
                         doctest::Contains("emb.toml:4:1: layer 'embedding' reads token ids, but "
                                           "[data] source = \""),
                         config_error);
  }
}

TEST_CASE("the shipped language models plan on the fortunes text, their vocab its bytes") {
  for (const std::string name : {"char_lm", "char_lm_pp2", "char_lm_dp2"}) {
    CAPTURE(name);
    const auto config = load_config(std::string{TROUPE_SOURCE_DIR} + "/config/" + name + ".toml");
    const auto prepared = prepare_session(config);
    CHECK(prepared.data->vocabulary.size() == 114);  // Debian 12's fortunes
    CHECK(prepared.graph.shapes.back() == shape_t{64, 114});
    CHECK(prepared.plan.positions == 64);
  }
}
