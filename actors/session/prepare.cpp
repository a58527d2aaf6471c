// prepare.cpp: everything a run checks before anything is spawned (see session.hpp):
// the model's shapes, the data, the actor graph, the steps, the learning-rate schedule,
// and where the run starts (step 0, init_from's weights or a checkpoint).
//
// Not here: output paths (checked by the session's first phase), devices and actors.
#include "actors/session/prepare.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <optional>
#include <sstream>

#include "actors/training/data_loader_actor.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/interchange.hpp"
#include "runtime/checkpoint/safetensors_arrays.hpp"
#include "runtime/data/csv.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/given.hpp"
#include "runtime/data/images.hpp"
#include "runtime/data/npy.hpp"
#include "runtime/data/npz.hpp"
#include "runtime/data/text.hpp"
#include "runtime/data/tokens.hpp"
#include "runtime/graph/model_graph.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/model/loss.hpp"
#include "runtime/plugin/plugin.hpp"

namespace troupe {

std::vector<shape_t> layer_shapes(const run_config& config, std::int64_t input_features) {
  // A layer's output for the largest batch it sees must fit limits::max_tensor_elements,
  // or a config (a conv2d of 65536 channels) would be killed for memory mid-run.
  const auto batch = std::max(config.data.batch_size, config.data.eval_batch_size);
  std::vector<const layer_config*> layers;
  std::vector<source_position> where;
  for (const auto& layer : config.model.layers) {
    layers.push_back(&layer);
    where.push_back(layer.where);
  }
  auto fits_limit = [&](std::size_t i, const shape_t& output) {
    std::int64_t values = batch;
    bool fits = true;
    for (auto d : output) {
      const auto product = checked_multiply(values, d);
      fits = fits && product && *product <= limits::max_tensor_elements;
      values = fits ? *product : 0;
    }
    if (!fits)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' outputs " + shape_to_string(output) +
                             " per sample, more than the limit of " +
                             std::to_string(limits::max_tensor_elements) +
                             " values for a batch of " + std::to_string(batch) +
                             "; use a smaller layer or batch");
  };
  const auto model =
      infer_shapes(layers, resolve_inputs(config.model), {input_features}, where, fits_limit);
  auto shapes = model.input;
  shapes.push_back(model.output.back());
  return shapes;
}

std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes, std::int64_t positions) {
  const auto shapes = layer_shapes(config, input_features);
  const auto inputs = resolve_inputs(config.model);
  std::vector<const layer_config*> layers;
  for (const auto& layer : config.model.layers)
    layers.push_back(&layer);
  // A layer that reads token ids must know every id the data holds (a text's vocabulary).
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto ids = create_layer(*layers[i])->input_ids();
    // Images are values, not ids: found at step 0 it was exit 1 ("token id -0.17676").
    const bool text = config.data.source == data_source::text;
    if (ids > 0 && inputs[i].front() == data_input && !text &&
        config.data.source != data_source::tokens)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' reads token ids, but [data] source = \"" +
                             to_string(config.data.source) +
                             "\" gives feature values; token ids come from source = \"text\" "
                             "or \"tokens\"");
    if (ids > 0 && positions > 1 && inputs[i].front() == data_input && ids < classes)
      throw config_error(layers[i]->where,
                         "layer '" + layers[i]->type + "' reads token ids below " +
                             std::to_string(ids) + ", and " +
                             (text ? "the text has " + std::to_string(classes) +
                                         " distinct tokens (bytes)"
                                   : "the vocabulary has " + std::to_string(classes) + " ids") +
                             "; set its vocab to " + std::to_string(classes));
  }
  const auto& out = shapes.back();
  const auto expected = loss_input_shape(classes, positions);
  const bool values = loss_spec_of(config.model).targets == target_kind::values;
  if (out != expected) {
    const auto& last = config.model.layers.back();
    throw config_error(last.where,
                       "the model's output shape " + shape_to_string(out) + " must be " +
                           shape_to_string(expected) +
                           (values ? ", one value per target of a sample ([model] loss = \"" +
                                         config.model.loss + "\")"
                            : positions > 1 ? ", one logit per token of the vocabulary at each "
                                              "of the sequence's positions"
                                            : ", one logit per class of the data set") +
                           "; change the last layer's 'out'");
  }
  return shapes;
}


