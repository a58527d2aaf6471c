// The central test (DESIGN.md "Equivalence"): every synchronous wiring computes what the
// single-device run computes. Same seed, same global batch, 20 steps, then compare every
// parameter with the single-device run.
//
// Tolerance: the wirings differ only in float summation order. A micro-batched or
// replicated step sums per-part weight gradients (each a GEMM over b = B / (R M) rows)
// instead of one GEMM over B rows, which changes a gradient by a few float ulps (relative
// ~1e-7). Adam turns a gradient into an update of size ~lr scaled by m / sqrt(v), so a
// relative gradient error e moves the update by ~e * lr; over 20 steps with lr = 0.01 the
// parameters (|p| ~ 0.1..1) move apart by ~20 * 1e-7 * 0.01, far below 1e-5 relative. A
// real wiring bug (a lost micro-batch, a stale version, a wrong scale) moves them by
// 1e-3 or more, so 1e-5 separates the two cleanly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"

using namespace troupe;
using troupe::test::equivalence_config;

namespace {

/// A small conv net on 8x8 synthetic images: unflatten, conv (padded), relu, max pool,
/// conv, avg pool, flatten, linear. Every image layer sits in some stage of the pipelines
/// below. The second conv's 16 input and output channels take oneDNN's direct convolution
/// on a CPU (Note [direct convolution] in kernels/cpu/conv2d.cpp), the first's single input
/// channel im2col and gemm: every wiring runs both.
std::string conv_config(const std::string& parallel) {
  return R"(
[run]
steps = 20
seed = 5
evaluate = false
)" + test::data_section({24, 480, 10, 64, 4}) +
         test::layer("unflatten", "height = 8\nwidth = 8\n") +
         test::layer("conv2d", "out = 16\nkernel = 3\npadding = 1\n") + test::layer("relu") +
         test::layer("max_pool2d", "kernel = 2\n") +
         test::layer("conv2d", "out = 16\nkernel = 2\nstride = 1\n") +
         test::layer("avg_pool2d", "kernel = 3\nstride = 1\npadding = 1\n") +
         test::layer("flatten") + test::linear(4) + R"(
[optimizer]
type = "adam"
lr = 0.01

)" + parallel;
}

/// A small sequence model on synthetic samples read as 6 positions of 8 features:
/// layer_norm, causal attention, a per-position linear and gelu, dropout (its masks keyed
/// by sample, so every wiring drops the same values), then a classifier.
/// Adam: the key part of attention's in_proj_bias has a true gradient of zero (softmax
/// ignores a constant added to every score of a row); computed, it was float noise that
/// Adam turned into steps of size lr whose signs followed the summation order (3% apart
/// after 2 steps between one device and M = 4), so this test used SGD. The layer now writes
/// that gradient as zero (Note [the key bias] in actors/layers/attention.cpp).
std::string sequence_config(const std::string& parallel) {
  return R"(
[run]
steps = 20
seed = 9
evaluate = false
)" + test::data_section({24, 480, 10, 48, 4}) +
         test::layer("unflatten", "positions = 6\nfeatures = 8\n") + test::layer("layer_norm") +
         test::layer("attention", "heads = 2\n") + test::linear(8) + test::layer("gelu") +
         test::layer("dropout", "p = 0.2\n") + test::layer("flatten") + test::linear(4) + R"(
[optimizer]
type = "adam"
lr = 0.01

)" + parallel;
}

/// A residual model: two blocks whose skips start at a layer also read by the next one
/// (fan-out: their gradients are summed) and end in an `add` (Note [ports] in
/// actors/training/layer_actor.cpp). Layers: 0 linear "x0", 1 relu, 2 linear "h1", 3 add "r1" =
/// x0 + h1, 4 relu, 5 linear "h2", 6 add = r1 + h2, 7 linear.
std::string residual_config(const std::string& parallel) {
  return R"(
[run]
steps = 20
seed = 13
evaluate = false
)" + test::data_section({24, 480, 10, 20, 5}) +
         test::layer("linear", "name = \"x0\"\nout = 16\n") + test::layer("relu") +
         test::layer("linear", "name = \"h1\"\nout = 16\n") +
         test::layer("add", "name = \"r1\"\ninputs = [\"x0\", \"h1\"]\n") +
         test::layer("relu") + test::layer("linear", "name = \"h2\"\nout = 16\n") +
         test::layer("add", "inputs = [\"r1\", \"h2\"]\n") + test::linear(5) + R"(
