// config_test.cpp: the topology config reader (runtime/config/config.hpp).
//
// Valid configs are read back key by key; every error class is checked for its message
// and its exact file:line:column, since pointing at the right place is the point.
// Configs are raw strings whose first line is line 1 (R"(... starts on it).
#include "runtime/config/config.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/base/limits.hpp"
#include "tests/temp_files.hpp"

namespace fs = std::filesystem;
using troupe::config_error;
using troupe::parse_config;
using troupe::run_config;
using troupe::test::temp_directory;

namespace {

/// Parses `text` expecting a config_error; returns it for the caller to inspect.
config_error parse_error_of(const std::string& text, const std::string& directory = ".") {
  try {
    parse_config(text, "t.toml", directory);
  } catch (const config_error& error) {
    return error;
  }
  FAIL("expected a config_error for:\n" << text);
  return config_error({}, "");
}

/// Checks an error's position and that its message contains `expected`.
void check_error(const std::string& text, int line, int column, const std::string& expected) {
  auto error = parse_error_of(text);
  INFO("message: " << std::string(error.what()));
  CHECK(error.where().file == "t.toml");
  CHECK(error.where().line == line);
  CHECK(error.where().column == column);
  CHECK(std::string(error.what()).find(expected) != std::string::npos);
}

// The smallest config that needs nothing on disk.
const std::string minimal_model = R"([model]
[[model.layers]]
type = "linear"
)";
const std::string synthetic_source = "[data]\nsource = \"synthetic\"\n";

}  // namespace

TEST_CASE("a config with every key is read back exactly, with positions") {
  temp_directory dir;
  // Both spellings of the data files are accepted: gzip'd and raw.
  dir.write("fmnist/train-images-idx3-ubyte.gz", "");
  dir.write("fmnist/train-labels-idx1-ubyte", "");
  dir.write("fmnist/t10k-images-idx3-ubyte.gz", "");
  dir.write("fmnist/t10k-labels-idx1-ubyte.gz", "");
  const std::string text = R"([run]
epochs = 3
steps = 1000
seed = 7
metrics = "out/metrics.jsonl"
log_every = 10
evaluate = false

[data]
source = "fashion-mnist"
path = "fmnist"
batch_size = 64
eval_batch_size = 500
shuffle = false
prefetch = 4
synthetic_train = 100
synthetic_test = 50
synthetic_features = 20
synthetic_classes = 3

[model]
loss = "softmax_xent"
[[model.layers]]
type = "linear"
out = 256
init = "kaiming"
[[model.layers]]
type = "dropout"
p = 0.5
train_only = true

[optimizer]
type = "sgd"
lr = 0.05
momentum = 0.9
dampening = 0.0
nesterov = true
betas = [0.8, 0.99]
eps = 1e-6
weight_decay = 5e-4
[optimizer.schedule]
type = "step"
warmup_steps = 100
step_size = 300
gamma = 0.5
min_lr = 1e-5

[parallel]
devices = ["cpu:0", "cuda:1"]
data = 2
pipeline = 1
microbatches = 4
schedule = "1f1b"
averaging = "central"
)";
  auto c = parse_config(text, "full.toml", dir.path().string());
  CHECK(c.path == "full.toml");
  CHECK(c.directory == dir.path().string());

  CHECK(c.run.epochs == 3);
  CHECK(c.run.steps == 1000);
  CHECK(c.run.seed == 7);
  // Relative to the config's directory, as every path in a config (Note [relative paths]).
  CHECK(c.run.metrics == dir.path().string() + "/out/metrics.jsonl");
  CHECK(c.run.log_every == 10);
  CHECK(c.run.evaluate == false);
  CHECK(c.run.where.to_string() == "full.toml:1:1");

  CHECK(c.data.source == troupe::data_source::fashion_mnist);
  CHECK(c.data.path == (dir.path() / "fmnist").string());  // relative to the config's directory
  CHECK(c.data.batch_size == 64);
  CHECK(c.data.eval_batch_size == 500);
  CHECK(c.data.shuffle == false);
  CHECK(c.data.prefetch == 4);
  CHECK(c.data.synthetic_train == 100);
  CHECK(c.data.synthetic_test == 50);
  CHECK(c.data.synthetic_features == 20);
  CHECK(c.data.synthetic_classes == 3);
  CHECK(c.data.where.to_string() == "full.toml:9:1");
  CHECK(c.data.source_where.to_string() == "full.toml:10:10");
  CHECK(c.data.path_where.to_string() == "full.toml:11:8");

  CHECK(c.model.loss == "softmax_xent");
  CHECK(c.model.where.to_string() == "full.toml:21:1");
  REQUIRE(c.model.layers.size() == 2);
  const auto& linear = c.model.layers[0];
  CHECK(linear.type == "linear");
  CHECK(linear.where.to_string() == "full.toml:23:1");
  CHECK(linear.type_where.to_string() == "full.toml:24:8");
  REQUIRE(linear.settings.size() == 2);
  CHECK(std::get<std::int64_t>(linear.settings.at("out").value) == 256);
  CHECK(linear.settings.at("out").where.to_string() == "full.toml:25:1");
  CHECK(std::get<std::string>(linear.settings.at("init").value) == "kaiming");
  const auto& dropout = c.model.layers[1];
  CHECK(dropout.type == "dropout");
  CHECK(std::get<double>(dropout.settings.at("p").value) == 0.5);
  CHECK(std::get<bool>(dropout.settings.at("train_only").value) == true);
  CHECK(dropout.settings.at("train_only").where.to_string() == "full.toml:30:1");

  CHECK(c.optimizer.type == troupe::optimizer_type::sgd);
  CHECK(c.optimizer.type_where.to_string() == "full.toml:33:8");
  CHECK(c.optimizer.where.to_string() == "full.toml:32:1");
  // Exact comparisons: each literal is parsed to the nearest double, as the literal here is.
  CHECK(c.optimizer.lr == 0.05);
  CHECK(c.optimizer.momentum == 0.9);
  CHECK(c.optimizer.dampening == 0.0);
  CHECK(c.optimizer.nesterov == true);
  CHECK(c.optimizer.beta1 == 0.8);
  CHECK(c.optimizer.beta2 == 0.99);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.weight_decay == 5e-4);
  CHECK(c.optimizer.schedule.type == troupe::lr_schedule_type::step);
  CHECK(c.optimizer.schedule.warmup_steps == 100);
  CHECK(c.optimizer.schedule.step_size == 300);
  CHECK(c.optimizer.schedule.gamma == 0.5);
  CHECK(c.optimizer.schedule.min_lr == 1e-5);
  CHECK(c.optimizer.schedule.where.to_string() == "full.toml:41:1");

  REQUIRE(c.parallel.devices.size() == 2);
  CHECK(c.parallel.devices[0].name == "cpu:0");
  CHECK(c.parallel.devices[0].where.to_string() == "full.toml:49:12");
  CHECK(c.parallel.devices[1].name == "cuda:1");
  CHECK(c.parallel.devices[1].where.to_string() == "full.toml:49:21");
  CHECK(c.parallel.data == 2);
  CHECK(c.parallel.pipeline == 1);
  CHECK(c.parallel.microbatches == 4);
  CHECK(c.parallel.schedule == troupe::pipeline_schedule::one_f_one_b);
  CHECK(c.parallel.averaging == troupe::averaging_method::central);
  CHECK(c.parallel.where.to_string() == "full.toml:48:1");
}

