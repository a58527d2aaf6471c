// Local SGD (Note [local SGD] in actors/averaging/allreduce_averager_actor.cpp) through
// whole runs of the equivalence tests' MLP: at sync_every = 1 with SGD it is synchronous
// data parallelism's math on every wiring it runs on; with sync_every = H > 1 the
// replicas really step apart between syncs and agree bit for bit after one; a checkpoint
// holds each replica's own state, and a resume ends bit for bit where the straight run ends.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::equivalence_config;

namespace {

const std::string two_replicas = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";

std::string local_sgd(std::int64_t sync_every) {
  return "averaging = \"local_sgd\"\nsync_every = " + std::to_string(sync_every) + "\n";
}

/// The tensors of the checkpoint after `step` steps under `root`, by name.
std::map<std::string, std::vector<float>> checkpoint_tensors(const std::string& root,
                                                             std::int64_t step) {
  const auto path = test::checkpoint_at(root, step);
  return read_checkpoint_tensors(path, verify_checkpoint(path));
}

/// The 20 steps of the config `text`, with a checkpoint every `every` steps under `root`
/// (all kept); its parameters.
test::trained_parameters train_checkpointed(const std::string& text, const std::string& root,
                                            std::int64_t every) {
  auto config = parse_config(text, "local.toml");
  config.run.checkpoint = root;
  config.run.checkpoint_every = every;
  config.run.checkpoint_keep = 100;
  auto options = test::quiet_options();
  options.keep_parameters = true;
  return test::run_ok(config, options).parameters;
}

/// The config `text` resumed from `checkpoint` to its 20 steps; its parameters.
test::trained_parameters resumed(const std::string& text, const std::string& checkpoint) {
  auto options = test::quiet_options();
  options.keep_parameters = true;
  options.resume = checkpoint;
  auto result = test::run_ok(parse_config(text, "local.toml"), options);
  CHECK(result.outcome.steps == 20);
  return result.parameters;
}

}  // namespace

TEST_CASE(
    "local SGD at sync_every = 1 with SGD computes what one device computes, on every wiring") {
  // The equivalence test's tolerance and reasoning (tests/actors/session/equivalence_test.cpp):
  // SGD with momentum is linear in the gradient, so the mean of the replicas' steps on R x
  // their own gradients is the synchronous step; only summation order differs (~1e-7 per
  // gradient). A lost scale (R, 1 / R) or a missed average moves parameters by 1e-3 or more.
  const auto single = test::train_twenty_steps(equivalence_config("", "sgd"));
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"ring, R = 2", two_replicas + local_sgd(1)},
      {"ring in small buckets, R = 3 on two devices",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\nshare_devices = true\n"
       "bucket_kib = 1\n" +
           local_sgd(1)},
      {"gloo, R = 2", two_replicas + local_sgd(1) + "collective = \"gloo\"\n"},
      {"uneven shares, weights [1, 3]", two_replicas + local_sgd(1) + "balance = [1, 3]\n"},
      {"hybrid: R = 2 of a 2-stage 1F1B pipeline, M = 3",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 3\nschedule = \"1f1b\"\n" +
           local_sgd(1)},
  };
  for (const auto& wiring : wirings) {
    // Not a structured binding: clang 14 (the sanitizer builds) does not let INFO's lambda
    // capture one.
    const std::string what = wiring.first;
    INFO(what);
    const auto local = test::train_twenty_steps(equivalence_config(wiring.second, "sgd"));
    CHECK(test::largest_difference(single, local) <= 1e-5);
  }
}

TEST_CASE("local SGD at sync_every = 4 steps the replicas apart and hands each the same mean") {
  // Checkpoints after every second step: steps 4, 8, ... end with a sync, steps 2, 6, ...
  // do not. Replica 1 writes its own copy ("replica1/<name>") beside replica 0's.
  for (const char* optimizer : {"sgd", "adam"}) {
    INFO(optimizer);
    test::temp_directory d{"troupe-local-sgd"};
    const auto local = train_checkpointed(
        equivalence_config(two_replicas + local_sgd(4), optimizer), d.file("checkpoints"), 2);
    const auto synchronous = test::train_twenty_steps(equivalence_config(two_replicas, optimizer));
    // The replicas computed their gradients on parameters of their own between syncs: not
    // synchronous DP's trajectory (which differs from this one by float order only).
    CHECK(test::largest_difference(synchronous, local) > 1e-4);
    for (std::int64_t step : {4, 6, 8, 10}) {
      INFO("step " << step);
      const auto tensors = checkpoint_tensors(d.file("checkpoints"), step);
      const auto& own = tensors.at("replica1/0.weight");
      const auto& first = tensors.at("0.weight");
      if (step % 4 == 0)
        CHECK(own == first);  // both hold the mean, the same bits
      else
        CHECK(own != first);
      // Optimizer state is each replica's own, synced or not.
      if (std::string{optimizer} == "adam")
        CHECK(tensors.at("replica1/0.weight.exp_avg") != tensors.at("0.weight.exp_avg"));
      else
        CHECK(tensors.at("replica1/0.weight.momentum_buffer") !=
              tensors.at("0.weight.momentum_buffer"));
    }
  }
}