image_settings image_settings_of(const run_config& config) {
  const auto& d = config.data;
  image_settings images;
  images.channels = d.channels;
  images.height = d.image_height;
  images.width = d.image_width;
  images.scale = d.scale;
  images.mean = d.mean;
  images.std = d.std;
  images.crop_padding = d.crop_padding;
  images.flip = d.flip;
  images.seed = config.run.seed;
  images.workers = d.workers;
  return images;
}

std::string describe_classes(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i == 8) {
      out += ", ... (" + std::to_string(names.size()) + " in all)";
      break;
    }
    out += (i ? ", " : "") + std::to_string(i) + " = " + quote_user_text(names[i]);
  }
  return names.empty() ? "(none: not an image folder)" : out;
}

namespace {

/// source = "npz" or "safetensors": the arrays `features` and `targets` ("x" and "y") of
/// path's file and of test_path's.
dataset_split load_named_arrays(const run_config& config, target_kind targets,
                                const feature_normalisation& normalisation) {
  const auto& d = config.data;
  const auto x = d.features.empty() ? std::string("x") : d.features;
  const auto y = d.targets.empty() ? std::string("y") : d.targets;
  auto split_of = [&](const std::string& file) {
    if (d.source == data_source::npz)
      return npy_split_arrays{npz_array(file, x), npz_array(file, y)};
    return npy_split_arrays{safetensors_array(file, x), safetensors_array(file, y)};
  };
  const auto train = split_of(d.path);
  if (d.test_path.empty())
    return load_arrays(train, nullptr, normalisation, targets);
  const auto test = split_of(d.test_path);
  return load_arrays(train, &test, normalisation, targets);
}

/// The config's source read with `normalisation` (npy, npz, safetensors, csv, images),
/// before any hold-out.
dataset_split load_source(const run_config& config, target_kind targets,
                          const feature_normalisation& normalisation) {
  const auto& d = config.data;
  if (d.given != nullptr)
    return d.given->load(targets, normalisation);
  if (d.source == data_source::synthetic)
    return make_synthetic(d.synthetic_train, d.synthetic_test, d.synthetic_features,
                          d.synthetic_classes, config.run.seed);
  if (d.source == data_source::text)
    return make_text_dataset(read_text_corpus(d.path, d.validation_every, d.context), d.context);
  if (d.source == data_source::tokens)
    return load_tokens(token_source{d.path, d.test_path, d.token_dtype, d.vocabulary, d.context,
                                    d.random_windows ? token_windows::random : token_windows::tiled,
                                    d.validation});
  if (d.source == data_source::images)
    return load_images(d.path, d.test_path, image_settings_of(config));
  if (d.source == data_source::npz || d.source == data_source::safetensors)
    return load_named_arrays(config, targets, normalisation);
  if (d.source == data_source::npy)
    return load_npy(d.features, d.targets, d.test_features, d.test_targets, normalisation,
                    targets);
  if (d.source == data_source::csv)
    return load_csv(d.path, d.test_path, csv_columns{d.target_columns, d.feature_columns, d.delimiter},
                    targets, normalisation);
  return load_fashion_mnist(d.path);
}

/// The source, with [data] validation held out of the training split.
dataset_split load_held_out(const run_config& config, target_kind targets,
                            const feature_normalisation& normalisation) {
  auto split = load_source(config, targets, normalisation);
  if (config.data.validation > 0 && config.data.source != data_source::tokens)  // its own
    split.validation = hold_out(split.train, config.data.validation, config.run.seed);
  return split;
}

/// [data] normalize = "standard": every split normalised with each feature's mean and std
/// over the (held-in) training split: the source read again with them (a file's rows opened
/// again, a CSV table parsed again), each value normalised from the file's own, in double.
void standardize(const run_config& config, target_kind targets, dataset_split& split) {
  const auto statistics = statistics_of(split.train);
  const feature_normalisation standard{{1.0}, statistics.mean, statistics.std};
  split = load_held_out(config, targets, standard);  // the same hold-out: keyed by the seed
  split.feature_mean = statistics.mean;
  split.feature_std = statistics.std;
}

dataset_split load_data(const run_config& config, target_kind targets) {
  const auto& d = config.data;
  auto split = load_held_out(config, targets, feature_normalisation{d.scale, d.mean, d.std});
  if (d.standardize)
    standardize(config, targets, split);
  return split;
}

/// The [model] loss's spec, checked against the data's targets.
loss_spec checked_loss(const run_config& config, const dataset_split& data) {
  auto spec = loss_spec_of(config.model);
  const bool values = spec.targets == target_kind::values;
  if (values != (data.train.outputs > 0))
    throw config_error(config.model.loss_type_where,
                       "[model] loss = \"" + config.model.loss + "\" compares " +
                           (values ? std::string("float targets, but [data] source = \"") +
                                         to_string(config.data.source) +
                                         "\" gives class labels; float targets come from "
                                         "source = \"npy\", \"npz\", \"safetensors\" or \"csv\""
                                   : std::string("class labels, but the data has float targets")));
  return spec;
}

/// [parallel] balance = [w0, w1, ...]: each replica's rows of a step (Note [balanced
/// replicas] in actors/training/data_loader_actor.cpp), one weight a replica and M rows at least.
std::vector<std::int64_t> weighted_rows(const run_config& config, const topology& graph) {
  const auto& parallel = config.parallel;
  const auto batch = config.data.batch_size;
  const auto& weights = parallel.balance_weights;
  const std::string key = "[parallel] balance: ";
  if (static_cast<std::int64_t>(weights.size()) != graph.replicas)
    throw config_error(parallel.balance_where, key + std::to_string(weights.size()) +
                                                   " weight(s), but the run has " +
                                                   std::to_string(graph.replicas) +
                                                   " replica(s); give one weight a replica");
  auto rows = apportion_rows(batch, weights);
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (rows[r] < graph.microbatches)
      throw config_error(parallel.balance_where,
                         key + "replica " + std::to_string(r) + "'s weight gives it " +
                             std::to_string(rows[r]) + " of the " + std::to_string(batch) +
                             " rows of a step, fewer than its " +
                             std::to_string(graph.microbatches) +
                             " micro-batch(es); raise its weight or the batch size");
  return rows;
}

run_plan make_plan(const run_config& config, const topology& graph, const dataset_split& data) {
  const auto& d = config.data;
  run_plan plan;
  plan.batch_size = d.batch_size;
  plan.replicas = graph.replicas;
  plan.microbatches = graph.microbatches;
  if (data.train.epoch_samples() < d.batch_size)
    throw config_error(d.where, "[data] batch_size " + std::to_string(d.batch_size) +
                                    " is larger than the training set (" +
                                    std::to_string(data.train.epoch_samples()) + " samples" +
                                    (data.train.draws_per_epoch > 0 ? " an epoch)" : ")"));
  if (config.parallel.balance == replica_balance::weights)
    plan.replica_rows = weighted_rows(config, graph);
  else if (d.batch_size % (plan.replicas * plan.microbatches) != 0)
    throw config_error(config.parallel.where,
                       "[data] batch_size " + std::to_string(d.batch_size) +
                           " must split evenly into data (" + std::to_string(plan.replicas) +
                           ") x microbatches (" + std::to_string(plan.microbatches) +
                           ") parts; use a batch size that is a multiple of " +
                           std::to_string(plan.replicas * plan.microbatches));
  else
    plan.replica_rows.assign(static_cast<std::size_t>(plan.replicas), d.batch_size / plan.replicas);
  plan.steps_per_epoch = data.train.epoch_samples() / d.batch_size;
  // epochs x steps per epoch, overflow-checked and bounded: a step count past the limit is
  // refused here rather than wrapping (Note [input limits] in runtime/base/limits.hpp).
  const auto total = config.run.steps > 0
                         ? std::optional<std::int64_t>{config.run.steps}
                         : checked_multiply(config.run.epochs, plan.steps_per_epoch);
  if (!total || *total > limits::max_steps)
    throw config_error(
        config.run.where,
        (config.run.steps > 0 ? "[run] steps (or --steps) = " + std::to_string(config.run.steps)
                              : "[run] epochs = " + std::to_string(config.run.epochs) + " x " +
                                    std::to_string(plan.steps_per_epoch) + " steps per epoch") +
            " is more than the limit of " + std::to_string(limits::max_steps) + " steps in a run");
  plan.total_steps = *total;
  plan.epochs = (plan.total_steps + plan.steps_per_epoch - 1) / plan.steps_per_epoch;
  plan.evaluate = config.run.evaluate && data.test.count > 0;
  plan.eval_batch_size = d.eval_batch_size;
  plan.eval_batches = (data.test.count + d.eval_batch_size - 1) / d.eval_batch_size;
  plan.positions = data.train.positions;
  // The trainer counts every step and evaluation batch of the run (run_control): that
  // count must fit too.
  const auto eval_items = checked_multiply(plan.epochs + 1, plan.eval_batches);
  if (plan.evaluate && (!eval_items || !checked_add(*eval_items, plan.total_steps)))
    throw config_error(config.run.where,
                       "[run] " + std::to_string(plan.epochs) + " epochs of " +
                           std::to_string(plan.eval_batches) +
                           " evaluation batches each are too many to count; train fewer "
                           "epochs or set [run] evaluate = false");
  return plan;
}

lr_schedule make_schedule(const optimizer_section& o, std::int64_t total_steps) {
  lr_schedule s;
  s.type = o.schedule.type;
  s.base_lr = o.lr;
  s.warmup_steps = o.schedule.warmup_steps;
  s.step_size = o.schedule.step_size;
  s.gamma = o.schedule.gamma;
  s.min_lr = o.schedule.min_lr;
  s.total_steps = total_steps;
  return s;
}

// The model's parameterised layers, from the first replica's layer actors.
std::vector<model_layer> model_layers(const topology& graph) {
  std::map<std::int64_t, model_layer> found;
  for (const auto& a : graph.actors) {
    if (a.kind != actor_kind::layer || found.count(a.layer))
      continue;
    auto params = create_layer(a.math)->parameters(graph.shapes.at(static_cast<std::size_t>(a.layer)));
    if (!params.empty())
      found[a.layer] = model_layer{a.layer, a.math.type, std::move(params)};
  }
  std::vector<model_layer> out;
  for (auto& [index, layer] : found)
    out.push_back(std::move(layer));
  return out;
}

std::string setting_text(const setting_value& value) {
  return std::visit(
      [](const auto& v) {
        std::ostringstream out;
        out << std::boolalpha << v;
        return out.str();
      },
      value.value);
}

/// `troupe eval`: the checkpoint's parameters, one evaluation of the test split, no step.
session_prepared evaluation_of(session_prepared p, const std::string& checkpoint) {
  if (p.data->test.count == 0)
    throw data_error("the data has no samples to evaluate the checkpoint '" + checkpoint +
                     "' on");
  p.plan.first_step = p.plan.total_steps = p.start.step;
  p.plan.evaluate = true;
  p.plan.evaluate_only = true;
  return p;
}

}  // namespace