TEST_CASE("absent sections and keys take the documented defaults, positioned at the file") {
  auto c = parse_config(synthetic_source + minimal_model, "t.toml");
  CHECK(c.run.epochs == 1);
  CHECK(c.run.steps == 0);
  CHECK(c.run.seed == 42);
  CHECK(c.run.metrics == "troupe-metrics.jsonl");
  CHECK(c.run.log_every == 50);
  CHECK(c.run.evaluate == true);
  CHECK(c.run.where.to_string() == "t.toml");  // line 0: the whole file

  CHECK(c.data.source == troupe::data_source::synthetic);
  CHECK(c.data.path == "/usr/share/datasets/fashion-mnist");
  CHECK(c.data.batch_size == 128);
  CHECK(c.data.eval_batch_size == 1000);
  CHECK(c.data.shuffle == true);
  CHECK(c.data.prefetch == 2);
  CHECK(c.data.synthetic_train == 4096);
  CHECK(c.data.synthetic_test == 1024);
  CHECK(c.data.synthetic_features == 784);
  CHECK(c.data.synthetic_classes == 10);
  CHECK(c.data.path_where.to_string() == "t.toml:1:1");  // defaulted: the [data] table

  CHECK(c.model.loss == "softmax_xent");
  REQUIRE(c.model.layers.size() == 1);
  CHECK(c.model.layers[0].settings.empty());

  CHECK(c.optimizer.type == troupe::optimizer_type::adam);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.optimizer.momentum == 0.0);
  CHECK(c.optimizer.dampening == 0.0);
  CHECK(c.optimizer.nesterov == false);
  CHECK(c.optimizer.beta1 == 0.9);
  CHECK(c.optimizer.beta2 == 0.999);
  CHECK(c.optimizer.eps == 1e-8);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(c.optimizer.where.line == 0);
  CHECK(c.optimizer.type_where.line == 0);
  CHECK(c.optimizer.schedule.type == troupe::lr_schedule_type::constant);
  CHECK(c.optimizer.schedule.warmup_steps == 0);
  CHECK(c.optimizer.schedule.step_size == 1000);
  CHECK(c.optimizer.schedule.gamma == 0.1);
  CHECK(c.optimizer.schedule.min_lr == 0.0);
  CHECK(c.optimizer.schedule.where.line == 0);

  REQUIRE(c.parallel.devices.size() == 1);
  CHECK(c.parallel.devices[0].name == "cpu:0");
  CHECK(c.parallel.devices[0].where.to_string() == "t.toml");
  CHECK(c.parallel.data == 1);
  CHECK(c.parallel.pipeline == 1);
  CHECK(c.parallel.microbatches == 1);
  CHECK(c.parallel.schedule == troupe::pipeline_schedule::gpipe);
  CHECK(c.parallel.averaging == troupe::averaging_method::ring);
  CHECK_FALSE(c.parallel.shard_optimizer);
  CHECK(c.parallel.gloo_timeout == 30.0);
}

TEST_CASE("gloo_timeout is a positive number of seconds") {
  auto c = parse_config(minimal_model + "[parallel]\naveraging = \"gloo\"\ngloo_timeout = 0.25\n",
                        "t.toml");
  CHECK(c.parallel.averaging == troupe::averaging_method::gloo);
  CHECK(c.parallel.gloo_timeout == 0.25);
  check_error(minimal_model + "[parallel]\ngloo_timeout = 0\n", 5, 16, "gloo_timeout");
}

TEST_CASE("balance is \"even\" or one positive weight a replica") {
  auto even = parse_config(minimal_model, "t.toml");
  CHECK(even.parallel.balance == troupe::replica_balance::even);
  auto named = parse_config(minimal_model + "[parallel]\nbalance = \"even\"\n", "t.toml");
  CHECK(named.parallel.balance == troupe::replica_balance::even);
  CHECK(named.parallel.balance_where.line == 5);
  auto weights = parse_config(minimal_model + "[parallel]\nbalance = [1, 2.5, 3]\n", "t.toml");
  CHECK(weights.parallel.balance == troupe::replica_balance::weights);
  CHECK(weights.parallel.balance_weights == std::vector<double>{1, 2.5, 3});
  check_error(minimal_model + "[parallel]\nbalance = \"evn\"\n", 5, 11,
              "unknown replica balance 'evn'; did you mean 'even'?");
  check_error(minimal_model + "[parallel]\nbalance = 2\n", 5, 11,
              "expected \"even\" or an array of weights like [1, 2]");
  check_error(minimal_model + "[parallel]\nbalance = []\n", 5, 11, "found an empty array");
  check_error(minimal_model + "[parallel]\nbalance = [1, 0]\n", 5, 15, "balance");
  check_error(minimal_model + "[parallel]\nbalance = [1, -2]\n", 5, 15, "balance");
  check_error(minimal_model + "[parallel]\nbalance = [1, \"2\"]\n", 5, 15, "balance");
  check_error(minimal_model + "[parallel]\nbalance = [inf, 1]\n", 5, 12,
              "expected a number > 0, found inf");
  check_error(minimal_model + "[parallel]\nbalance = [nan, 1]\n", 5, 12,
              "expected a number > 0, found nan");
  check_error(minimal_model + "[parallel]\nbalance = [[[[1]]]]\n", 5, 12,
              "expected a number, found an array");
  check_error(minimal_model + "[parallel]\nbalance = { r0 = 1 }\n", 5, 11,
              "expected \"even\" or an array of weights like [1, 2]");
  std::string many;
  for (int i = 0; i <= troupe::limits::max_replicas; ++i)
    many += (many.empty() ? "" : ", ") + std::string("1");
  check_error(minimal_model + "[parallel]\nbalance = [" + many + "]\n", 5, 11,
              "weights (one a replica), found " + std::to_string(troupe::limits::max_replicas + 1));
}

