// session.cpp: checking, spawning, wiring, running and tearing down one run.
#include "actors/session.hpp"

#include <filesystem>

#include "actors/data_loader_actor.hpp"
#include "actors/layer_actor.hpp"
#include "actors/loss_actor.hpp"
#include "actors/optimizer_actor.hpp"
#include "runtime/dataset.hpp"

namespace troupe {

std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes) {
  std::vector<shape_t> shapes{{input_features}};
  for (const auto& layer_config : config.model.layers) {
    auto math = create_layer(layer_config);
    shapes.push_back(math->output_shape(shapes.back()));
  }
  const auto& out = shapes.back();
  if (out.size() != 1 || out[0] != classes) {
    const auto& last = config.model.layers.back();
    throw config_error(last.where, "the model's output shape " + shape_to_string(out) +
                                       " must be (" + std::to_string(classes) +
                                       "), one logit per class of the data set; change the "
                                       "last layer's 'out'");
  }
  return shapes;
}

namespace {

dataset_split load_data(const run_config& config) {
  const auto& d = config.data;
  if (d.source == "synthetic")
    return make_synthetic(d.synthetic_train, d.synthetic_test, d.synthetic_features,
                          d.synthetic_classes, config.run.seed);
  return load_fashion_mnist(d.path);
}

run_plan make_plan(const run_config& config, const dataset_split& data) {
  const auto& d = config.data;
  run_plan plan;
  plan.batch_size = d.batch_size;
  plan.replicas = config.parallel.data;
  plan.microbatches = config.parallel.microbatches;
  if (data.train.count < d.batch_size)
    throw config_error(d.where, "[data] batch_size " + std::to_string(d.batch_size) +
                                    " is larger than the training set (" +
                                    std::to_string(data.train.count) + " samples)");
  if (d.batch_size % (plan.replicas * plan.microbatches) != 0)
    throw config_error(config.parallel.where,
                       "[data] batch_size " + std::to_string(d.batch_size) +
                           " must split evenly into data (" + std::to_string(plan.replicas) +
                           ") x microbatches (" + std::to_string(plan.microbatches) +
                           ") parts; use a batch size that is a multiple of " +
                           std::to_string(plan.replicas * plan.microbatches));
  plan.steps_per_epoch = data.train.count / d.batch_size;
  plan.total_steps = config.run.steps > 0 ? config.run.steps
                                          : config.run.epochs * plan.steps_per_epoch;
  plan.epochs = (plan.total_steps + plan.steps_per_epoch - 1) / plan.steps_per_epoch;
  plan.evaluate = config.run.evaluate && data.test.count > 0;
  plan.eval_batch_size = d.eval_batch_size;
  plan.eval_batches = (data.test.count + d.eval_batch_size - 1) / d.eval_batch_size;
  return plan;
}

lr_schedule make_schedule(const optimizer_section& o, std::int64_t total_steps) {
  lr_schedule s;
  parse_lr_schedule_kind(o.schedule.type, s.type);
  s.base_lr = o.lr;
  s.warmup_steps = o.schedule.warmup_steps;
  s.step_size = o.schedule.step_size;
  s.gamma = o.schedule.gamma;
  s.min_lr = o.schedule.min_lr;
  s.total_steps = total_steps;
  return s;
}

std::vector<device_id> check_devices(const run_config& config) {
  std::vector<device_id> ids;
  for (const auto& d : config.parallel.devices) {
    device_id id;
    if (!device_id::parse(d.name, id))
      throw config_error(d.where, "expected a device like 'cpu:0', found '" + d.name + "'");
    if (id.type != device_type::cpu)
      throw config_error(d.where, "device '" + d.name +
                                      "': this build runs on CPU devices only (the CUDA "
                                      "device layer is not built yet); use 'cpu:N'");
    ids.push_back(id);
  }
  if (ids.empty())
    ids.push_back(device_id{});
  if (config.parallel.data != 1 || config.parallel.pipeline != 1)
    throw config_error(config.parallel.where,
                       "[parallel] data and pipeline other than 1 are not supported yet; this "
                       "build trains on one device");
  return ids;
}

std::string describe_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

session_result run_session(const run_config& config, const session_options& options) {
  // ---- everything that can fail on bad input, before any actor exists ----
  auto devices_wanted = check_devices(config);
  auto data = std::make_shared<const dataset_split>(load_data(config));
  auto shapes = check_model(config, data->train.features, data->train.classes);
  auto plan = make_plan(config, *data);
  auto schedule = make_schedule(config.optimizer, plan.total_steps);
  std::string metrics_path = options.metrics_path.empty() ? config.run.metrics
                                                          : options.metrics_path;
  if (!metrics_path.empty()) {
    auto parent = std::filesystem::path(metrics_path).parent_path();
    if (!parent.empty())
      std::filesystem::create_directories(parent);
  }

  session_result result;
  auto outcome = std::make_shared<run_outcome>();
  device_set devices{devices_wanted};
  device& home = devices.at(devices_wanted.front());
  {
    caf::actor_system_config system_config;
    add_message_types(system_config);
    // Bookkeeping only runs on CAF's threads (compute runs on device streams), so a
    // small scheduler that sleeps instead of spinning leaves the cores to the devices.
    system_config.set("scheduler.max-threads", 2);
    system_config.set("scheduler.policy", caf::atom("sharing"));
    caf::actor_system system{system_config};

    auto trainer_config = std::make_shared<trainer_settings>();
    trainer_config->plan = plan;
    trainer_config->schedule = schedule;
    trainer_config->metrics_path = metrics_path;
    trainer_config->log_every = config.run.log_every;
    trainer_config->progress_bar = options.progress_bar;
    trainer_config->quiet = options.quiet;
    trainer_config->title = std::filesystem::path(config.path).stem().string();
    trainer_config->outcome = outcome;
    auto trainer = system.spawn<trainer_actor>(trainer_config);

    for (auto& d : devices.all())
      d->work().set_error_handler([trainer, name = d->id().to_string()](std::exception_ptr e) {
        caf::anon_send(trainer, failure_msg{name, describe_exception(e)});
      });

    // Layers first (their neighbours are filled in below, before any message flows).
    const auto layer_count = config.model.layers.size();
    std::vector<std::shared_ptr<layer_actor_settings>> layer_settings(layer_count);
    std::vector<caf::actor> layers(layer_count);
    for (std::size_t i = 0; i < layer_count; ++i) {
      auto s = std::make_shared<layer_actor_settings>();
      s->name = "layer_" + std::to_string(i);
      s->layer_index = static_cast<std::int32_t>(i);
      s->microbatches = static_cast<std::int32_t>(plan.microbatches);
      s->input_shape = shapes[i];
      s->on = &home;
      s->math = create_layer(config.model.layers[i]);
      s->trainer = trainer;
      layer_settings[i] = s;
      layers[i] = system.spawn<layer_actor>(s);
    }
    loss_actor_settings loss_config;
    loss_config.classes = data->train.classes;
    loss_config.on = &home;
    loss_config.last_layer = layers.back();
    loss_config.trainer = trainer;
    auto loss = system.spawn<loss_actor>(loss_config);

    std::vector<caf::actor> optimizers(layer_count);
    std::vector<caf::actor> all{loss};
    for (std::size_t i = 0; i < layer_count; ++i) {
      auto& s = *layer_settings[i];
      s.next = i + 1 < layer_count ? layers[i + 1] : loss;
      s.previous = i > 0 ? layers[i - 1] : caf::actor{};
      auto params = s.math->parameters(s.input_shape);
      if (!params.empty()) {
        optimizer_actor_settings o;
        o.name = "optimizer_" + std::to_string(i);
        o.layer_index = static_cast<std::int32_t>(i);
        o.params = params;
        o.optimizer = config.optimizer;
        o.schedule = schedule;
        o.seed = config.run.seed;
        o.replicas = static_cast<std::int32_t>(plan.replicas);
        o.on = &home;
        o.subscribers = {layers[i]};
        o.trainer = trainer;
        optimizers[i] = system.spawn<optimizer_actor>(std::move(o));
        s.grad_sink = optimizers[i];
        trainer_config->optimizers.push_back(optimizers[i]);
        all.push_back(optimizers[i]);
      }
      all.push_back(layers[i]);
    }

    data_loader_settings loader_config;
    loader_config.data = data;
    loader_config.plan = plan;
    loader_config.shuffle = config.data.shuffle;
    loader_config.seed = config.run.seed;
    loader_config.prefetch = config.data.prefetch;
    loader_config.on = home.id();
    loader_config.first_layers = {layers.front()};
    loader_config.losses = {loss};
    auto loader = system.spawn<data_loader_actor>(loader_config);
    trainer_config->loader = loader;
    all.push_back(loader);

    // ---- run ----
    {
      caf::scoped_actor self{system};
      self->request(trainer, caf::infinite, start_atom::value)
          .receive([](int) {},
                   [&](caf::error& error) {
                     outcome->exit_code = 1;
                     outcome->failure = system.render(error);
                   });
      devices.synchronize();
      if (options.keep_parameters && outcome->exit_code == 0) {
        result.parameters.resize(layer_count);
        for (std::size_t i = 0; i < layer_count; ++i) {
          if (!optimizers[i])
            continue;
          self->request(optimizers[i], caf::infinite, caf::get_atom::value)
              .receive(
                  [&](std::vector<tensor>& params) {
                    for (const auto& p : params)
                      result.parameters[i].push_back(p.to_vector());
                  },
                  [&](caf::error&) {});
        }
      }
      for (const auto& a : all)
        self->send(a, finish_atom::value);
    }
    devices.synchronize();
  }
  // The actor system has shut down; the streams drain and stop when `devices` goes.
  result.outcome = *outcome;
  return result;
}

}  // namespace troupe
