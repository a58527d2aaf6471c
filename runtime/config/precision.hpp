// precision.hpp: [run] precision and a layer's own `precision` setting, resolved on the CPU
// this process runs on.
//
// "bf16" makes the layers that can (troupe/layer.hpp: bf16_parameters) compute their products
// in bfloat16 with fp32 accumulation; the optimizer's masters, its state, the gradients and
// every other layer stay fp32. A CPU computes bf16 products fast only with AVX512-BF16 or AMX
// (oneDNN otherwise emulates them, slower than fp32), so "bf16" is refused on one without
// and "auto" takes bf16 only on one with.
#pragma once

#include <optional>
#include <string>

#include "runtime/config/choices.hpp"
#include "troupe/error.hpp"
#include "troupe/settings.hpp"

namespace troupe {

/// What this machine's CPU offers: whether it computes bf16 products natively, and
/// oneDNN's name for its instruction set (for the refusal's message).
struct cpu_bf16_support {
  bool native = false;
  std::string isa;
};
cpu_bf16_support this_cpu_bf16();

/// "fp32", "bf16" or "auto" (the value of `key`, at `where`) on a CPU with `cpu`'s support:
/// "bf16" without native bf16 is a config_error naming the instruction sets it needs and
/// the one found.
numeric_precision resolve_precision(const std::string& name, const std::string& key,
                                    const source_position& where, const cpu_bf16_support& cpu);

/// A layer's own `precision` ("fp32" or "bf16", or absent: the run's) from its settings,
/// which no layer reads itself; a config_error for another value or type.
std::optional<numeric_precision> layer_precision(const setting_map& settings,
                                                 const cpu_bf16_support& cpu);

}  // namespace troupe