TEST_CASE("reduce_dtype is fp32 or bf16, and bf16 needs ring averaging") {
  CHECK_FALSE(parse_config(minimal_model, "t.toml").parallel.reduce_bf16);
  auto c =
      parse_config(minimal_model + "[parallel]\ndata = 2\nreduce_dtype = \"bf16\"\n", "t.toml");
  CHECK(c.parallel.reduce_bf16);
  CHECK_FALSE(parse_config(minimal_model + "[parallel]\nreduce_dtype = \"fp32\"\n", "t.toml")
                  .parallel.reduce_bf16);
  check_error(minimal_model + "[parallel]\nreduce_dtype = \"bf61\"\n", 5, 16,
              "unknown all-reduce dtype 'bf61'; did you mean 'bf16'? (expected one of 'fp32', "
              "'bf16')");
  check_error(minimal_model + "[parallel]\naveraging = \"gloo\"\nreduce_dtype = \"bf16\"\n", 6, 16,
              "[parallel] reduce_dtype: \"bf16\" is the ring's (its chunks travel in bf16); "
              "averaging = \"gloo\" sums in fp32 only");
  // A megabyte of a value, and a nested one: refused at the key, quoted short.
  const std::string big(1'000'000, 'A');
  for (const std::string value : {"\"" + big + "\"", std::string("[[[\"bf16\"]]]")}) {
    const auto error = parse_error_of(minimal_model + "[parallel]\nreduce_dtype = " + value + "\n");
    const std::string message = error.what();
    INFO(message.substr(0, 300));
    CHECK(error.where().line == 5);
    CHECK(message.size() < 1000);
    CHECK((message.find("reduce_dtype") != std::string::npos ||
           message.find("all-reduce dtype") != std::string::npos));
  }
}

TEST_CASE("shard_optimizer needs ring averaging, and says so at its key") {
  auto c = parse_config(minimal_model + "[parallel]\ndata = 2\nshard_optimizer = true\n", "t.toml");
  CHECK(c.parallel.shard_optimizer);
  check_error(minimal_model + "[parallel]\naveraging = \"central\"\nshard_optimizer = true\n", 6, 1,
              "[parallel] shard_optimizer: needs averaging = \"ring\" (the optimizer shards are "
              "the ring's chunks), found averaging = \"central\"");
  // gloo sums whole layers: it has no chunks for the optimizers to own.
  check_error(minimal_model + "[parallel]\naveraging = \"gloo\"\nshard_optimizer = true\n", 6, 1,
              "[parallel] shard_optimizer: needs averaging = \"ring\" (the optimizer shards are "
              "the ring's chunks), found averaging = \"gloo\"");
}

TEST_CASE(
    "averaging = local_sgd or diloco takes sync_every and a collective, and nothing else takes "
    "them") {
  const std::string parallel = minimal_model + "[parallel]\ndata = 2\n";
  auto c = parse_config(parallel + "averaging = \"local_sgd\"\nsync_every = 8\n", "t.toml");
  CHECK(c.parallel.rule == troupe::averaging_rule::local_sgd);
  CHECK(c.parallel.averaging == troupe::averaging_method::ring);  // the default collective
  CHECK(c.parallel.sync_every == 8);
  c = parse_config(parallel + "averaging = \"local_sgd\"\ncollective = \"gloo\"\nsync_every = 1\n",
                   "t.toml");
  CHECK(c.parallel.averaging == troupe::averaging_method::gloo);
  CHECK(c.parallel.sync_every == 1);
  CHECK(parse_config(parallel, "t.toml").parallel.rule == troupe::averaging_rule::synchronous);
  check_error(parallel + "averaging = \"local_sgd\"\n", 6, 13,
              "averaging = 'local_sgd' needs sync_every = H");
  check_error(parallel + "averaging = \"local_sgd\"\nsync_every = 0\n", 7, 14, "sync_every");
  check_error(parallel + "averaging = \"local_sgd\"\ncollective = \"central\"\nsync_every = 2\n", 7,
              14, "unknown collective under local_sgd 'central'");
  check_error(parallel + "averaging = \"local_sdg\"\n", 6, 13, "did you mean 'local_sgd'");
  check_error(parallel + "sync_every = 4\n", 6, 1,
              "[parallel] sync_every: is \"local_sgd\" or \"diloco\"'s, and averaging is 'ring'");
  check_error(parallel + "averaging = \"gloo\"\ncollective = \"ring\"\n", 7, 1,
              "[parallel] collective: is \"local_sgd\" or \"diloco\"'s");
  // DiLoCo: the outer optimizer's keys, its own only.
  c = parse_config(parallel + "averaging = \"diloco\"\nsync_every = 64\n", "t.toml");
  CHECK(c.parallel.rule == troupe::averaging_rule::diloco);
  CHECK(c.parallel.outer_nesterov);  // the paper's outer optimizer: Nesterov, 0.7, 0.9
  CHECK(c.parallel.outer_lr == 0.7);
  CHECK(c.parallel.outer_momentum == 0.9);
  c = parse_config(parallel +
                       "averaging = \"diloco\"\nsync_every = 1\nouter = \"sgd\"\nouter_lr = 1.0\n"
                       "outer_momentum = 0.0\n",
                   "t.toml");
  CHECK_FALSE(c.parallel.outer_nesterov);
  CHECK(c.parallel.outer_lr == 1.0);
  CHECK(c.parallel.outer_momentum == 0.0);
  check_error(parallel + "averaging = \"local_sgd\"\nsync_every = 2\nouter_lr = 0.5\n", 8, 1,
              "[parallel] outer_lr: is \"diloco\"'s, and averaging is 'local_sgd'");
  check_error(parallel + "averaging = \"diloco\"\nsync_every = 2\nouter_momentum = 1.0\n", 8, 18,
              "outer_momentum");
  check_error(parallel + "averaging = \"diloco\"\nsync_every = 2\nouter_momentum = 0.0\n", 8, 1,
              "outer = \"nesterov\" needs outer_momentum > 0");
  check_error(parallel + "averaging = \"diloco\"\nsync_every = 2\nouter = \"adam\"\n", 8, 9,
              "unknown outer optimizer 'adam'");
  // Local SGD averages parameters: rounding them to bf16 at every sync, or sharding an
  // optimizer that updates all of them, is refused at the key.
  check_error(parallel + "averaging = \"local_sgd\"\nsync_every = 2\nshard_optimizer = true\n", 8,
              1, "nothing to shard");
  check_error(parallel + "averaging = \"local_sgd\"\nsync_every = 2\nreduce_dtype = \"bf16\"\n", 8,
              16, "averages parameters");
}