[optimizer]
type = "adam"
lr = 0.01

)" + parallel;
}

std::vector<std::vector<std::vector<float>>> train_to_parameters(const std::string& text) {
  return test::train_twenty_steps(text);
}

/// Trains `config("")` (one device) and `config(parallel)` for each named wiring, and
/// checks every parameter within 1e-5 relative of the one-device run.
void check_wirings(std::string (*config)(const std::string&),
                   const std::vector<std::pair<const char*, std::string>>& wirings) {
  const auto single = train_to_parameters(config(""));
  for (const auto& wiring : wirings) {
    const std::string name = wiring.first;  // not a binding: INFO's lambda captures it (clang 14)
    const auto difference =
        test::largest_difference(single, train_to_parameters(config(wiring.second)));
    INFO(name << ": relative difference " << difference);
    CHECK(difference <= 1e-5);
  }
}

}  // namespace

TEST_CASE("every synchronous wiring matches the single-device run after 20 steps") {
  struct wiring {
    const char* name;
    std::string parallel;
  };
  const std::vector<wiring> wirings = {
      {"micro-batched single device (M = 4)", "[parallel]\nmicrobatches = 4\n"},
      {"model parallel (P = 2)", "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\n"},
      {"pipeline GPipe (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\nschedule = "
       "\"gpipe\"\n"},
      {"pipeline 1F1B (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\nschedule = "
       "\"1f1b\"\n"},
      {"data parallel, central averaging (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"central\"\n"},
      {"data parallel, ring all-reduce (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
      {"data parallel, ring all-reduce in small buckets (R = 3, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\naveraging = \"ring\"\n"
       "share_devices = true\nbucket_kib = 1\n"},
      {"data parallel, ring all-reduce, sharded optimizer (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"
       "shard_optimizer = true\n"},
      {"data parallel, sharded optimizer in small buckets (R = 3, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\naveraging = \"ring\"\n"
       "share_devices = true\nbucket_kib = 1\nshard_optimizer = true\n"},
      {"hybrid: 2 replicas of a 2-stage 1F1B pipeline (R = 2, P = 2, M = 3)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 3\nschedule = \"1f1b\"\naveraging = \"ring\"\n"},
      {"hybrid with a sharded optimizer (R = 2, P = 2, M = 2, GPipe)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 2\nschedule = \"gpipe\"\naveraging = \"ring\"\n"
       "shard_optimizer = true\n"},
      {"data parallel, gloo all-reduce (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"gloo\"\n"},
      {"data parallel, gloo all-reduce (R = 3, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\naveraging = \"gloo\"\n"
       "share_devices = true\n"},
      {"hybrid with gloo averaging (R = 2, P = 2, M = 3, 1F1B)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 3\nschedule = \"1f1b\"\naveraging = \"gloo\"\n"},
      {"hybrid with central averaging and GPipe (R = 2, P = 2, M = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 2\nschedule = \"gpipe\"\naveraging = \"central\"\n"},
      {"pipeline 1F1B, uneven stages (P = 3 of 5 layers, M = 3)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\"]\npipeline = 3\nmicrobatches = 3\n"
       "schedule = \"1f1b\"\n"},
      {"pipeline ZB-H1 (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\nschedule = "
       "\"zb-h1\"\n"},
      {"pipeline ZB-H1, uneven stages (P = 3 of 5 layers, M = 6)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\"]\npipeline = 3\nmicrobatches = 6\n"
       "schedule = \"zb-h1\"\n"},
      {"hybrid ZB-H1 with ring averaging (R = 2, P = 2, M = 3, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nmicrobatches = 3\n"
       "schedule = \"zb-h1\"\naveraging = \"ring\"\nshare_devices = true\n"},
      {"pipeline interleaved 1F1B (P = 2, v = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nvirtual_stages = 2\n"
       "microbatches = 4\nschedule = \"1f1b\"\n"},
      {"pipeline interleaved, explicit uneven split (P = 2, v = 2, M = 6)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 0], [1, 2], [3, 3], [4, 4]]\n"
       "virtual_stages = 2\nmicrobatches = 6\nschedule = \"1f1b\"\n"},
      {"hybrid interleaved with ring averaging (R = 2, P = 2, v = 2, M = 2, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nvirtual_stages = 2\n"
       "microbatches = 2\nschedule = \"1f1b\"\naveraging = \"ring\"\nshare_devices = true\n"},
      {"pipeline with an explicit split (P = 2, M = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 3], [4, 4]]\nmicrobatches = "
       "2\n"},
  };
  for (const char* optimizer : {"adam", "sgd"}) {
    auto single = train_to_parameters(equivalence_config("", optimizer));
    for (const auto& w : wirings) {
      const auto difference = test::largest_difference(
          single, train_to_parameters(equivalence_config(w.parallel, optimizer)));
      auto what = std::string{optimizer} + ": " + w.name + ": relative difference " +
                  std::to_string(difference);
      INFO(what);
      CHECK(difference <= 1e-5);
    }
  }
}

TEST_CASE(
    "troupe verify's one device trains in the wiring's micro-batches, and a pipeline's match bit "
    "for bit") {
  const std::string two = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n";
  auto dp = parse_config(equivalence_config(two + "data = 2\nmicrobatches = 3\n"), "dp.toml");
  const auto reference = reference_form(dp);
  CHECK(reference.parallel.devices.size() == 1);
  CHECK(reference.parallel.data == 1);
  CHECK(reference.parallel.pipeline == 1);
  CHECK(reference.parallel.microbatches == 6);  // R x M of the 24 samples
  // Weighted replicas' micro-batches are not one device's equal ones: one pass.
  auto weighted =
      parse_config(equivalence_config(two + "data = 2\nbalance = [1, 2]\n"), "weighted.toml");
  CHECK(reference_form(weighted).parallel.microbatches == 1);
  // A pipeline adds its micro-batches' gradients in the single device's order: no
  // difference at all, so a tolerance of 0 passes.
  auto pp = parse_config(equivalence_config(two + "pipeline = 2\nmicrobatches = 4\n"), "pp.toml");
  CHECK(reference_form(pp).parallel.microbatches == 4);
  const auto result = verify_against_single_device(pp, 5, 0.0);
  CHECK(result.worst == 0);
  CHECK(result.passed);
}

TEST_CASE("the sharded optimizer gives the unsharded ring's parameters bit for bit") {
  // Note [sharded optimizer]: each parameter is updated once, by one replica, from the
  // same sum, with the same per-element arithmetic; R = 3 with 1 KiB buckets makes the
  // shards many short spans that start anywhere.
  for (const char* optimizer : {"adam", "sgd"}) {
    for (const char* parallel :
         {"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n",
          "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\naveraging = \"ring\"\n"
          "share_devices = true\nbucket_kib = 1\n"}) {
      std::string what = std::string{optimizer} + ": " + parallel;
      INFO(what);
      auto sharded = train_to_parameters(
          equivalence_config(std::string{parallel} + "shard_optimizer = true\n", optimizer));
      CHECK(sharded == train_to_parameters(equivalence_config(parallel, optimizer)));
    }
  }
}

TEST_CASE(
    "gloo averaging gives the ring's parameters: bit for bit with 2 replicas, within 1e-6 with 3") {
  // Both sum each element once, on one replica, and hand every replica the same bits. With
  // R = 2 that sum is a + b either way (float addition commutes), so the runs agree
  // exactly. With R = 3 gloo's ring chunks the buffer differently from troupe's ring, so
  // an element may be summed (a + b) + c on one and (b + c) + a on the other: one rounding
  // apart (relative 6e-8) per gradient, which 20 Adam steps at lr = 0.01 keep far below
  // 1e-6 (the reasoning of this file's header).
  for (const char* optimizer : {"adam", "sgd"}) {
    INFO(optimizer);
    const std::string two = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
    CHECK(train_to_parameters(equivalence_config(two + "averaging = \"gloo\"\n", optimizer)) ==
          train_to_parameters(equivalence_config(two + "averaging = \"ring\"\n", optimizer)));
    const std::string three =
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\nshare_devices = true\n";
    auto gloo =
        train_to_parameters(equivalence_config(three + "averaging = \"gloo\"\n", optimizer));
    auto ring =
        train_to_parameters(equivalence_config(three + "averaging = \"ring\"\n", optimizer));
    const auto difference = test::largest_difference(ring, gloo);
    INFO("R = 3: relative difference " << difference);
    CHECK(difference <= 1e-6);
  }
}

TEST_CASE("a batch split unevenly between replicas matches the single-device run") {
  // Note [balanced replicas]: the loss scales by the global batch and the averagers sum, so
  // which replica computes which rows changes only the order of the sums. Weights that do
  // not divide B = 24 give micro-batches of unequal rows (7 rows in M = 3: 3, 2, 2).
  const std::string two = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"ring, weights [1, 3]", two + "balance = [1, 3]\n"},
      {"central, weights [1, 2.5]", two + "averaging = \"central\"\nbalance = [1, 2.5]\n"},
      {"ring, sharded optimizer, weights [2.5, 1]",
       two + "shard_optimizer = true\nbalance = [2.5, 1]\n"},
      {"gloo, weights [1, 3]", two + "averaging = \"gloo\"\nbalance = [1, 3]\n"},
      {"ring, M = 2, weights [1, 2.5]", two + "microbatches = 2\nbalance = [1, 2.5]\n"},
      {"ring in small buckets, R = 3 shared, weights [1, 2, 3]",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 3\nshare_devices = true\n"
       "bucket_kib = 1\nbalance = [1, 2, 3]\n"},
      {"hybrid 1F1B (R = 2, P = 2, M = 3), weights [1, 2.5]",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
       "pipeline = 2\nmicrobatches = 3\nschedule = \"1f1b\"\nbalance = [1, 2.5]\n"},
  };
  for (const char* optimizer : {"adam", "sgd"}) {
    const auto single = train_to_parameters(equivalence_config("", optimizer));
    for (const auto& [name, parallel] : wirings) {
      const auto difference = test::largest_difference(
          single, train_to_parameters(equivalence_config(parallel, optimizer)));
      auto what = std::string{optimizer} + ": " + name + ": relative difference " +
                  std::to_string(difference);
      INFO(what);
      CHECK(difference <= 1e-5);
    }
  }
  // Dropout's masks are keyed by each sample's index in the global batch: the loader's tags
  // carry it, so an uneven split drops what the single device drops.
  check_wirings(sequence_config,
                {{"sequence model, weights [1, 2.5], M = 2",
                  "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nmicrobatches = 2\n"
                  "balance = [1, 2.5]\n"}});
}

