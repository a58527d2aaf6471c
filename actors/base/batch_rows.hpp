// batch_rows.hpp: the message a data loader sends to a batch assembler on another node
// (actors/training/batch_assembler_actor.hpp): the row numbers of one micro-batch.
//
// Here, below the actors that send and take it, because the shared-memory delivery
// (actors/transport/) loads it too.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/detail/posting.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// The rows of one micro-batch, for the assembler of the first layer's node.
struct batch_rows_msg {
  micro_tag tag;
  std::vector<std::int64_t> rows;  // (b) sample indices into the split
  bool test = false;               // rows of the test split (an evaluation), else train
  caf::actor first_layer;          // who gets the batch
  std::string device;              // the first layer's device, where the batch is put
  trace_stamp trace;               // the loader's send; the first layer's handling ends it
  /// The loader's count of the rows messages it sent for this replica before: the
  /// assembler gathers them in this order, however they came (Note [rows in order]).
  std::uint64_t sequence = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_rows_msg& x) {
  return f(caf::meta::type_name("batch_rows_msg"), x.tag, x.rows, x.test, x.first_layer, x.device,
           x.trace, x.sequence);
}

/// Rows may be left in the shared memory of the assembler's process
/// (include/troupe/detail/posting.hpp).
namespace detail {
template <>
struct posted_kind<batch_rows_msg> : std::integral_constant<std::uint8_t, 5> {};
}  // namespace detail

/// "loader@node1": the roster's name of node k's assembler.
std::string batch_assembler_name(int node);

}  // namespace troupe