std::string config_fingerprint(const run_config& config) {
  std::string text = "seed=" + std::to_string(config.run.seed) +
                     ";batch=" + std::to_string(config.data.batch_size) + ";";
  for (const auto& layer : config.model.layers) {
    text += layer.type + "(";
    for (const auto& [key, value] : layer.settings)
      text += key + "=" + setting_text(value) + ",";
    text += ")";
  }
  if (config.data.standardize)  // (only then: older checkpoints keep their hash)
    text += "normalize=standard;";
  if (config.data.validation > 0) {
    std::ostringstream held;
    held << std::setprecision(17) << "validation=" << config.data.validation << ";";
    text += held.str();
  }
  // Only a loss other than the first one there was: older checkpoints keep their hash.
  if (config.model.loss != "softmax_xent" || !config.model.loss_settings.empty()) {
    text += "loss=" + config.model.loss + "(";
    for (const auto& [key, value] : config.model.loss_settings)
      text += key + "=" + setting_text(value) + ",";
    text += ")";
  }
  const auto& o = config.optimizer;
  std::ostringstream optimizer;
  optimizer << std::setprecision(17) << to_string(o.type) << ",lr=" << o.lr << ",m=" << o.momentum
            << ",d=" << o.dampening << ",wd=" << o.weight_decay << ",n=" << o.nesterov
            << ",b1=" << o.beta1 << ",b2=" << o.beta2 << ",eps=" << o.eps
            << ",schedule=" << to_string(o.schedule.type);
  text += optimizer.str();
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text)
    hash = (hash ^ c) * 1099511628211ull;
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << hash;
  return out.str();
}

