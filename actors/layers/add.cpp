// add.cpp: the layer that sums two or more inputs of one shape, a residual connection's
// merge (runtime/graph/model_graph.hpp). Its actor does the sum, one job over the inputs
// in the order the layer names them, and passes dy back to every input unchanged (Note
// [ports] in actors/training/layer_actor.cpp). As a layer alone (troupe check-layer) it reads one
// input, whose sum is a copy.
#include "actors/layers/reshape.hpp"

namespace troupe {

namespace {

class add_layer final : public reshape_layer {
 public:
  add_layer() : reshape_layer("add", [](const shape_t& in) { return in; }) {}
  bool sums_inputs() const override { return true; }
};

}  // namespace

TROUPE_REGISTER_LAYER("add",
                      "the sum of two or more earlier layers' outputs of one shape, named by "
                      "inputs = [\"a\", \"b\"] (no settings)",
                      [](layer_settings&) { return std::make_unique<add_layer>(); });

}  // namespace troupe
