// pytorch_trajectory_test.cpp: troupe started from PyTorch-written weights ([model]
// init_from) follows PyTorch's own trajectory: the shipped MLP (784-256-relu-256-relu-10) on
// the first 20 Fashion-MNIST batches in file order, with SGD (momentum) and with Adam, each
// step's loss and the final parameters against tests/reference/interchange_reference.json
// (tests/reference/make_interchange_reference.py wrote it and the initial weights with
// torch 1.13). Also: a run from weights starts from exactly those weights, and init_from
// with --resume continues the checkpoint.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/jsonl.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

const std::string reference_dir = std::string{TROUPE_SOURCE_DIR} + "/tests/reference/";
const std::string fashion_dir = "/usr/share/datasets/fashion-mnist";

nlohmann::json read_reference() {
  std::ifstream in(reference_dir + "interchange_reference.json");
  REQUIRE_MESSAGE(in.good(), "cannot open " << reference_dir << "interchange_reference.json");
  return nlohmann::json::parse(in);
}

bool have_fashion_mnist() {
  if (std::filesystem::exists(fashion_dir + "/train-images-idx3-ubyte.gz"))
    return true;
  MESSAGE("skipped: no Fashion-MNIST under " << fashion_dir << " (Debian's dataset-fashion-mnist)");
  return false;
}

// The shipped MLP's troupe config for one reference run: its optimizer, the reference's
// weights, data and batches, a constant learning rate, no evaluation.
std::string trajectory_config(const nlohmann::json& reference, const nlohmann::json& run,
                              std::int64_t steps, const std::string& cpu_gemm) {
  const auto& h = run["hyper"];
  std::string optimizer = "[optimizer]\ntype = \"" + run["optimizer"].get<std::string>() + "\"\n" +
                          "lr = " + shortest_text(h["lr"].get<double>()) + "\n" +
                          "weight_decay = " + shortest_text(h["weight_decay"].get<double>()) + "\n";
  if (run["optimizer"] == "sgd")
    optimizer += "momentum = " + shortest_text(h["momentum"].get<double>()) +
                 "\ndampening = " + shortest_text(h["dampening"].get<double>()) +
                 "\nnesterov = " + (h["nesterov"].get<bool>() ? "true" : "false") + "\n";
  else
    optimizer += "betas = [" + shortest_text(h["beta1"].get<double>()) + ", " +
                 shortest_text(h["beta2"].get<double>()) +
                 "]\neps = " + shortest_text(h["eps"].get<double>()) + "\n";
  return "[run]\nsteps = " + std::to_string(steps) + "\nevaluate = false\ncpu_gemm = \"" +
         cpu_gemm + "\"\n" +
         "\n[data]\nsource = \"fashion-mnist\"\npath = \"" + fashion_dir +
         "\"\nbatch_size = " + std::to_string(reference["batch_size"].get<int>()) +
         "\nshuffle = false\n" + "\n[model]\ninit_from = \"" + reference_dir +
         reference["initial_weights"].get<std::string>() + "\"\n" + test::linear(256) +
         test::layer("relu") + test::linear(256) + test::layer("relu") + test::linear(10) + "\n" +
         optimizer;
}

// Each step's loss from a metrics file.
std::vector<double> losses_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> out;
  for (const auto& r : test::read_jsonl(in))
    if (r.contains("loss") && !r.contains("event"))
      out.push_back(r["loss"].get<double>());
  return out;
}

double relative(double value, double reference) {
  return std::abs(value - reference) / std::max(std::abs(reference), 1e-30);
}

struct trajectory {
  std::vector<double> losses;
  session_result result;
};

