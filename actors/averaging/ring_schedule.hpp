// ring_schedule.hpp: where every float of a ring all-reduce goes, as plain arithmetic.
//
// The ring backend (actors/averaging/ring_collective.cpp) all-reduces a layer's flattened
// gradients of n floats over R replicas. This helper says, for one replica, which chunk
// of which bucket it sends and receives in which round of which phase, how the buffer is
// cut into buckets and chunks, and which spans it owns after reduce-scatter (the sharded
// optimizer updates exactly those). It holds no tensors, sends nothing and knows no actor:
// the actor books messages by it, and tests/actors/averaging/ring_schedule_test.cpp checks it alone.
//
// Layout: the n floats are cut into buckets of at most bucket_elements (the last one
// shorter); each bucket is cut into R chunks whose sizes differ by at most one (the first
// `size % R` chunks are one longer). Replica r sends to replica (r + 1) mod R.
//
// Rounds (Note [ring order] in actors/averaging/ring_collective.cpp): in reduce-scatter round t
// (t = 0 .. R-2) replica r receives chunk (r - 1 - t) mod R, adds its own copy and sends the
// partial sum on; round 0 starts with replica r sending its own chunk r. After the last
// round, replica r holds the full sum of chunk (r + 1) mod R (it "owns" it). In all-gather
// round t replica r receives the full sum of chunk (r - t) mod R and passes it on unless
// t = R - 2 (the next replica computed it); round 0 starts with every replica sending the
// chunk it owns.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

/// A part of the flattened gradients: [offset, offset + size) in floats.
struct flat_span {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

inline bool operator==(const flat_span& a, const flat_span& b) {
  return a.offset == b.offset && a.size == b.size;
}

/// The two phases of a ring all-reduce, as ring_msg::phase numbers them.
enum class ring_phase : std::int32_t { reduce_scatter = 0, all_gather = 1 };

/// `a` mod `m` in 0 .. m-1, also for negative `a`.
std::int32_t ring_modulo(std::int64_t a, std::int32_t m);

/// Chunk `c` of `elements` floats cut into `parts` chunks whose sizes differ by at most one
/// (the first `elements % parts` chunks are one longer); the offset is within those floats.
flat_span chunk_of(std::int64_t elements, std::int32_t parts, std::int32_t c);

/// The schedule of one all-reduce of `elements` floats over `replicas` replicas.
class ring_schedule {
 public:
  /// replicas >= 1, bucket_elements >= 1, elements >= 0 (TROUPE_CHECKed).
  ring_schedule(std::int64_t elements, std::int32_t replicas, std::int64_t bucket_elements);

  std::int64_t elements() const { return elements_; }
  std::int32_t replicas() const { return replicas_; }
  /// Buckets of at most bucket_elements floats (0 for an empty buffer).
  std::int32_t buckets() const { return buckets_; }
  /// Rounds per phase: R - 1.
  std::int32_t rounds() const { return replicas_ - 1; }
  /// Ring messages a replica takes per bucket, both phases: 2 (R - 1).
  std::int32_t messages_per_bucket() const { return 2 * rounds(); }

  /// Where bucket `b` lies in the buffer.
  flat_span bucket(std::int32_t b) const;
  /// Where chunk `c` of bucket `b` lies in the buffer (not within the bucket).
  flat_span chunk(std::int32_t b, std::int32_t c) const;

  /// The chunk `replica` sends to start reduce-scatter: its own index.
  std::int32_t started_chunk(std::int32_t replica) const { return replica; }
  /// The chunk `replica` receives in `round` of `phase`.
  std::int32_t received_chunk(std::int32_t replica, ring_phase phase, std::int32_t round) const;
  /// The chunk whose full sum `replica` computes in the last reduce-scatter round, and
  /// sends to start all-gather: (replica + 1) mod R.
  std::int32_t owned_chunk(std::int32_t replica) const;
  /// True if the reduce-scatter round `round` is the last (its sum is final).
  bool last_reduce_round(std::int32_t round) const { return round == replicas_ - 2; }
  /// True if what `round` of all-gather receives goes on to the next replica.
  bool forwards_gathered(std::int32_t round) const { return round < replicas_ - 2; }
  /// The spans `replica` owns after reduce-scatter, one per bucket, in buffer order; over
  /// all replicas they partition the buffer.
  std::vector<flat_span> owned_spans(std::int32_t replica) const;

 private:
  std::int64_t elements_;
  std::int32_t replicas_;
  std::int64_t bucket_elements_;
  std::int32_t buckets_;
};

}  // namespace troupe
