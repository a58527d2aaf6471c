// ring_schedule.cpp: the layout and round arithmetic of the ring all-reduce (see the header).
#include "actors/averaging/ring_schedule.hpp"

#include <algorithm>

#include "troupe/check.hpp"

namespace troupe {

std::int32_t ring_modulo(std::int64_t a, std::int32_t m) {
  return static_cast<std::int32_t>(((a % m) + m) % m);
}

flat_span chunk_of(std::int64_t elements, std::int32_t parts, std::int32_t c) {
  const std::int64_t base = elements / parts;
  const std::int64_t longer = elements % parts;
  return {c * base + std::min<std::int64_t>(c, longer), base + (c < longer ? 1 : 0)};
}

ring_schedule::ring_schedule(std::int64_t elements, std::int32_t replicas,
                             std::int64_t bucket_elements)
    : elements_(elements), replicas_(replicas), bucket_elements_(bucket_elements) {
  TROUPE_CHECK(replicas >= 1, "a ring of " << replicas << " replicas");
  TROUPE_CHECK(bucket_elements >= 1, "buckets of " << bucket_elements << " elements");
  TROUPE_CHECK(elements >= 0, "a buffer of " << elements << " elements");
  buckets_ = static_cast<std::int32_t>((elements + bucket_elements - 1) / bucket_elements);
}

flat_span ring_schedule::bucket(std::int32_t b) const {
  TROUPE_CHECK(b >= 0 && b < buckets_, "bucket " << b << " of " << buckets_);
  const std::int64_t start = b * bucket_elements_;
  return {start, std::min(bucket_elements_, elements_ - start)};
}

flat_span ring_schedule::chunk(std::int32_t b, std::int32_t c) const {
  TROUPE_CHECK(c >= 0 && c < replicas_, "chunk " << c << " of " << replicas_);
  const auto whole = bucket(b);
  const auto inside = chunk_of(whole.size, replicas_, c);
  return {whole.offset + inside.offset, inside.size};
}

std::int32_t ring_schedule::received_chunk(std::int32_t replica, ring_phase phase,
                                           std::int32_t round) const {
  // Reduce-scatter: the chunk that replica (replica - 1) started t rounds before us.
  // All-gather: the chunk that replica (replica - 1 - t) owns, (replica - t) mod R.
  return phase == ring_phase::reduce_scatter ? ring_modulo(replica - 1 - round, replicas_)
                                             : ring_modulo(replica - round, replicas_);
}

std::int32_t ring_schedule::owned_chunk(std::int32_t replica) const {
  return ring_modulo(replica + 1, replicas_);
}

std::vector<flat_span> ring_schedule::owned_spans(std::int32_t replica) const {
  std::vector<flat_span> spans;
  for (std::int32_t b = 0; b < buckets_; ++b)
    spans.push_back(chunk(b, owned_chunk(replica)));
  return spans;
}

}  // namespace troupe