TEST_CASE("averaging = async takes max_staleness, and nothing else takes it") {
  const std::string parallel = minimal_model + "[parallel]\ndata = 2\n";
  auto c = parse_config(parallel + "averaging = \"async\"\nmax_staleness = 3\n", "t.toml");
  CHECK(c.parallel.rule == troupe::averaging_rule::async);
  CHECK(c.parallel.averaging == troupe::averaging_method::central);  // the server's place
  CHECK(c.parallel.max_staleness == 3);
  check_error(parallel + "averaging = \"async\"\n", 6, 13,
              "averaging = 'async' needs max_staleness = N");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = -1\n", 7, 17, "max_staleness");
  // Oversized, a string, a deeply nested array: each refused at its value, not a crash.
  check_error(parallel + "averaging = \"async\"\nmax_staleness = 9223372036854775807\n", 7, 17,
              "max_staleness");
  check_error(
      parallel + "averaging = \"async\"\nmax_staleness = \"" + std::string(100000, 'x') + "\"\n", 7,
      17, "max_staleness");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = { a = { b = 1 } }\n", 7, 17,
              "max_staleness");
  // Nested past the parser's limit: refused where it passes 64 levels.
  check_error(parallel + "averaging = \"async\"\nmax_staleness = " + std::string(200, '[') +
                  std::string(200, ']') + "\n",
              7, 81, "nest more than 64 levels deep");
  check_error(parallel + "max_staleness = 1\n", 6, 1,
              "[parallel] max_staleness: is \"async\"'s, and averaging is 'ring'");
  check_error(parallel + "averaging = \"local_sgd\"\nsync_every = 2\nmax_staleness = 1\n", 8, 1,
              "[parallel] max_staleness: is \"async\"'s, and averaging is 'local_sgd'");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = 1\nsync_every = 2\n", 8, 1,
              "[parallel] sync_every: is \"local_sgd\" or \"diloco\"'s, and averaging is 'async'");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = 1\ncollective = \"ring\"\n", 8, 1,
              "[parallel] collective: is \"local_sgd\" or \"diloco\"'s");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = 1\nreduce_dtype = \"bf16\"\n", 8,
              16, "has no ring");
  check_error(parallel + "averaging = \"async\"\nmax_staleness = 1\nshard_optimizer = true\n", 8, 1,
              "has no ring");
}

TEST_CASE("[cluster] link is an emulated link, refused at its value when it says no link") {
  auto c = parse_config(minimal_model + "[cluster]\nlink = \"100 Mbit/s, 20 ms\"\n", "t.toml");
  CHECK(c.cluster.link.given);
  CHECK(c.cluster.link.latency_ns == doctest::Approx(20e6));
  CHECK_FALSE(parse_config(minimal_model, "t.toml").cluster.link.given);
  check_error(minimal_model + "[cluster]\nlink = \"fast\"\n", 5, 8,
              "[cluster] link 'fast': expected a bandwidth and a one-way latency");
  // Not a string (a number, a nested table): the type error at the value.
  check_error(minimal_model + "[cluster]\nlink = 100\n", 5, 8, "[cluster] link: expected a string");
  check_error(minimal_model + "[cluster]\nlink = {a = {b = {c = 1}}}\n", 5, 8,
              "[cluster] link: expected a string");
}

TEST_CASE("a config of only a model uses the installed Fashion-MNIST directory") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) {
    MESSAGE("skipped: Debian's dataset-fashion-mnist is not installed");
    return;
  }
  auto c = parse_config(minimal_model, "t.toml");
  CHECK(c.data.source == troupe::data_source::fashion_mnist);
  CHECK(c.data.path == "/usr/share/datasets/fashion-mnist");
  CHECK(c.data.path_where.to_string() == "t.toml");
}

TEST_CASE("an inline schedule table and integer-valued numbers are accepted") {
  auto c = parse_config(synthetic_source + minimal_model + R"([optimizer]
lr = 1
betas = [0, 0.5]
schedule = { type = "cosine", min_lr = 0 }
)",
                        "t.toml");
  CHECK(c.optimizer.lr == 1.0);
  CHECK(c.optimizer.beta1 == 0.0);
  CHECK(c.optimizer.schedule.type == troupe::lr_schedule_type::cosine);
  CHECK(c.optimizer.schedule.min_lr == 0.0);
  CHECK(c.optimizer.schedule.where.to_string() == "t.toml:9:12");
}

TEST_CASE("deeply nested or oversized values are config errors, not a crash") {
  // 100000 levels of arrays and of inline tables: the scan before toml++ (toml_limits.hpp)
  // stops at the 65th level, where it passes the limit, so nothing recurses deep enough
  // to overflow the stack.
  const std::string depth(100000, '[');
  check_error("[run]\nsteps = " + depth + std::string(100000, ']') + "\n", 2, 73,
              "nest more than 64 levels deep");
  std::string tables;
  for (int i = 0; i < 100000; ++i)
    tables += "{a=";
  check_error("[run]\nsteps = " + tables + "1" + std::string(100000, '}') + "\n", 2, 201,
              "nest more than 64 levels deep");
  // An integer past 64 bits is a syntax error at its position.
  check_error("[run]\nsteps = 99999999999999999999999\n", 2, 32, "is not representable in 64 bits");
}

TEST_CASE("a TOML syntax error is reported at toml++'s position") {
  check_error("[run]\nepochs = = 3\n", 2, 10, "invalid TOML: error while parsing value");
  // toml++ places a redefinition at the second value.
  check_error("[run]\nepochs = 1\nepochs = 2\n", 3, 10,
              "invalid TOML: error while parsing key-value pair: cannot redefine existing integer "
              "'epochs'");
}