TEST_CASE("weights the wiring cannot take are refused at the balance key, saying what would do") {
  const std::string two = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
  auto refused = [](const std::string& parallel, const std::string& message) {
    auto config = parse_config(equivalence_config(parallel), "balance.toml");
    test::check_refused(config, message);
  };
  refused(two + "balance = [1, 2, 3]\n",
          "[parallel] balance: 3 weight(s), but the run has 2 replica(s); give one weight a "
          "replica");
  refused(two + "microbatches = 4\nbalance = [1, 10]\n",
          "replica 0's weight gives it 2 of the 24 rows of a step, fewer than its 4 "
          "micro-batch(es)");
  refused(two + "microbatches = 13\nbalance = [1, 1]\n",
          "replica 0's weight gives it 12 of the 24 rows of a step, fewer than its 13 "
          "micro-batch(es)");
  // The error is placed at the key's value.
  const auto text = equivalence_config(two + "balance = [1, 2, 3]\n");
  const auto line = std::count(text.begin(), text.begin() + text.find("balance ="), '\n') + 1;
  auto config = parse_config(text, "balance.toml");
  test::check_refused(config, "balance.toml:" + std::to_string(line) + ":11: [parallel] balance");
}

TEST_CASE("a batch that does not split into replicas x micro-batches is refused before spawning") {
  auto config = parse_config(equivalence_config("[parallel]\nmicrobatches = 5\n"), "uneven.toml");
  test::check_refused(config,
                      "batch_size 24 must split evenly into data (1) x microbatches (5) parts");
}

