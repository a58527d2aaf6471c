// kinds.cpp: the names of the graph's kinds (kinds.hpp); switches without a default.
#include "runtime/graph/kinds.hpp"

#include "troupe/error.hpp"

namespace troupe {

const char* to_string(actor_kind value) {
  switch (value) {
    case actor_kind::data_loader:
      return "data_loader";
    case actor_kind::layer:
      return "layer";
    case actor_kind::loss:
      return "loss";
    case actor_kind::averager:
      return "averager";
    case actor_kind::optimizer:
      return "optimizer";
    case actor_kind::custom:
      return "custom";
  }
  TROUPE_CHECK(false, "actor_kind " << static_cast<int>(value));
  return "";
}

const char* to_string(wire_kind value) {
  switch (value) {
    case wire_kind::activations:
      return "activations";
    case wire_kind::labels:
      return "labels";
    case wire_kind::grads:
      return "grads";
    case wire_kind::ring:
      return "ring";
    case wire_kind::params:
      return "params";
  }
  TROUPE_CHECK(false, "wire_kind " << static_cast<int>(value));
  return "";
}

}  // namespace troupe