TEST_CASE("an unknown section is rejected, with a suggestion or the list of sections") {
  check_error(minimal_model + "[optimiser]\nlr = 0.1\n", 4, 2,
              "unknown section 'optimiser'; did you mean 'optimizer'?");
  check_error("[training]\n" + minimal_model, 1, 2,
              "unknown section 'training'; valid sections: 'run', 'data', 'model', 'optimizer', "
              "'parallel', 'cluster', 'actor', 'wire'");
  check_error("epochs = 3\n" + minimal_model, 1, 1, "unknown section 'epochs'");
  check_error("run = 3\n" + minimal_model, 1, 1, "'run' must be a section [run], found an integer");
}

TEST_CASE("an unknown key in a fixed section is rejected with the nearest valid key") {
  check_error(minimal_model + "[optimizer]\ntype = \"adam\"\nlr_rate = 0.1\n", 6, 1,
              "unknown key 'lr_rate' in [optimizer]; did you mean 'lr'?");
  // A name with a word added or dropped is too far for edit distance but still suggested.
  check_error(minimal_model + "[optimizer.schedule]\nwarmup = 5\n", 5, 1,
              "unknown key 'warmup' in [optimizer.schedule]; did you mean 'warmup_steps'?");
  check_error(minimal_model + "[optimizer.schedule]\ngama = 0.5\n", 5, 1,
              "unknown key 'gama' in [optimizer.schedule]; did you mean 'gamma'?");
  check_error("[parallel]\nfrobnicate = 1\n" + minimal_model, 2, 1,
              "unknown key 'frobnicate' in [parallel]; valid keys: devices, data, pipeline, "
              "stages, microbatches, schedule, virtual_stages, averaging, collective, sync_every, "
              "outer, outer_lr, outer_momentum, max_staleness, share_devices, bucket_kib, "
              "shard_optimizer");
  // Two unknown keys: the first in the file is named (toml++ itself orders keys by name).
  check_error("[run]\nzzz = 1\naaa = 2\n" + minimal_model, 2, 1, "unknown key 'zzz' in [run]");
}

TEST_CASE("a value of the wrong type names what was expected and what was found") {
  check_error(minimal_model + "[data]\nbatch_size = \"64\"\n", 5, 14,
              "[data] batch_size: expected an integer, found a string");
  check_error(minimal_model + "[data]\nshuffle = 1\n", 5, 11,
              "[data] shuffle: expected a boolean (true or false), found an integer");
  check_error(minimal_model + "[run]\ntf32 = \"yes\"\n", 5, 8,
              "[run] tf32: expected a boolean (true or false), found a string");
  check_error(minimal_model + "[optimizer]\nlr = \"fast\"\n", 5, 6,
              "[optimizer] lr: expected a number, found a string");
  check_error(minimal_model + "[run]\nepochs = 2.0\n", 5, 10,
              "[run] epochs: expected an integer, found a float");
  check_error(minimal_model + "[run]\nmetrics = 3\n", 5, 11,
              "[run] metrics: expected a string, found an integer");
  check_error(minimal_model + "[optimizer]\nschedule = \"cosine\"\n", 5, 12,
              "[optimizer] schedule: expected a table, found a string");
  check_error("[model]\nlayers = { type = \"linear\" }\n", 2, 10,
              "[model] layers: expected an array of tables ([[model.layers]]), found a table");
}

TEST_CASE("a value out of its range names the range and the value") {
  check_error(minimal_model + "[data]\nbatch_size = 0\n", 5, 14,
              "[data] batch_size: expected an integer in [1, 268435456], found 0");
  check_error(minimal_model + "[data]\nprefetch = 65\n", 5, 12,
              "[data] prefetch: expected an integer in [1, 64], found 65");
  check_error(minimal_model + "[data]\nsynthetic_classes = 1\n", 5, 21,
              "[data] synthetic_classes: expected an integer in [2, 268435456], found 1");
  check_error(minimal_model + "[run]\nseed = -1\n", 5, 8,
              "[run] seed: expected an integer >= 0, found -1");
  check_error(minimal_model + "[run]\nsteps = -5\n", 5, 9,
              "[run] steps: expected an integer in [0, 1099511627776], found -5");
  check_error(minimal_model + "[optimizer]\nlr = 0\n", 5, 6,
              "[optimizer] lr: expected a number > 0, found 0");
  check_error(minimal_model + "[optimizer]\nlr = inf\n", 5, 6,
              "[optimizer] lr: expected a number > 0, found inf");
  check_error(minimal_model + "[optimizer]\nmomentum = 1.0\n", 5, 12,
              "[optimizer] momentum: expected a number in [0, 1), found 1");
  check_error(minimal_model + "[optimizer]\nweight_decay = -0.1\n", 5, 16,
              "[optimizer] weight_decay: expected a number >= 0, found -0.1");
  check_error(minimal_model + "[optimizer.schedule]\nstep_size = 0\n", 5, 13,
              "[optimizer.schedule] step_size: expected an integer >= 1, found 0");
  check_error(minimal_model + "[parallel]\nmicrobatches = 0\n", 5, 16,
              "[parallel] microbatches: expected an integer in [1, 1048576], found 0");
  check_error(minimal_model + "[parallel]\nvirtual_stages = 0\n", 5, 18,
              "[parallel] virtual_stages: expected an integer in [1, 10000], found 0");
  check_error(minimal_model + "[parallel]\nvirtual_stages = 4000000000\n", 5, 18,
              "[parallel] virtual_stages: expected an integer in [1, 10000], found 4000000000");
  check_error(minimal_model + "[optimizer]\nbetas = [0.9, 1.5]\n", 5, 15,
              "[optimizer] betas[1]: expected a number in [0, 1), found 1.5");
  check_error(minimal_model + "[optimizer]\nbetas = [0.9]\n", 5, 9,
              "[optimizer] betas: expected an array of 2 numbers [beta1, beta2], found an array "
              "of 1 values");
  check_error(minimal_model + "[optimizer]\nbetas = [0.9, \"x\"]\n", 5, 15,
              "[optimizer] betas[1]: expected a number, found a string");
  check_error(minimal_model + "[optimizer]\nnesterov = true\n", 5, 12,
              "[optimizer] nesterov: needs momentum > 0 and dampening = 0, found momentum = 0");
}

