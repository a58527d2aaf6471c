#include "actors/training/bf16_versions.hpp"

#include <utility>

#include "troupe/check.hpp"
#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

namespace troupe {

std::vector<tensor> in_layer_precision(const std::vector<tensor>& params,
                                       const std::vector<bool>& in_bf16, std::size_t first,
                                       device& on, const job_label& label, event* job) {
  std::vector<tensor> out = params;
  std::vector<std::pair<tensor, tensor>> rounded, widened;  // (from, to)
  std::vector<std::size_t> converted;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const bool bf16 = first + i < in_bf16.size() && in_bf16[first + i];
    const auto type = params[i].type();
    TROUPE_CHECK(type == dtype::f32 || type == dtype::bf16,
                 "a parameter arrived as " << to_string(type) << ", not f32 or bf16");
    if (bf16 == (type == dtype::bf16))
      continue;
    out[i] = tensor::empty(params[i].shape(), bf16 ? dtype::bf16 : dtype::f32, on.id());
    (bf16 ? rounded : widened).emplace_back(params[i], out[i]);
    converted.push_back(i);
  }
  if (converted.empty())
    return out;
  const auto type = on.id().type;
  auto round = rounded.empty() ? nullptr : kernels::lookup<kernels::ops::to_bf16>(type);
  auto widen = widened.empty() ? nullptr : kernels::lookup<kernels::ops::from_bf16>(type);
  auto done = on.work().submit(
      [rounded, widened, round, widen, at = &on] {
        for (const auto& [from, to] : rounded)
          round(at->context(), from.numel(), from.f32(), to.bf16());
        for (const auto& [from, to] : widened)
          widen(at->context(), from.numel(), from.bf16(), to.f32());
      },
      label);
  for (auto i : converted)
    out[i].set_ready(done);
  if (job != nullptr)
    *job = done;
  return out;
}

}  // namespace troupe