const char* to_string(evaluated_split split) {
  switch (split) {
    case evaluated_split::automatic:
      return "automatic";
    case evaluated_split::test:
      return "test";
    case evaluated_split::validation:
      return "validation";
    case evaluated_split::train:
      return "train";
  }
  return "";
}

std::shared_ptr<const dataset_split> load_session_data(const run_config& config,
                                                       evaluated_split evaluated) {
  // A no-op for those the command line loaded already; run_session() callers (tests,
  // programs using the library) get the config's plugins too.
  load_config_plugins(config);
  const auto targets = loss_spec_of(config.model).targets;
  auto split = load_data(config, targets);
  const bool held_out = split.validation.count > 0;
  // A run that never evaluates ([run] evaluate = false) may have no split to evaluate: data
  // handed over without a test split (the Python module's).
  const bool needs_evaluation = evaluated != evaluated_split::automatic || config.run.evaluate;
  if (evaluated == evaluated_split::automatic)
    evaluated = held_out ? evaluated_split::validation : evaluated_split::test;
  if (evaluated == evaluated_split::validation && !held_out)
    throw data_error("the config holds out no validation split; set [data] validation = 0.1 "
                     "(a share of the training split) to have one");
  if (evaluated == evaluated_split::test && split.test.count == 0 && needs_evaluation)
    throw data_error("the config names no test split (its evaluations are on the validation "
                     "split [data] validation holds out: --split validation)");
  if (evaluated == evaluated_split::validation)
    split.test = std::move(split.validation);
  if (evaluated == evaluated_split::train)
    split.test = split.train;
  split.validation = dataset{};
  split.evaluated = to_string(evaluated);
  return std::make_shared<const dataset_split>(std::move(split));
}