TEST_CASE("an unknown name for an enumerated setting suggests the nearest and lists all") {
  check_error(minimal_model + "[optimizer]\ntype = \"adma\"\n", 5, 8,
              "unknown optimizer type 'adma'; did you mean 'adam'? (expected one of 'sgd', "
              "'adam', 'adamw')");
  check_error(minimal_model + "[optimizer.schedule]\ntype = \"cosin\"\n", 5, 8,
              "unknown schedule type 'cosin'; did you mean 'cosine'?");
  check_error("[data]\nsource = \"mnist\"\n" + minimal_model, 2, 10,
              "unknown data source 'mnist'");
  check_error(minimal_model + "[parallel]\nschedule = \"1f1f\"\n", 5, 12,
              "unknown pipeline schedule '1f1f'; did you mean '1f1b'?");
  check_error(minimal_model + "[parallel]\naveraging = \"allreduce\"\n", 5, 13,
              "unknown gradient averaging 'allreduce' (expected one of 'ring', 'central', 'gloo', "
              "'local_sgd', 'diloco', 'async')");
  check_error(minimal_model + "[run]\ncpu_gemm = \"mkl\"\n", 5, 12,
              "unknown CPU GEMM library 'mkl' (expected one of 'auto', 'onednn', 'openblas')");
}

TEST_CASE("[run] cpu_gemm names the CPU GEMM's library, automatic by default") {
  CHECK(parse_config(minimal_model, "t.toml", ".").run.cpu_gemm ==
        troupe::kernels::cpu_gemm::automatic);
  CHECK(parse_config(minimal_model + "[run]\ncpu_gemm = \"openblas\"\n", "t.toml", ".")
            .run.cpu_gemm == troupe::kernels::cpu_gemm::openblas);
  CHECK(parse_config(minimal_model + "[run]\ncpu_gemm = \"onednn\"\n", "t.toml", ".")
            .run.cpu_gemm == troupe::kernels::cpu_gemm::onednn);
}

TEST_CASE("[model] loss is a name or a table of its type and settings, kept with positions") {
  auto config = parse_config(
      "[model]\nloss = { type = \"huber\", delta = 0.5 }\n[[model.layers]]\ntype = \"linear\"\n",
      "t.toml", ".");
  CHECK(config.model.loss == "huber");
  REQUIRE(config.model.loss_settings.count("delta") == 1);
  CHECK(std::get<double>(config.model.loss_settings.at("delta").value) == 0.5);
  CHECK(config.model.loss_type_where.to_string() == "t.toml:2:17");
  config = parse_config("[model]\nloss = \"mse\"\n[[model.layers]]\ntype = \"linear\"\n",
                        "t.toml", ".");
  CHECK(config.model.loss == "mse");
  CHECK(config.model.loss_settings.empty());
  check_error("[model]\nloss = 3\n[[model.layers]]\ntype = \"linear\"\n", 2, 8,
              "[model] loss: expected a loss's name (like \"mse\") or a table");
  check_error("[model]\nloss = { delta = 1 }\n[[model.layers]]\ntype = \"linear\"\n", 2, 8,
              "found a table without a type");
  check_error("[model]\nloss = { type = 2 }\n[[model.layers]]\ntype = \"linear\"\n", 2, 17,
              "found an integer");
}

TEST_CASE("a device that is not cpu:N or cuda:N is rejected at its array element") {
  check_error(minimal_model + "[parallel]\ndevices = [\"cpu:0\", \"gpu0\"]\n", 5, 21,
              "[parallel] devices: expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0', "
              "found 'gpu0'");
  check_error(minimal_model + "[parallel]\ndevices = [\"cuda:-1\"]\n", 5, 12,
              "found 'cuda:-1'");
  check_error(minimal_model + "[parallel]\ndevices = [0]\n", 5, 12,
              "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0', found an integer");
  check_error(minimal_model + "[parallel]\ndevices = []\n", 5, 11,
              "[parallel] devices: expected a non-empty array of devices");
}

TEST_CASE("a device listed twice is rejected at its second mention") {
  check_error(minimal_model + "[parallel]\ndevices = [\"cuda:0\", \"cpu:0\", \"cuda:0\"]\n", 5, 31,
              "device 'cuda:0' is listed twice (first at t.toml:5:12)");
}

TEST_CASE("a model without layers is rejected at [model], or at the file when absent") {
  check_error(synthetic_source + "[model]\nloss = \"softmax_xent\"\n", 3, 1,
              "[model] has no layers; add at least one [[model.layers]] table");
  check_error(synthetic_source + "[model]\nlayers = []\n", 3, 1, "[model] has no layers");
  auto error = parse_error_of(synthetic_source);
  CHECK(error.where().line == 0);
  CHECK(std::string(error.what()) .find("t.toml: [model] has no layers") == 0);
}

TEST_CASE("a layer table needs a string type and only scalar settings") {
  check_error("[model]\n[[model.layers]]\ntype = \"linear\"\n[[model.layers]]\nout = 3\n", 4, 1,
              "[[model.layers]] #2: missing key 'type'");
  check_error("[model]\n[[model.layers]]\ntype = 3\n", 3, 8,
              "[[model.layers]] #1 type: expected a layer name (a string), found an integer");
  check_error("[model]\n[[model.layers]]\ntype = \"linear\"\nshape = [2, 3]\n", 4, 9,
              "[[model.layers]] #1 shape: expected a scalar (integer, float, boolean or string), "
              "found an array");
  check_error("[model]\n[[model.layers]]\ntype = \"linear\"\ninit = { kind = \"normal\" }\n", 4, 8,
              "[[model.layers]] #1 init: expected a scalar (integer, float, boolean or string), "
              "found a table");
}

