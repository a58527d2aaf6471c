// collective_messages.hpp: the messages of troupe's own collectives: a ring all-reduce's
// chunks between the averagers of one layer, and the sharded optimizer's exchange between a
// ring averager and its optimizer. Internal (not in the facade): no plugin sends or receives
// them, so a change to them is no change of the plugin ABI.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "troupe/detail/posting.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// One step of a ring all-reduce between the averagers of one layer: a chunk of a bucket
/// of the flattened gradients, sent to the next replica's averager. phase 0 is
/// reduce-scatter (the receiver adds it to its own chunk), phase 1 all-gather (the
/// receiver takes it as the final sum).
struct ring_msg {
  std::int64_t step = 0;
  std::int32_t layer = 0;
  std::int32_t bucket = 0;
  std::int32_t phase = 0;  // 0 reduce-scatter, 1 all-gather
  std::int32_t round = 0;  // 0 .. R-2 within the phase
  std::int32_t chunk = 0;  // which of the R chunks of the bucket
  tensor data;             // (chunk elements)
  trace_stamp trace;
};

/// The sharded optimizer's exchange between a layer's ring averager and that replica's
/// optimizer, on the grads wire and back (Note [sharded optimizer] in
/// actors/averaging/grad_averager_actor.cpp). `flat` is one buffer in the layout of the layer's
/// parameters, flattened in order; `spans` are (offset, size) pairs of floats in it.
///   reduced   averager -> optimizer: the summed gradients, complete at `spans` (the
///             chunks this replica owns after reduce-scatter), handed over;
///   updated   optimizer -> averager: the next parameters, complete at `spans`, handed
///             over for the all-gather;
///   gathered  averager -> optimizer: the same buffer, now complete everywhere.
/// Local SGD's parameter averages (Note [local SGD] in allreduce_averager_actor.cpp) travel
/// the same wires, with no spans:
///   average   optimizer -> averager: this replica's next parameters, handed over;
///   averaged  averager -> optimizer: the same buffer, now the mean over the replicas.
struct shard_msg {
  enum stage_t : std::int32_t { reduced = 0, updated = 1, gathered = 2, average = 3, averaged = 4 };
  std::int64_t step = 0;
  std::int32_t layer = 0;
  std::int32_t stage = reduced;
  tensor flat;
  std::vector<std::int64_t> spans;
  trace_stamp trace;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_msg& x) {
  return f(caf::meta::type_name("ring_msg"), x.step, x.layer, x.bucket, x.phase, x.round, x.chunk,
           x.data, x.trace);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_msg& x) {
  return f(caf::meta::type_name("shard_msg"), x.step, x.layer, x.stage, x.flat, x.spans, x.trace);
}
/// The tensors they carry, for device_actor::send_written.
inline std::vector<tensor*> tensors_sent(ring_msg& m) { return {&m.data}; }
inline std::vector<tensor*> tensors_sent(shard_msg& m) { return {&m.flat}; }

namespace detail {
/// A ring's chunks may be left in another process's shared memory (include/troupe/detail/
/// posting.hpp): the ring keys them, so their order against CAF's does not matter.
template <>
struct posted_kind<ring_msg> : std::integral_constant<std::uint8_t, 1> {};
}  // namespace detail

}  // namespace troupe