TEST_CASE("a local SGD run resumed between syncs ends bit for bit where the straight run ends") {
  // The straight run's checkpoint after step 6 of 20 with sync_every = 4 (what an interrupt
  // leaves): each replica must get back its own parameters and Adam moments, which differ
  // at step 6; replica 0's for both would not end where the straight run ends.
  test::temp_directory d{"troupe-local-resume"};
  const auto text = equivalence_config(two_replicas + local_sgd(4), "adam");
  const auto straight = train_checkpointed(text, d.file("checkpoints"), 6);
  CHECK(resumed(text, test::checkpoint_at(d.file("checkpoints"), 6)) == straight);
}

TEST_CASE(
    "DiLoCo whose outer step is plain averaging is local SGD, and at sync_every = 1 one device") {
  // Outer SGD at lr 1 without momentum: theta - mean(theta - w_r) = mean(w_r) up to the
  // rounding of the subtractions (a few ulps a sync), so local SGD's parameters within the
  // equivalence tolerance, and at sync_every = 1 with inner SGD the single device's.
  const std::string plain_outer = "outer = \"sgd\"\nouter_lr = 1.0\nouter_momentum = 0.0\n";
  auto diloco = [&](std::int64_t sync_every) {
    return "averaging = \"diloco\"\nsync_every = " + std::to_string(sync_every) + "\n" +
           plain_outer;
  };
  const auto single = test::train_twenty_steps(equivalence_config("", "sgd"));
  for (const auto& parallel :
       {two_replicas + diloco(1), two_replicas + diloco(1) + "collective = \"gloo\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
        "pipeline = 2\nmicrobatches = 2\n" +
            diloco(1)}) {
    INFO(parallel);
    CHECK(test::largest_difference(
              single, test::train_twenty_steps(equivalence_config(parallel, "sgd"))) <= 1e-5);
  }
  const auto local =
      test::train_twenty_steps(equivalence_config(two_replicas + local_sgd(4), "sgd"));
  CHECK(test::largest_difference(local, test::train_twenty_steps(equivalence_config(
                                            two_replicas + diloco(4), "sgd"))) <= 1e-5);
}

TEST_CASE("DiLoCo's Nesterov outer step moves the run off local SGD's, and resumes bit for bit") {
  // The paper's outer optimizer (Nesterov, lr 0.7, momentum 0.9) over Adam inner steps, a
  // sync every 4 steps; checkpoints after steps 6 (between syncs) and 12 (after one).
  test::temp_directory d{"troupe-diloco"};
  const auto text =
      equivalence_config(two_replicas + "averaging = \"diloco\"\nsync_every = 4\n", "adam");
  const auto straight = train_checkpointed(text, d.file("checkpoints"), 6);
  const auto local =
      test::train_twenty_steps(equivalence_config(two_replicas + local_sgd(4), "adam"));
  CHECK(test::largest_difference(local, straight) > 1e-3);
  // The outer state: theta is the parameters right after a sync, the same on every replica.
  auto after_sync = checkpoint_tensors(d.file("checkpoints"), 12);
  CHECK(after_sync.at("0.weight.outer_params") == after_sync.at("0.weight"));
  CHECK(after_sync.at("replica1/0.weight.outer_params") == after_sync.at("0.weight.outer_params"));
  CHECK(after_sync.at("replica1/0.weight.outer_momentum") ==
        after_sync.at("0.weight.outer_momentum"));
  auto between = checkpoint_tensors(d.file("checkpoints"), 6);
  CHECK(between.at("0.weight.outer_params") != between.at("0.weight"));
  CHECK(resumed(text, test::checkpoint_at(d.file("checkpoints"), 6)) == straight);
}