TEST_CASE("a fashion-mnist data path must hold the four IDX files") {
  temp_directory dir;
  dir.write("partial/train-images-idx3-ubyte.gz", "");
  dir.write("partial/train-labels-idx1-ubyte.gz", "");
  dir.write("partial/t10k-images-idx3-ubyte", "");

  auto error = parse_error_of("[data]\npath = \"partial\"\n" + minimal_model, dir.path().string());
  INFO("message: " << std::string(error.what()));
  CHECK(error.where().to_string() == "t.toml:2:8");
  std::string message = error.what();
  CHECK(message.find("[data] path: directory '" + (dir.path() / "partial").string() +
                     "' has no 't10k-labels-idx1-ubyte(.gz)'") != std::string::npos);
  CHECK(message.find("install Debian's dataset-fashion-mnist (scripts/install-deps.sh does) or "
                     "set [data] source = \"synthetic\"") != std::string::npos);

  error = parse_error_of("[data]\npath = \"/nonexistent/fmnist\"\n" + minimal_model);
  CHECK(error.where().to_string() == "t.toml:2:8");
  CHECK(std::string(error.what()).find("'/nonexistent/fmnist' is not a directory holding the "
                                       "Fashion-MNIST files") != std::string::npos);

  // The synthetic source does not look at the path at all.
  CHECK_NOTHROW(parse_config("[data]\nsource = \"synthetic\"\npath = \"/nonexistent\"\n" +
                                 minimal_model,
                             "t.toml"));
}

TEST_CASE("load_config reads a file and resolves the data path against its directory") {
  temp_directory dir;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    dir.write(std::string("configs/data/") + name, "");
  dir.write("configs/mlp.toml", "[data]\npath = \"data\"\n" + minimal_model);

  auto file = (dir.path() / "configs/mlp.toml").string();
  auto c = troupe::load_config(file);
  CHECK(c.path == file);
  CHECK(c.directory == (dir.path() / "configs").string());
  CHECK(c.data.path == (dir.path() / "configs/data").string());
  CHECK(c.data.path_where.to_string() == file + ":2:8");
}

TEST_CASE("load_config on a missing file is a user error with exit code 2, not a config error") {
  const std::string file = "/nonexistent/troupe.toml";
  try {
    troupe::load_config(file);
    FAIL("expected a user_error");
  } catch (const config_error& error) {
    FAIL("expected a plain user_error, got a config_error: " << error.what());
  } catch (const troupe::user_error& error) {
    CHECK(std::string(error.what()) ==
          "cannot open config file '/nonexistent/troupe.toml': No such file or directory");
    CHECK(error.exit_code() == troupe::exit_code::bad_input);
  }
}

TEST_CASE("every fixed section rejects a key its reader never reads (keys are recorded as read)") {
  // Note [keys as read] in config.cpp: no list of allowed keys exists, so each section is
  // given an unknown key here; a read_* function that forgot its finish() would accept it.
  const std::string model = "[model]\n[[model.layers]]\ntype = \"linear\"\n";
  const std::string data = "[data]\nsource = \"synthetic\"\n";
  struct section_case {
    std::string header;
    std::string name;
  };
  for (const auto& c : std::vector<section_case>{{"[run]", "run"},
                                                 {"[optimizer]", "optimizer"},
                                                 {"[optimizer.schedule]", "optimizer.schedule"},
                                                 {"[parallel]", "parallel"}}) {
    INFO("section " << c.name);
    check_error(data + model + c.header + "\nbogus_key = 1\n", 7, 1,
                "unknown key 'bogus_key' in [" + c.name + "]");
  }
  check_error(data + "bogus_key = 1\n" + model, 3, 1, "unknown key 'bogus_key' in [data]");
  check_error(data + "[model]\nbogus_key = 1\n[[model.layers]]\ntype = \"linear\"\n", 4, 1,
              "unknown key 'bogus_key' in [model]");
  // The valid keys are those read, in the order they are read.
  check_error(data + model + "[optimizer.schedule]\nfrobnicate = 1\n", 7, 1,
              "unknown key 'frobnicate' in [optimizer.schedule]; valid keys: type, warmup_steps, "
              "step_size, gamma, min_lr");
}

TEST_CASE("an unknown key in [data] is reported before the data path is probed") {
  // A typo beside a wrong path: the typo is what the user most likely has to fix first,
  // and probing the disk must not hide it.
  check_error("[data]\npath = \"/nonexistent/fmnist\"\nbatchsize = 8\n" + minimal_model, 3, 1,
              "unknown key 'batchsize' in [data]; did you mean 'batch_size'?");
}

TEST_CASE("find_data_file prefers NAME.gz, then NAME, and only regular files") {
  temp_directory dir;
  dir.write("both/x-ubyte.gz", "");
  dir.write("both/x-ubyte", "");
  dir.write("raw/x-ubyte", "");
  fs::create_directories(dir.path() / "folder" / "x-ubyte.gz");
  CHECK(troupe::find_data_file((dir.path() / "both").string(), "x-ubyte") ==
        (dir.path() / "both" / "x-ubyte.gz").string());
  CHECK(troupe::find_data_file((dir.path() / "raw").string(), "x-ubyte") ==
        (dir.path() / "raw" / "x-ubyte").string());
  CHECK(troupe::find_data_file((dir.path() / "folder").string(), "x-ubyte").empty());
  CHECK(troupe::find_data_file((dir.path() / "nothing").string(), "x-ubyte").empty());
  CHECK(troupe::fashion_mnist_file_names().size() == 4);
}