session_prepared prepare_session(const run_config& config, const std::string& resume,
                                 session_purpose purpose) {
  return prepare_session(config, load_session_data(config), resume, purpose);
}

session_prepared prepare_session(const run_config& config,
                                 std::shared_ptr<const dataset_split> data,
                                 const std::string& resume, session_purpose purpose) {
  session_prepared p;
  p.data = std::move(data);
  const auto loss = checked_loss(config, *p.data);
  const auto width = p.data->train.target_width();
  if (config.is_explicit()) {
    p.graph = topology_from_explicit(config, p.data->train.features);
  } else {
    auto shapes = check_model(config, p.data->train.features, width, p.data->train.positions);
    p.graph = expand_shorthand(config, shapes);
  }
  validate_topology(p.graph, config, width, p.data->train.positions);
  p.plan = make_plan(config, p.graph, *p.data);
  p.plan.loss = loss;
  p.plan.evaluated = p.data->evaluated;
  p.schedule = make_schedule(config.optimizer, p.plan.total_steps);
  p.model = model_layers(p.graph);
  p.fusion = plan_fusion(
      p.graph, std::max<std::int64_t>(1, p.plan.batch_size / (p.graph.replicas * p.plan.microbatches)),
      config.run.fuse_layers);
  // init_from is where a run starts; a resumed run continues from its checkpoint instead
  // (which holds the weights it trained from them), so the same config does both.
  if (!config.model.init_from.empty() && resume.empty()) {  // interchange.hpp
    try {
      p.start = weights_from(config.model.init_from, p.model);
    } catch (const data_error& e) {  // where the config asked for that file
      throw data_error(config.model.init_from_where.to_string() + ": " + e.what());
    }
  }
  if (!resume.empty()) {
    const auto checkpoint = resolve_resume_path(resume);
    const auto manifest = verify_checkpoint(checkpoint.path);
    // Another optimizer's state would be dropped or misread; Adam's and AdamW's are the
    // same moments. Weights alone go over with troupe export and [model] init_from.
    const std::string optimizer = to_string(config.optimizer.type);
    auto adam = [](const std::string& o) { return o == "adam" || o == "adamw"; };
    if (manifest.optimizer != optimizer && !(adam(manifest.optimizer) && adam(optimizer)))
      throw data_error("checkpoint " + quote_user_path(checkpoint.path) + " (step " +
                       std::to_string(manifest.step) + ") holds the state of the optimizer " +
                       quote_user_text(manifest.optimizer) + ", and the config trains with " +
                       optimizer + "; resume with that optimizer, or start from its weights "
                       "alone: troupe export CHECKPOINT -o weights.safetensors, then [model] "
                       "init_from");
    // Other settings may be meant (a lower learning rate), or not (an older run's
    // checkpoint): said, not refused. The wiring is not in the fingerprint.
    if (manifest.config_hash != config_fingerprint(config))
      std::fprintf(stderr,
                   "note: resuming from %s (step %lld), written with other settings than %s "
                   "has (model settings, optimizer, batch or seed: fingerprint %s, here %s)\n",
                   quote_user_path(checkpoint.path).c_str(), static_cast<long long>(manifest.step),
                   quote_user_path(config.path).c_str(),
                   quote_user_text(manifest.config_hash).c_str(),
                   config_fingerprint(config).c_str());
    p.start = resume_from(checkpoint.path, manifest, p.model,
                          optimizer_state_names(config.optimizer.type, config.optimizer.momentum),
                          config.parallel.rule == averaging_rule::diloco
                              ? outer_state_names(config.parallel.outer_momentum)
                              : std::vector<std::string>{});
    // The held-out samples were the checkpoint's: the same share and seed, or other ones.
    if (manifest.validation != config.data.validation ||
        (manifest.validation > 0 && manifest.validation_seed != config.run.seed))
      throw data_error("checkpoint '" + checkpoint.path + "' was trained holding out " +
                       (manifest.validation > 0
                            ? "[data] validation = " + std::to_string(manifest.validation) +
                                  " of the training split with seed " +
                                  std::to_string(manifest.validation_seed)
                            : std::string("no validation split")) +
                       ", and the config holds out " +
                       (config.data.validation > 0
                            ? std::to_string(config.data.validation) + " with seed " +
                                  std::to_string(config.run.seed)
                            : std::string("none")) +
                       ": its samples would differ; use the settings it was trained with");
    // An image folder's classes are its folder names: another set renumbers them.
    if (!manifest.class_names.empty() && manifest.class_names != p.data->class_names)
      throw data_error("checkpoint '" + checkpoint.path + "' was trained on the classes " +
                       describe_classes(manifest.class_names) + ", and [data] path has " +
                       describe_classes(p.data->class_names) +
                       ": class indices would differ; use the folder it was trained on");
    if (purpose == session_purpose::evaluate)
      return evaluation_of(std::move(p), checkpoint.path);
    if (p.start.step >= p.plan.total_steps)
      throw data_error("checkpoint '" + checkpoint.path + "' is at step " +
                       std::to_string(p.start.step) + ", and the run has " +
                       std::to_string(p.plan.total_steps) +
                       " steps in all: nothing is left to train (--steps and [run] epochs "
                       "count from the start of the run, not from the checkpoint)");
    p.plan.first_step = p.start.step;
  }
  return p;
}

}  // namespace troupe
