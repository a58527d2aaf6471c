// bf16_versions.hpp: a version of a layer's parameters in the precision its layer computes
// with (Note [bf16 parameters] in layer_actor.cpp): the optimizer rounds each version once
// before sending it, and a layer makes do with what arrives.
#pragma once

#include <cstddef>
#include <vector>

#include "troupe/device.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// `params` with those that `in_bf16` marks (parameter `first + i` of the mask; past its end:
/// unmarked) in bf16 and the others in f32: each marked f32 tensor rounded and each
/// unmarked bf16 one widened, all by one job on `on` labelled `label`, whose event `job`
/// gets (when given); tensors already in their precision are passed on as they are, and
/// without any to convert there is no job. The results are on `on`, read-only like what
/// they came from.
std::vector<tensor> in_layer_precision(const std::vector<tensor>& params,
                                       const std::vector<bool>& in_bf16, std::size_t first,
                                       device& on, const job_label& label, event* job = nullptr);

}  // namespace troupe
