// precision.cpp: [run] precision and a layer's `precision`, resolved on this CPU.
#include "runtime/config/precision.hpp"

#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/base/limits.hpp"

namespace troupe {

cpu_bf16_support this_cpu_bf16() {
  return cpu_bf16_support{kernels::cpu::onednn_has_bf16(), kernels::cpu::onednn_isa_name()};
}

numeric_precision resolve_precision(const std::string& name, const std::string& key,
                                    const source_position& where, const cpu_bf16_support& cpu) {
  if (name == "fp32")
    return numeric_precision::fp32;
  if (name == "auto")
    return cpu.native ? numeric_precision::bf16 : numeric_precision::fp32;
  if (name == "bf16") {
    if (!cpu.native)
      throw config_error(where, key + " = \"bf16\" needs a CPU that computes bf16 products: "
                                      "AVX512-BF16 or AMX (oneDNN finds " + cpu.isa +
                                      " here, where bf16 would be slower than fp32); use "
                                      "\"fp32\", or \"auto\" to take bf16 where it is fast");
    return numeric_precision::bf16;
  }
  throw config_error(where, "unknown precision " + quote_user_text(name) +
                                " for " + key + " (expected one of 'fp32', 'bf16', 'auto')");
}

std::optional<numeric_precision> layer_precision(const setting_map& settings,
                                                 const cpu_bf16_support& cpu) {
  const auto found = settings.find("precision");
  if (found == settings.end())
    return std::nullopt;
  const auto* name = std::get_if<std::string>(&found->second.value);
  if (name == nullptr || *name == "auto")
    throw config_error(found->second.where,
                       "a layer's precision: expected \"fp32\" or \"bf16\" (the run's [run] "
                       "precision when left out)");
  return resolve_precision(*name, "precision", found->second.where, cpu);
}

}  // namespace troupe
