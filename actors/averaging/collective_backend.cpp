// collective_backend.cpp: what every collective backend does unless it says otherwise
// (refuse what it cannot do), and the choice of backend by averaging method.
#include "actors/averaging/collective_backend.hpp"

#include <stdexcept>
#include <string>

#include "troupe/check.hpp"

namespace troupe {

void collective_backend::reduce_scatter(std::int64_t, tensor) {
  throw std::logic_error(std::string{"the "} + name() + " backend does not shard");
}

void collective_backend::all_gather(std::int64_t, tensor) {
  throw std::logic_error(std::string{"the "} + name() + " backend does not shard");
}

void collective_backend::receive(ring_msg& message) {
  throw std::logic_error(std::string{"the "} + name() + " backend takes no ring messages (step " +
                         std::to_string(message.step) + ", layer " +
                         std::to_string(message.layer) + ")");
}

void collective_backend::completed(std::int64_t step, std::int64_t, std::int64_t) {
  throw std::logic_error(std::string{"the "} + name() +
                         " backend runs on its averager's stream: no collective of step " +
                         std::to_string(step) + " ended elsewhere");
}

std::unique_ptr<collective_backend> make_collective_backend(collective_host& host) {
  switch (host.settings().method) {
    case averaging_method::ring: return make_ring_collective(host);
    case averaging_method::gloo: return make_gloo_collective(host);
    case averaging_method::central: break;
  }
  TROUPE_CHECK(false, host.settings().name << ": no collective backend for averaging method '"
                                           << to_string(host.settings().method) << "'");
  return nullptr;
}

}  // namespace troupe