TEST_CASE("[cluster] is read with its defaults, and each bad value is refused at its position") {
  auto config = parse_config(minimal_model +
                                 "[cluster]\nnodes = 3\nport = 4000\nlisten = "
                                 "\"0.0.0.0\"\nsecret_file = \"s.key\"\n",
                             "t.toml", "/cfg");
  CHECK(config.cluster.nodes == 3);
  CHECK(config.nodes() == 3);
  CHECK(config.cluster.port == 4000);
  CHECK(config.cluster.address == "127.0.0.1");
  CHECK(config.cluster.listen == "0.0.0.0");
  CHECK(config.cluster.secret_file == "/cfg/s.key");  // relative to the config file
  CHECK(config.cluster.node_timeout == 8);
  CHECK(config.cluster.shared_memory);
  CHECK_FALSE(parse_config(minimal_model + "[cluster]\nshared_memory = false\n", "t.toml")
                  .cluster.shared_memory);
  CHECK(parse_config(minimal_model, "t.toml").nodes() == 1);
  check_error(minimal_model + "[cluster]\nnodes = 0\n", 5, 9,
              "[cluster] nodes: expected an integer in [1, 4096], found 0");
  check_error(minimal_model + "[cluster]\nport = 70000\n", 5, 8,
              "[cluster] port: expected an integer in [1, 65535], found 70000");
  check_error(minimal_model + "[cluster]\naddress = \"a b\"\n", 5, 1,
              "[cluster] address: expected a host name or an IP address");
  check_error(minimal_model + "[cluster]\nsecret_file = \"\"\n", 5, 15,
              "[cluster] secret_file: expected a file's path, found an empty string");
  check_error(minimal_model + "[cluster]\nheartbeat = 3\nnode_timeout = 5\n", 6, 1,
              "[cluster] node_timeout: must be more than twice heartbeat (3 s)");
  check_error(minimal_model + "[cluster]\nshared_memory = \"yes\"\n", 5, 17,
              "[cluster] shared_memory: expected a boolean (true or false), found a string");
  // unauthenticated_gloo (Note [gloo outside the door]): false unless given; anything but a
  // boolean, a megabyte string or a deeply nested array included, refused at its key.
  CHECK_FALSE(config.cluster.unauthenticated_gloo);
  CHECK(parse_config(minimal_model + "[cluster]\nunauthenticated_gloo = true\n", "t.toml")
            .cluster.unauthenticated_gloo);
  check_error(
      minimal_model + "[cluster]\nunauthenticated_gloo = \"" + std::string(1 << 20, 'y') + "\"\n",
      5, 24, "[cluster] unauthenticated_gloo: expected a boolean (true or false), found a string");
  check_error(minimal_model + "[cluster]\nunauthenticated_gloo = [[true]]\n", 5, 24,
              "[cluster] unauthenticated_gloo: expected a boolean (true or false), found an array");
  check_error(minimal_model + "[cluster]\nunauthenticated_gloo = " + std::string(200, '[') +
                  std::string(200, ']') + "\n",
              5, 88, "nest more than 64 levels deep here");
  check_error(minimal_model + "[cluster]\nnodez = 2\n", 5, 1,
              "unknown key 'nodez' in [cluster]; did you mean 'nodes'?");
}

TEST_CASE("[cluster] tls needs its three files, each a file, and the files need tls") {
  temp_directory dir{"troupe-config"};
  for (const char* name : {"node.pem", "node.key", "ca.pem", "pass.txt"})
    dir.write(name, "-");
  fs::create_directory(dir / "folder.pem");
  auto config = parse_config(minimal_model +
                                 "[cluster]\ntls = true\ncertificate = \"node.pem\"\nkey = "
                                 "\"node.key\"\nca_file = \"ca.pem\"\nkey_passphrase_file = "
                                 "\"pass.txt\"\n",
                             "t.toml", dir.string());
  CHECK(config.cluster.tls);
  CHECK(config.cluster.certificate == dir / "node.pem");  // relative to the config file
  CHECK(config.cluster.key == dir / "node.key");
  CHECK(config.cluster.ca_file == dir / "ca.pem");
  CHECK(config.cluster.key_passphrase_file == dir / "pass.txt");
  CHECK_FALSE(parse_config(minimal_model, "t.toml").cluster.tls);
  const auto error_in = [&](const std::string& cluster, int line, int column,
                            const std::string& expected) {
    auto error = parse_error_of(minimal_model + "[cluster]\n" + cluster, dir.string());
    INFO("message: " << std::string(error.what()));
    CHECK(error.where().line == line);
    CHECK(error.where().column == column);
    CHECK(std::string(error.what()).find(expected) != std::string::npos);
  };
  error_in("tls = true\n", 5, 7,
           "[cluster] tls: needs certificate, key and ca_file (paths relative to the config "
           "file); found no certificate (this node's certificate (PEM))");
  error_in("tls = true\ncertificate = \"node.pem\"\nkey = \"node.key\"\n", 5, 7,
           "found no ca_file");
  error_in("tls = true\ncertificate = \"nope.pem\"\n", 6, 15,
           "[cluster] certificate: '" + (dir / "nope.pem") +
               "' does not exist; expected this node's certificate (PEM)");
  error_in(
      "tls = true\ncertificate = \"node.pem\"\nkey = \"node.key\"\nca_file = "
      "\"folder.pem\"\n",
      8, 11, "[cluster] ca_file: '" + (dir / "folder.pem") + "' is not a regular file");
  error_in(
      "tls = true\ncertificate = \"node.pem\"\nkey = \"node.key\"\nca_file = "
      "\"ca.pem\"\nkey_passphrase_file = \"gone.txt\"\n",
      9, 23, "[cluster] key_passphrase_file: '" + (dir / "gone.txt") + "' does not exist");
  error_in("tls = true\ncertificate = \"\"\n", 6, 15,
           "[cluster] certificate: expected a file's path, found an empty string");
  error_in("certificate = \"node.pem\"\n", 5, 1,
           "[cluster] certificate: is used only with TLS between nodes; add tls = true");
  error_in("tls = false\nkey = \"node.key\"\n", 6, 1, "[cluster] key: is used only with TLS");
  error_in("tls = \"yes\"\n", 5, 7, "[cluster] tls: expected a boolean (true or false)");
}

TEST_CASE("a device listed twice under two spellings is refused") {
  check_error(minimal_model + "[parallel]\ndevices = [\"cpu:1\", \"node0/cpu:1\"]\n", 5, 21,
              "device 'node0/cpu:1' is listed twice (first at t.toml:5:12 as 'cpu:1')");
}

TEST_CASE("every path in a config is relative to the config's directory, a default the cwd's") {
  const std::string layer = "[[model.layers]]\ntype = \"linear\"\nout = 2\n";
  const std::string text = R"([run]
metrics = "runs/m.jsonl"
trace = "../traces/t.json"
checkpoint = "ck"
[data]
source = "synthetic"
[[model.layers]]
type = "linear"
out = 2
)";
  auto c = parse_config(text, "c.toml", "/some/where");
  CHECK(c.run.metrics == "/some/where/runs/m.jsonl");
  CHECK(c.run.trace == "/some/traces/t.json");
  CHECK(c.run.checkpoint == "/some/where/ck");
  // Absolute paths stay as written; "" still means none.
  auto absolute = parse_config(
      "[run]\nmetrics = \"/tmp/m.jsonl\"\ntrace = \"\"\n[data]\nsource = \"synthetic\"\n" + layer, "a.toml",
      "/some/where");
  CHECK(absolute.run.metrics == "/tmp/m.jsonl");
  CHECK(absolute.run.trace.empty());
  // Nobody wrote the default: it is where troupe runs, as a command-line path would be.
  CHECK(parse_config("[data]\nsource = \"synthetic\"\n" + layer, "d.toml", "/some/where").run.metrics ==
        "troupe-metrics.jsonl");
}
