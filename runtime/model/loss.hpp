// loss.hpp: the runtime's side of losses: creating the config's loss kind for a device.
// The loss interface and registry are the public troupe/loss.hpp; the built-in kinds live
// in actors/losses/.
#pragma once

#include <memory>

#include "runtime/config/config.hpp"
#include "troupe/loss.hpp"

namespace troupe {

/// Creates [model] loss for devices of `device`'s type: an unknown name (with the nearest
/// one and the list of registered kinds) and bad settings throw config_error.
std::unique_ptr<loss_function> create_loss(const model_section& model,
                                           kernels::device_type device);

/// The loss's spec (targets, ignored label, metrics) without a device: what the data and
/// the trainer need to know of it.
loss_spec loss_spec_of(const model_section& model);

}  // namespace troupe