// `cpu_gemm`: OpenBLAS, the library PyTorch's reference run used, unless a test says
// otherwise (Note [trajectory tolerances]).
trajectory run_trajectory(const nlohmann::json& reference, const nlohmann::json& run,
                          std::int64_t steps, const std::string& cpu_gemm = "openblas") {
  const auto metrics = test::temp_file("trajectory_" + run["name"].get<std::string>() + ".jsonl");
  auto options = test::quiet_options(metrics);
  options.keep_parameters = true;
  const auto config =
      parse_config(trajectory_config(reference, run, steps, cpu_gemm), "trajectory.toml");
  trajectory t;
  t.result = test::run_ok(config, options);
  t.losses = losses_of(metrics);
  return t;
}

}  // namespace

// Note [trajectory tolerances]
// troupe and PyTorch do the same float32 arithmetic in different orders (OpenBLAS's GEMM
// blocking against torch's, troupe's bias and loss reductions against ATen's), so each op
// differs by a few float32 ulps, ~1e-7 relative. Measured (torch 1.13, OpenBLAS 0.3.21):
// the first loss is identical; over 20 steps the losses differ by at most 2.1e-7 relative
// (SGD and Adam alike), the parameters' sums of squares by 1.5e-7, sampled values by 5.7e-6
// of max(|value|, the tensor's rms) (Adam; 4.8e-7 SGD) and by 1.6e-5 of the rms of their
// change from the start (Adam; 1.8e-6 SGD). The tolerances:
// - the first loss, 1e-6: one forward from the same weights on the same batch, no
//   amplification; a weight put in the wrong place, transposed or from another seed moves
//   it by 1e-2 or more;
// - each step's loss and the final parameters, 1e-4 relative (issue 10's contract): 500x
//   the float noise seen, while a small mistake moves the losses 50x past it (measured in
//   torch: the learning rate 1% off, momentum 0.89 or beta2 0.99, the batches shifted by
//   one sample give 5.7e-3 to 1.2e-1 relative in some step). "Relative" for a value is taken
//   against max(|value|, the tensor's rms): a value that happens to lie near zero has no
//   meaningful relative error of its own;
// - a sampled value against the rms of the tensor's change over the 20 steps, 1e-3: a
//   stricter view (the change is what training did, 2x to 10x smaller than the values),
//   which Adam's steps, near lr * sign(gradient) while gradients are small, amplify most.
// These hold because troupe runs its GEMMs through OpenBLAS here, as PyTorch did: the same
// blocking, so most products agree to the bit. With oneDNN's GEMM ([run] cpu_gemm, the
// default on AVX-512 CPUs: its own summation order) SGD holds them alike (worst loss 1.1e-7),
// but Adam does not: its first steps move each weight by about lr * sign(gradient), so a
// weight whose gradient is at rounding level moves by +-lr on either library's whim, and the
// difference feeds every later step (measured: losses 1e-4 to 9e-3 apart by step 20, sampled
// values up to 0.12 of their change's rms). That is Adam's conditioning, not an error:
// oneDNN's products are held to the float32 bound in tests/kernels/gemm_test.cpp. So Adam is
// compared on OpenBLAS only, SGD on both.
constexpr double first_loss_tolerance = 1e-6;
constexpr double trajectory_tolerance = 1e-4;
constexpr double change_tolerance = 1e-3;

TEST_CASE("from PyTorch's initial weights, troupe's first loss is PyTorch's") {
  if (!have_fashion_mnist())
    return;
  const auto reference = read_reference();
  for (const auto& run : reference["runs"]) {
    CAPTURE(run["name"].get<std::string>());
    const auto t = run_trajectory(reference, run, 1);
    REQUIRE(t.losses.size() == 1);
    const double torch_loss = run["losses"][0].get<double>();
    INFO("troupe ", t.losses[0], ", torch ", torch_loss);
    CHECK(relative(t.losses[0], torch_loss) < first_loss_tolerance);
  }
}

