// layer_actor.cpp: forward, backward and parameter versions of one layer.
#include "actors/layer_actor.hpp"

#include <stdexcept>

namespace troupe {

layer_actor::layer_actor(caf::actor_config& config, std::shared_ptr<layer_actor_settings> settings)
    : caf::event_based_actor(config), settings_(std::move(settings)) {
  output_shape_ = settings_->math->output_shape(settings_->input_shape);
  has_params_ = !settings_->math->parameters(settings_->input_shape).empty();
  settings_->math->bind(settings_->on->id().type);
  if (!has_params_)
    version_ = std::numeric_limits<std::int64_t>::max();  // any version will do
}

std::string layer_actor::describe(const char* pass, const micro_tag& tag) const {
  return settings_->name + " (" + settings_->math->type() + ") " + pass + " of " +
         (tag.stage == phase::train ? "step " : "eval batch ") + std::to_string(tag.step) +
         ", micro-batch " + std::to_string(tag.microbatch) + ", replica " +
         std::to_string(tag.replica);
}

caf::behavior layer_actor::make_behavior() {
  set_exception_handler([this](std::exception_ptr& error) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send(settings_->trainer, failure_msg{settings_->name, what});
    return caf::make_error(caf::sec::runtime_error, what);
  });
  return {
      [this](activation_msg& message) {
        if (message.tag.version > version_) {
          waiting_.push_back(std::move(message));
          return;
        }
        forward(message);
      },
      [this](gradient_msg& message) { backward(message); },
      [this](params_msg& message) { install(message); },
      [this](finish_atom) { quit(); },
  };
}

void layer_actor::install(params_msg& message) {
  params_ = std::move(message.params);
  version_ = message.version;
  while (!waiting_.empty() && waiting_.front().tag.version <= version_) {
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    forward(next);
  }
}

void layer_actor::forward(activation_msg& message) {
  const auto& tag = message.tag;
  if (has_params_ && tag.version != version_)
    throw std::logic_error(describe("forward", tag) + " needs parameter version " +
                           std::to_string(tag.version) + " but holds " +
                           std::to_string(version_));
  auto& device = *settings_->on;
  auto& work = device.work();
  work.wait_for(message.x.ready());

  shape_t y_shape{message.x.dim(0)};
  y_shape.insert(y_shape.end(), output_shape_.begin(), output_shape_.end());
  tensor y = tensor::empty(std::move(y_shape), dtype::f32, device.id());
  auto saved = std::make_shared<std::vector<tensor>>();
  layer_context context{device.id(), device.context(), tag.stage == phase::train};

  auto done = work.submit([math = settings_->math.get(), context, params = params_,
                           x = message.x, y, saved, what = describe("forward", tag)]() mutable {
    try {
      math->forward(context, params, x, y, *saved);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": " + e.what());
    }
  });
  y.set_ready(done);
  if (tag.stage == phase::train)
    stash_.emplace(stash_key{tag.step, tag.microbatch},
                   stash_entry{std::move(saved), params_, message.x.shape()});
  send(settings_->next, activation_msg{tag, std::move(y)});
}

void layer_actor::backward(gradient_msg& message) {
  const auto& tag = message.tag;
  auto it = stash_.find(stash_key{tag.step, tag.microbatch});
  if (it == stash_.end())
    throw std::logic_error(describe("backward", tag) + " has no stashed forward");
  auto entry = std::move(it->second);
  stash_.erase(it);

  auto& device = *settings_->on;
  auto& work = device.work();
  work.wait_for(message.dx.ready());

  if (has_params_ && grads_step_ != tag.step) {
    grads_.clear();
    for (const auto& p : entry.params)
      grads_.push_back(tensor::empty(p.shape(), dtype::f32, device.id()));
    grads_step_ = tag.step;
    backwards_done_ = 0;
  }
  bool accumulate = backwards_done_ > 0;
  bool need_dx = static_cast<bool>(settings_->previous);
  tensor dx;
  if (need_dx)
    dx = tensor::empty(entry.input_shape, dtype::f32, device.id());
  layer_context context{device.id(), device.context(), true};

  auto done = work.submit([math = settings_->math.get(), context, entry, dy = message.dx, dx,
                           grads = grads_, accumulate, need_dx,
                           what = describe("backward", tag)]() mutable {
    try {
      math->backward(context, entry.params, *entry.saved, dy, need_dx ? &dx : nullptr, grads,
                     accumulate);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": " + e.what());
    }
  });
  if (need_dx) {
    dx.set_ready(done);
    send(settings_->previous, gradient_msg{tag, std::move(dx)});
  }
  if (!has_params_)
    return;
  if (++backwards_done_ == settings_->microbatches) {
    for (auto& g : grads_)
      g.set_ready(done);
    send(settings_->grad_sink,
         weight_grads_msg{tag.step, settings_->layer_index, settings_->replica, std::move(grads_)});
    grads_.clear();
    grads_step_ = -1;
  }
}

}  // namespace troupe
