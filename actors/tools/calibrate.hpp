// calibrate.hpp: what each op of a config costs on this machine (`troupe calibrate`).
//
// The first half of predicting a wiring before it runs (issue 16): for every layer of the
// model, at the input shape and micro-batch rows the config gives it (global batch / (R M)),
// the median time of its forward, its backward and, for a layer that splits its backward
// (Note [split backward] in actors/training/layer_actor.cpp), of backward_input and backward_weight;
// the optimizer's update per parameter; and a copy's bandwidth at the size of the largest
// activation; a message between two processes of this machine. Each is run `repeats` times
// after two warm-ups on a CPU device of this process (one thread, as a cpu:N device runs),
// with the layer's own code and kernels, on random inputs and parameters. The result is JSON a simulator reads; the text is for
// people (actors/tools/simulate.hpp reads it). Not here: GPUs (no GPU on this machine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {

struct layer_timing {
  std::int64_t layer = 0;
  std::string type;
  shape_t input;               // per sample
  std::int64_t rows = 0;       // samples a pass
  std::int64_t parameters = 0;
  double forward_us = 0;
  double backward_us = 0;
  double backward_input_us = -1;   // -1: the layer does not split its backward
  double backward_weight_us = -1;
  // Its precision as timed, the one a run of the config computes it in: "bf16" where some of
  // its parameters arrive in bf16 ([run] precision = "bf16", Note [bf16 parameters]), else
  // "fp32". simulate refuses a config that would run a layer in the other one.
  std::string precision = "fp32";
};

struct calibration {
  std::string config;               // the config file's path
  std::string device = "cpu";       // the device type timed
  std::int64_t repeats = 0;
  std::int64_t rows = 0;            // micro-batch rows: global batch / (replicas x micro-batches)
  std::string optimizer;            // "sgd", "adam", "adamw"
  double update_ns_per_parameter = 0;
  double convert_ns_per_parameter = -1;  // an optimizer's rounding of a version to bf16 (a
                                         // convert job); -1: not measured (no bf16 layer)
  double copy_gb_per_s = 0;         // a copy of copy_bytes
  std::int64_t copy_bytes = 0;
  double reduce_gb_per_s = 0;       // an averager's sum (axpy), bytes added a second
  double load_gb_per_s = 0;         // a loader's gather of a micro-batch's random rows
  double loss_us = 0;               // the loss of one micro-batch (cross-entropy, accuracy)
  double handover_us = 0;           // a message to another device's thread, until handled
  double handler_us = -1;           // a message handled on a device's thread, the mean over a
                                    // short run of the model (-1: not measured; Note [what a
                                    // handler costs] in calibrate.cpp)
  double host_us = -1;              // a host thread's turn (trainer, loader), its CPU time
                                    // with wake-up and sleep (-1: not measured; Note [what a
                                    // host turn costs] in calibrate.cpp)
  double contention = 1;            // a round of the model's passes on two threads at once / alone
  // How stable the rounds were: the 10th and 90th percentile of a round of the model's
  // passes over their median (1 and 1 when not measured). simulate's range comes from them.
  double rounds_low = 1;
  double rounds_high = 1;
  // Between two processes of this machine through CAF over loopback (Note [between
  // processes of one machine] in process_link.cpp); -1: not measured.
  double process_latency_us = -1;   // a small message, half a round trip
  double process_gb_per_s = -1;     // a 4 MiB tensor through the socket
  double message_cpu_us = -1;       // the CPU time of both processes' threads a message
  std::vector<layer_timing> layers;  // in model order
};

/// Times `config`'s layers (see above). `path` names the config in the result. Throws
/// user_error for a config that does not expand (as troupe plan would) or repeats outside
/// 1..10000.
calibration calibrate(const run_config& config, const std::string& path, std::int64_t repeats);

std::string format_calibration_text(const calibration& c);
std::string format_calibration_json(const calibration& c);

/// "bf16" or "fp32": the precision a run of `config` computes layer `layer_config` in (of
/// input shape `input`), as calibrate times it.
std::string run_precision_of(const layer& math, const layer_config& layer_config,
                             const shape_t& input, const run_config& config);

/// Reads what format_calibration_json wrote. Throws user_error naming `path` and the field
/// for anything else (not JSON, a missing or mistyped field, negative times).
calibration parse_calibration_json(const std::string& text, const std::string& path);

}  // namespace troupe
