// transfer.cpp: copies on arrival.
#include "runtime/core/transfer.hpp"

#include <cstring>

namespace troupe {

tensor arrive(const tensor& t, device& here) {
  if (!t.defined() || t.device() == here.id())
    return t;
  TROUPE_CHECK(t.device().type == device_type::cpu && here.id().type == device_type::cpu,
               "copies between " << t.device().to_string() << " and " << here.id().to_string()
                                 << " need the CUDA device layer");
  auto copy = tensor::empty(t.shape(), t.type(), here.id());
  auto& work = here.work();
  work.wait_for(t.ready());
  job_label label;
  label.name = "copy";
  label.bytes = static_cast<std::int64_t>(t.bytes());
  copy.set_ready(work.submit([from = t, to = copy] { std::memcpy(to.raw(), from.raw(), from.bytes()); },
                             label));
  return copy;
}

std::vector<tensor> arrive(const std::vector<tensor>& ts, device& here) {
  std::vector<tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts)
    out.push_back(arrive(t, here));
  return out;
}

}  // namespace troupe
