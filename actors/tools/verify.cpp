// verify.cpp: running a wiring against the single-device run.
#include "actors/tools/verify.hpp"

#include <cmath>
#include <map>

#include "actors/session/session.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/restore.hpp"

namespace troupe {

run_config single_device_form(const run_config& config) {
  run_config single = config;
  auto& p = single.parallel;
  if (p.devices.size() > 1)
    p.devices.resize(1);
  // One process: the device of node0 (a multi-node config's first device may be another's).
  for (auto& d : p.devices) {
    d.id.node = 0;
    d.name = d.id.to_string();
  }
  single.cluster.nodes = 0;
  p.data = 1;
  p.pipeline = 1;
  p.microbatches = 1;
  p.stage_ranges.clear();
  return single;
}

// Note [the reference's micro-batches]
// troupe verify's reference trains on one device the same global batches in the same
// micro-batches as the wiring does in all (R x M when a batch splits evenly into them),
// accumulated in order: the same math as one pass over the batch, summed in the same
// pieces. Why not one pass: with Adam, an element whose gradient is at the scale of eps
// (a weight of a pixel that is almost always 0) moves by a fraction of the learning rate
// that the gradient's last bits decide, so summing a batch in two halves (DP2) instead of
// in one pass moves it by more than the tolerance though nothing is wrong. On an Intel Xeon
// (OpenBLAS's SkylakeX kernels) one weight of layer 0 of the shipped DP2 MLP differed from
// one pass by 1.58e-5 of the layer's largest after one step, and stayed there for 20 steps
// (1.7e-7 with SGD, 5.9e-7 with eps 1e-6); one device with 2 micro-batches differed from
// DP2 by 8.5e-8. The equivalence tests (tests/actors/session/equivalence_test.cpp) still hold
// every wiring against one pass, on models and data where eps does not decide.
// Note [verify's tolerance in bf16]
// Two wirings in bf16 do what two wirings in fp32 do: the same products, summed in another
// order, so their fp32 results differ in the last bits. But a bf16 run then rounds those
// results to bf16 as the next layer's input: an element within that difference of a
// rounding boundary rounds to the neighbouring bf16 value in one run and not the other, a
// jump of one bf16 unit in the last place (bf16 keeps 8 significant bits: 2^-8 to 2^-7 of
// the value) instead of one float unit (2^-23). Adam makes every such gradient difference a
// difference of the step. Measured over 20 steps, wiring against
// one device, both in bf16 (2026-12-06, Intel Xeon VM with AMX): the shipped MLP wirings
// 0 to 2.4e-7 (the layers' inputs rounded alike), config/char_lm_dp2.toml 4.7e-4 (AdamW,
// inputs to every linear layer rounded). So a bf16 config is held to 2^-8 = 3.9e-3 of each
// tensor's largest value: 8x the worst measured, bf16's unit roundoff (half a unit in its
// last place, relative); a mistake in the wiring (a lost or doubled micro-batch, a stale
// version) changes gradients by whole parts of themselves, not by their last bf16 place.
double default_tolerance(const run_config& config) {
  return config.run.precision == numeric_precision::bf16 ? 1.0 / 256 : 1e-5;
}

run_config reference_form(const run_config& config) {
  auto single = single_device_form(config);
  const auto& p = config.parallel;
  const std::int64_t pieces = p.data * p.microbatches;
  if (pieces > 1 && p.balance == replica_balance::even && config.data.batch_size % pieces == 0)
    single.parallel.microbatches = pieces;
  return single;
}

std::vector<parameter_difference> compare_parameters(
    const std::vector<std::vector<std::vector<float>>>& reference,
    const std::vector<std::vector<std::vector<float>>>& other) {
  TROUPE_CHECK(reference.size() == other.size(), "parameters of " << reference.size() << " and "
                                                                  << other.size() << " layers");
  std::vector<parameter_difference> out;
  for (std::size_t l = 0; l < reference.size(); ++l) {
    TROUPE_CHECK(reference[l].size() == other[l].size(), "layer " << l << " parameter counts differ");
    for (std::size_t p = 0; p < reference[l].size(); ++p) {
      const auto& a = reference[l][p];
      const auto& b = other[l][p];
      TROUPE_CHECK(a.size() == b.size(), "layer " << l << " parameter " << p << " sizes differ");
      double scale = 0, difference = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, std::abs(static_cast<double>(a[i])));
        difference = std::max(difference, std::abs(static_cast<double>(a[i]) - b[i]));
      }
      double relative = difference == 0 ? 0 : difference / std::max(scale, 1e-30);
      out.push_back({static_cast<std::int64_t>(l), static_cast<std::int64_t>(p), relative});
    }
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> parameters_in_checkpoint(const run_config& config,
                                                                      const std::string& root) {
  auto checkpoint = resolve_resume_path(root);
  auto manifest = verify_checkpoint(checkpoint.path);
  auto tensors = read_checkpoint_tensors(checkpoint.path, manifest);
  const auto prepared = prepare_session(single_device_form(config));
  std::vector<std::vector<std::vector<float>>> out(prepared.graph.shapes.size() - 1);
  for (const auto& layer : prepared.model)
    for (const auto& param : layer.params) {
      auto name = parameter_name(layer.index, param.name);
      auto found = tensors.find(name);
      if (found == tensors.end())
        throw data_error("checkpoint '" + checkpoint.path + "' has no tensor '" + name + "'");
      out.at(static_cast<std::size_t>(layer.index)).push_back(std::move(found->second));
    }
  return out;
}

namespace {

// Fills in each difference's layer type and parameter name ("linear", "weight").
void name_parameters(const std::vector<model_layer>& model,
                     std::vector<parameter_difference>& differences) {
  std::map<std::int64_t, const model_layer*> by_index;  // not a scan per parameter
  for (const auto& layer : model)
    by_index.emplace(layer.index, &layer);
  for (auto& d : differences) {
    const auto found = by_index.find(d.layer);
    if (found == by_index.end() ||
        d.parameter >= static_cast<std::int64_t>(found->second->params.size()))
      continue;
    d.layer_type = found->second->type;
    d.name = found->second->params[static_cast<std::size_t>(d.parameter)].name;
  }
}

}  // namespace

verify_result verify_against_single_device(const run_config& config, std::int64_t steps,
                                           double tolerance, const parallel_run& run_parallel) {
  if (config.is_explicit())
    throw user_error("troupe verify needs the shorthand form ([model] and [parallel]) to know "
                     "the single-device model; verify the config you ejected this one from");
  auto train = [&](run_config c, const char* which) {
    c.run.steps = steps;
    c.run.evaluate = false;
    c.run.checkpoint.clear();  // a comparison, not the run itself: it writes no checkpoints
    session_options options;
    options.quiet = true;
    options.keep_parameters = true;
    options.metrics_path = "/dev/null";
    auto result = run_session(c, options);
    if (result.outcome.exit_code != exit_code::ok)
      throw user_error(std::string{"the "} + which + " run failed: " + result.outcome.failure,
                       exit_code::run_failed);
    return result;
  };
  auto reference = train(reference_form(config), "single-device");
  auto parallel =
      run_parallel ? run_parallel(config, steps) : train(config, "parallel").parameters;
  verify_result result;
  result.differences = compare_parameters(reference.parameters, parallel);
  name_parameters(reference.model, result.differences);
  for (const auto& d : result.differences)
    result.worst = std::max(result.worst, d.relative);
  result.passed = result.worst <= tolerance;
  return result;
}

}  // namespace troupe