TEST_CASE("an ejected config runs and gives exactly the parameters of the config it came from") {
  for (const char* parallel :
       {"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\nschedule = "
        "\"1f1b\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"
        "shard_optimizer = true\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"gloo\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nvirtual_stages = 2\n"
        "microbatches = 4\nschedule = \"1f1b\"\n",
        "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nmicrobatches = 2\n"
        "balance = [1, 2.5]\n"}) {
    auto shorthand = parse_config(equivalence_config(parallel), "shorthand.toml");
    auto ejected_text = format_explicit(prepare_session(shorthand).graph, shorthand);
    auto ejected = parse_config(ejected_text, "ejected.toml");
    REQUIRE(ejected.is_explicit());
    // The averagers keep their method through the explicit form.
    const auto original = prepare_session(shorthand).graph;
    const auto read_back = prepare_session(ejected).graph;
    REQUIRE(read_back.actors.size() == original.actors.size());
    for (std::size_t i = 0; i < original.actors.size(); ++i)
      if (original.actors[i].kind == actor_kind::averager)
        CHECK(read_back.actors[i].method == original.actors[i].method);
    CHECK(read_back.averaging == shorthand.parallel.averaging);
    CHECK(ejected.parallel.balance == shorthand.parallel.balance);
    CHECK(ejected.parallel.balance_weights == shorthand.parallel.balance_weights);
    // The same actors on the same devices run the same sums in the same order: the
    // parameters agree bit for bit.
    CHECK(train_to_parameters(ejected_text) == train_to_parameters(equivalence_config(parallel)));
  }
}

