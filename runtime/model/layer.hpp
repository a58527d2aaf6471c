// layer.hpp: the runtime's side of layers: creating one from its config and initialising
// its parameters. The layer interface and registry are the public troupe/layer.hpp.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/config/config.hpp"
#include "troupe/layer.hpp"

namespace troupe {

/// Fills `values` (param.shape elements) per its init, from a generator keyed by
/// (seed, layer index, parameter index): the same on every device and replica.
void initialise_parameter(const param_spec& param, std::uint64_t seed, std::int64_t layer_index,
                          std::int64_t param_index, float* values);

/// Creates a layer from its config: unknown type (with the nearest name and the list of
/// registered ones) and bad settings throw config_error. With `declared`, also says which
/// settings the layer read, with their defaults and ranges (settings::declared()).
std::unique_ptr<layer> create_layer(const layer_config& config,
                                    std::vector<setting_declaration>* declared = nullptr);

}  // namespace troupe