TEST_CASE("troupe follows PyTorch's 20-step trajectory from the same weights and batches") {
  if (!have_fashion_mnist())
    return;
  const auto reference = read_reference();
  const auto initial =
      read_safetensors(reference_dir + reference["initial_weights"].get<std::string>());
  // Adam's trajectory holds to the tolerance with the OpenBLAS kernels the reference was
  // checked with (scripts/test.sh sets OPENBLAS_CORETYPE=Haswell on x86-64 when unset).
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  INFO("OPENBLAS_CORETYPE=" << (coretype != nullptr ? coretype : "(unset: OpenBLAS picks by CPU)"));
  struct variant {
    nlohmann::json run;
    std::string cpu_gemm;
  };
  std::vector<variant> variants;
  for (const auto& run : reference["runs"]) {
    variants.push_back({run, "openblas"});
    if (run["optimizer"] == "sgd")  // Note [trajectory tolerances]: Adam on OpenBLAS only
      variants.push_back({run, "onednn"});
  }
  for (const auto& v : variants) {
    const auto& run = v.run;
    const auto name = run["name"].get<std::string>() + " on " + v.cpu_gemm;
    CAPTURE(name);
    const auto steps = reference["steps"].get<std::int64_t>();
    const auto t = run_trajectory(reference, run, steps, v.cpu_gemm);
    REQUIRE(t.losses.size() == static_cast<std::size_t>(steps));
    double worst_loss = 0;
    for (std::int64_t k = 0; k < steps; ++k) {
      const double torch_loss = run["losses"][k].get<double>();
      CAPTURE(k);
      CHECK(relative(t.losses[k], torch_loss) < trajectory_tolerance);
      worst_loss = std::max(worst_loss, relative(t.losses[k], torch_loss));
    }

    // Final parameters: layer i's "weight" and "bias" are parameters[i][0] and [1].
    double worst_value = 0, worst_change = 0;
    for (const auto& item : run["final"].items()) {
      const std::string& tensor_name = item.key();  // not a binding: CAPTURE's lambda (clang 14)
      const auto& digest = item.value();
      CAPTURE(tensor_name);
      const auto dot = tensor_name.find('.');
      const auto layer = static_cast<std::size_t>(std::stoi(tensor_name.substr(0, dot)));
      const auto index = tensor_name.substr(dot + 1) == "weight" ? 0 : 1;
      REQUIRE(t.result.parameters.size() > layer);
      const auto& values = t.result.parameters[layer].at(index);
      const auto start = initial.values<float>(tensor_name);
      REQUIRE(values.size() == start.size());
      double sum = 0, squares = 0, change = 0;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double v = values[i], d = v - start[i];
        sum += v;
        squares += v * v;
        change += d * d;
      }
      const double n = static_cast<double>(values.size());
      const double torch_squares = digest["sum_squares"].get<double>();
      const double torch_change = digest["change_sum_squares"].get<double>();
      CHECK(relative(squares, torch_squares) < trajectory_tolerance);
      CHECK(relative(change, torch_change) < trajectory_tolerance);
      // A sum may cancel to near zero: against its bound sqrt(n) * ||w|| (Cauchy-Schwarz).
      CHECK(std::abs(sum - digest["sum"].get<double>()) / std::sqrt(n * torch_squares) <
            trajectory_tolerance);
      const double rms = std::sqrt(torch_squares / n), change_rms = std::sqrt(torch_change / n);
      for (const auto& s : digest["samples"]) {
        const auto i = s[0].get<std::size_t>();
        const double torch_value = s[1].get<double>();
        CAPTURE(i);
        REQUIRE(static_cast<float>(s[2].get<double>()) == start.at(i));  // the same start
        const double d = std::abs(values.at(i) - torch_value);
        CHECK(d / std::max(std::abs(torch_value), rms) < trajectory_tolerance);
        CHECK(d / change_rms < change_tolerance);
        worst_value = std::max(worst_value, d / std::max(std::abs(torch_value), rms));
        worst_change = std::max(worst_change, d / change_rms);
      }
    }
    MESSAGE(name << " vs PyTorch: worst relative difference of a step's loss " << worst_loss
                 << ", of a sampled final parameter " << worst_value << " (" << worst_change
                 << " of the rms of its change)");
  }
}

