// loss.cpp: the loss registry, and creating the config's loss.
#include "runtime/model/loss.hpp"

#include <stdexcept>

#include "runtime/base/limits.hpp"
#include "runtime/base/name_registry.hpp"

namespace troupe {

namespace {

name_registry<loss_factory>& loss_registry() {
  static name_registry<loss_factory> registry;
  return registry;
}

}  // namespace

void register_loss(const std::string& name, const std::string& description, loss_factory factory) {
  if (!loss_registry().add(name, description, std::move(factory)))
    throw std::logic_error(loss_registered_twice(name));
}

bool has_loss(const std::string& name) { return loss_registry().has(name); }

std::vector<std::pair<std::string, std::string>> registered_losses() {
  return loss_registry().described();
}

std::unique_ptr<loss_function> create_loss(loss_settings& settings) {
  std::vector<std::string> names;
  const auto factory = loss_registry().find(settings.type(), names);
  if (!factory)
    throw config_error(settings.where(),
                       name_registry<loss_factory>::unknown(
                           "unknown loss " + quote_user_text(settings.type()), settings.type(),
                           names));
  auto result = (*factory)(settings);
  settings.finish();
  TROUPE_CHECK(result != nullptr, "the factory of loss '" << settings.type() << "' made nothing");
  const auto spec = result->spec();
  if (static_cast<int>(spec.metrics.size()) > loss_job::max_metrics)
    throw config_error(settings.where(),
                       "loss '" + settings.type() + "' reports " +
                           std::to_string(spec.metrics.size()) +
                           " metrics; a loss may report at most " +
                           std::to_string(loss_job::max_metrics));
  return result;
}

std::unique_ptr<loss_function> create_loss(const model_section& model,
                                           kernels::device_type device) {
  if (!has_loss(model.loss)) {  // named where the name is written
    loss_settings named{model.loss, {}, model.loss_type_where, device};
    return create_loss(named);
  }
  loss_settings settings{model.loss, model.loss_settings, model.loss_where, device};
  return create_loss(settings);
}

loss_spec loss_spec_of(const model_section& model) {
  return create_loss(model, kernels::device_type::cpu)->spec();
}

}  // namespace troupe