TEST_CASE("a conv net matches the single-device run under data, pipeline and hybrid wirings") {
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"data parallel, ring all-reduce (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
      {"pipeline GPipe (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\n"
       "schedule = \"gpipe\"\n"},
      {"pipeline 1F1B, the cut between the convolutions (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 3], [4, 7]]\n"
       "microbatches = 4\nschedule = \"1f1b\"\n"},
      {"pipeline ZB-H1, conv2d's split backward (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 4], [5, 7]]\n"
       "microbatches = 4\nschedule = \"zb-h1\"\n"},
      {"hybrid (R = 2, P = 2, M = 2, 1F1B, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nmicrobatches = 2\n"
       "schedule = \"1f1b\"\naveraging = \"ring\"\nshare_devices = true\n"},
  };
  check_wirings(conv_config, wirings);
}

TEST_CASE("an attention model matches the single-device run under data, pipeline and hybrid wirings") {
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"data parallel, ring all-reduce (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
      {"pipeline 1F1B, attention on stage 0 (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 2], [3, 7]]\n"
       "microbatches = 4\nschedule = \"1f1b\"\n"},
      {"pipeline ZB-H1 (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 1], [2, 7]]\n"
       "microbatches = 4\nschedule = \"zb-h1\"\n"},
      {"hybrid (R = 2, P = 2, M = 2, GPipe, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nmicrobatches = 2\n"
       "schedule = \"gpipe\"\naveraging = \"ring\"\nshare_devices = true\n"},
  };
  check_wirings(sequence_config, wirings);
}

TEST_CASE("a residual model matches the single-device run, its skips cut by every pipeline") {
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"data parallel, ring all-reduce (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
      {"pipeline GPipe, the skip x0 -> r1 across the cut (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 2], [3, 7]]\n"
       "microbatches = 4\nschedule = \"gpipe\"\n"},
      {"pipeline 1F1B, the skip r1 -> add across the cut (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 4], [5, 7]]\n"
       "microbatches = 4\nschedule = \"1f1b\"\n"},
      {"pipeline ZB-H1, the skip x0 -> r1 across the cut (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 2], [3, 7]]\n"
       "microbatches = 4\nschedule = \"zb-h1\"\n"},
      {"interleaved 1F1B, a skip over two stages (P = 2, v = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nvirtual_stages = 2\n"
       "stages = [[0, 1], [2, 3], [4, 5], [6, 7]]\nmicrobatches = 4\nschedule = \"1f1b\"\n"},
      {"hybrid (R = 2, P = 2, M = 2, 1F1B, devices shared)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nmicrobatches = 2\n"
       "schedule = \"1f1b\"\naveraging = \"ring\"\nshare_devices = true\n"},
  };
  check_wirings(residual_config, wirings);
  // Ejected, the skip wires are [[wire]] tables, and the explicit config runs the same.
  const auto pipelined = residual_config(wirings[1].second);
  auto config = parse_config(pipelined, "residual.toml");
  auto prepared = prepare_session(config);
  CHECK(train_to_parameters(format_explicit(prepared.graph, config)) ==
        train_to_parameters(pipelined));
}