TEST_CASE("a run from init_from starts from exactly the file's weights") {
  // SGD with lr 1e-30: the one update is far below half an ulp of every weight, so the
  // parameters after it are the start, bit for bit. A weight taken from the seed, from
  // another tensor of the file or transposed would differ.
  const test::temp_directory dir{"troupe-init-from"};
  const std::vector<std::pair<std::string, shape_t>> tensors{
      {"0.weight", {4, 6}}, {"0.bias", {4}}, {"2.weight", {3, 4}}, {"2.bias", {3}}};
  std::vector<std::vector<float>> values;
  std::vector<safetensors_tensor_ref> refs;
  values.reserve(tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    values.emplace_back(static_cast<std::size_t>(element_count(tensors[t].second)));
    for (std::size_t i = 0; i < values.back().size(); ++i)  // distinct, none near zero
      values.back()[i] = (i % 2 ? -1.0f : 1.0f) * (0.25f + 0.01f * static_cast<float>(t * 31 + i));
    refs.push_back(
        {tensors[t].first, safetensors_dtype::f32, tensors[t].second, values.back().data()});
  }
  write_safetensors(dir / "start.safetensors", refs, {{"format", "pt"}});
  // One device; two replicas with the sharded optimizer (each replica's optimizer updates
  // half of each layer and the ring gathers the halves: a replica that missed the start
  // shows in the other's parameters); two pipeline stages.
  for (const std::string parallel :
       {"", "devices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nshard_optimizer = true\n",
        "devices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 2\n"}) {
    CAPTURE(parallel);
    const auto config = parse_config(
        "[run]\nsteps = 1\nevaluate = false\n" + test::data_section({16, 64, 16, 6, 3}) +
            "\n[model]\ninit_from = \"start.safetensors\"\n" + test::linear(4) +
            test::layer("relu") + test::linear(3) +
            "\n[optimizer]\ntype = \"sgd\"\nlr = 1e-30\n[parallel]\n" + parallel,
        dir / "start.toml", dir.string());
    CHECK(config.model.init_from == dir / "start.safetensors");  // relative to the config
    auto options = test::quiet_options();
    options.keep_parameters = true;
    const auto result = test::run_ok(config, options);
    REQUIRE(result.parameters.size() == 3);
    CHECK(result.parameters[0] == std::vector<std::vector<float>>{values[0], values[1]});
    CHECK(result.parameters[1].empty());
    CHECK(result.parameters[2] == std::vector<std::vector<float>>{values[2], values[3]});
  }
}

TEST_CASE("a run from init_from resumes from its checkpoint with the same config") {
  const test::temp_directory dir{"troupe-init-from"};
  std::vector<float> weight(18), bias(3);
  for (std::size_t i = 0; i < weight.size(); ++i)
    weight[i] = 0.05f * static_cast<float>(i) - 0.4f;
  write_safetensors(dir / "w.safetensors",
                    {{"0.weight", safetensors_dtype::f32, {3, 6}, weight.data()},
                     {"0.bias", safetensors_dtype::f32, {3}, bias.data()}});
  auto config =
      parse_config("[run]\nsteps = 6\nevaluate = false\n" + test::data_section({16, 64, 16, 6, 3}) +
                       "\n[model]\ninit_from = \"w.safetensors\"\n" + test::linear(3),
                   dir / "both.toml", dir.string());
  auto train = [&](std::int64_t steps, const std::string& checkpoint, const std::string& resume) {
    return test::train_resumable(config, steps, checkpoint, resume);
  };
  const auto straight = train(6, "", "");
  train(3, dir / "checkpoints", "");
  CHECK(train(6, "", dir / "checkpoints") == straight);
  // Without the checkpoint the second half would start from init_from's weights again.
  CHECK(train(3, "", "") != straight);
}
