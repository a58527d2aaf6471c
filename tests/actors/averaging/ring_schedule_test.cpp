// The ring all-reduce's schedule, alone: layout (buckets, chunks, owned spans) and the
// rounds, checked by simulating the ring on sets of contributions instead of floats. The
// ring averager books its messages by this schedule (actors/averaging/ring_collective.cpp), so a
// schedule that reduced an element twice or never, or let two replicas own one float,
// would fail here before it could corrupt a training run.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "actors/averaging/ring_schedule.hpp"

using namespace troupe;

namespace {

/// How often each replica's gradient has been added into one element: the "value" the
/// simulated ring carries instead of a float.
using contributions = std::vector<int>;  // (R)

/// Checks that `spans` partition [begin, end) when sorted by offset (empty spans allowed).
void check_partition(std::vector<flat_span> spans, std::int64_t begin, std::int64_t end) {
  std::sort(spans.begin(), spans.end(),
            [](const flat_span& a, const flat_span& b) { return a.offset < b.offset; });
  std::int64_t next = begin;
  for (const auto& s : spans) {
    CHECK(s.size >= 0);
    if (s.size == 0)
      continue;
    CHECK(s.offset == next);
    next = s.offset + s.size;
  }
  CHECK(next == end);
}

/// Simulates one all-reduce of `n` elements over R replicas by the schedule, round by
/// round, and checks every replica ends with every element reduced exactly once from
/// every replica.
void simulate(std::int64_t n, std::int32_t R, std::int64_t bucket_elements) {
  CAPTURE(n);
  CAPTURE(R);
  CAPTURE(bucket_elements);
  ring_schedule schedule{n, R, bucket_elements};
  // values[r][i]: what replica r holds for element i; at first only its own gradient.
  std::vector<std::vector<contributions>> values(static_cast<std::size_t>(R));
  for (std::int32_t r = 0; r < R; ++r) {
    contributions own(static_cast<std::size_t>(R), 0);
    own[static_cast<std::size_t>(r)] = 1;
    values[static_cast<std::size_t>(r)].assign(static_cast<std::size_t>(n), own);
  }
  struct message {
    std::int32_t chunk = -1;
    std::vector<contributions> data;  // (chunk size)
  };
  auto read = [&](std::int32_t r, std::int32_t b, std::int32_t c) {
    auto where = schedule.chunk(b, c);
    return std::vector<contributions>(
        values[static_cast<std::size_t>(r)].begin() + where.offset,
        values[static_cast<std::size_t>(r)].begin() + where.offset + where.size);
  };
  for (std::int32_t b = 0; b < schedule.buckets(); ++b) {
    CAPTURE(b);
    // Reduce-scatter: sent[r] is what replica r sends to r + 1 in the current round.
    std::vector<message> sent(static_cast<std::size_t>(R));
    for (std::int32_t r = 0; r < R; ++r)
      sent[static_cast<std::size_t>(r)] = {schedule.started_chunk(r),
                                           read(r, b, schedule.started_chunk(r))};
    for (std::int32_t t = 0; t < schedule.rounds(); ++t) {
      std::vector<message> next(static_cast<std::size_t>(R));
      for (std::int32_t r = 0; r < R; ++r) {
        const auto& in = sent[static_cast<std::size_t>(ring_modulo(r - 1, R))];
        const auto c = schedule.received_chunk(r, ring_phase::reduce_scatter, t);
        REQUIRE(in.chunk == c);
        auto sum = read(r, b, c);
        REQUIRE(sum.size() == in.data.size());
        for (std::size_t i = 0; i < sum.size(); ++i)
          for (std::int32_t k = 0; k < R; ++k)
            sum[i][static_cast<std::size_t>(k)] += in.data[i][static_cast<std::size_t>(k)];
        if (schedule.last_reduce_round(t)) {
          // The full sum: this replica owns it, and keeps it in its buffer.
          CHECK(c == schedule.owned_chunk(r));
          auto where = schedule.chunk(b, c);
          std::copy(sum.begin(), sum.end(),
                    values[static_cast<std::size_t>(r)].begin() + where.offset);
        }
        next[static_cast<std::size_t>(r)] = {c, std::move(sum)};
      }
      sent = std::move(next);
    }
    // Every owned chunk holds each replica's gradient exactly once.
    for (std::int32_t r = 0; r < R; ++r)
      for (const auto& element : read(r, b, schedule.owned_chunk(r)))
        CHECK(element == contributions(static_cast<std::size_t>(R), 1));
    // All-gather: everyone starts with the chunk it owns.
    for (std::int32_t r = 0; r < R; ++r)
      sent[static_cast<std::size_t>(r)] = {schedule.owned_chunk(r),
                                           read(r, b, schedule.owned_chunk(r))};
    for (std::int32_t t = 0; t < schedule.rounds(); ++t) {
      std::vector<message> next(static_cast<std::size_t>(R));
      for (std::int32_t r = 0; r < R; ++r) {
        const auto& in = sent[static_cast<std::size_t>(ring_modulo(r - 1, R))];
        const auto c = schedule.received_chunk(r, ring_phase::all_gather, t);
        REQUIRE(in.chunk == c);
        auto where = schedule.chunk(b, c);
        std::copy(in.data.begin(), in.data.end(),
                  values[static_cast<std::size_t>(r)].begin() + where.offset);
        if (schedule.forwards_gathered(t))
          next[static_cast<std::size_t>(r)] = in;
        else  // the last round: the next replica computed this chunk itself
          CHECK(schedule.owned_chunk(ring_modulo(r + 1, R)) == c);
      }
      sent = std::move(next);
    }
  }
  for (std::int32_t r = 0; r < R; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      CAPTURE(r);
      CAPTURE(i);
      CHECK(values[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] ==
            contributions(static_cast<std::size_t>(R), 1));
    }
}

}  // namespace

TEST_CASE("ring chunks differ in size by at most one, the longer ones first") {
  CHECK(chunk_of(10, 3, 0) == flat_span{0, 4});
  CHECK(chunk_of(10, 3, 1) == flat_span{4, 3});
  CHECK(chunk_of(10, 3, 2) == flat_span{7, 3});
  CHECK(chunk_of(2, 4, 1) == flat_span{1, 1});
  CHECK(chunk_of(2, 4, 3) == flat_span{2, 0});
  for (std::int64_t n : {0, 1, 5, 12, 13}) {
    for (std::int32_t parts = 1; parts <= 5; ++parts) {
      std::vector<flat_span> chunks;
      for (std::int32_t c = 0; c < parts; ++c) {
        chunks.push_back(chunk_of(n, parts, c));
        CHECK(chunks.back().size >= n / parts);
        CHECK(chunks.back().size <= n / parts + 1);
        if (c > 0)
          CHECK(chunks[static_cast<std::size_t>(c)].size <=
                chunks[static_cast<std::size_t>(c - 1)].size);
      }
      check_partition(chunks, 0, n);
    }
  }
}

TEST_CASE("ring_modulo wraps negative replica offsets into 0 .. R-1") {
  CHECK(ring_modulo(-1, 3) == 2);
  CHECK(ring_modulo(-4, 3) == 2);
  CHECK(ring_modulo(5, 3) == 2);
  CHECK(ring_modulo(0, 1) == 0);
}

TEST_CASE("buckets cut the buffer in order, the last one shorter") {
  ring_schedule schedule{20, 3, 7};
  REQUIRE(schedule.buckets() == 3);
  CHECK(schedule.bucket(0) == flat_span{0, 7});
  CHECK(schedule.bucket(1) == flat_span{7, 7});
  CHECK(schedule.bucket(2) == flat_span{14, 6});
  // Chunk offsets are in the buffer, not in the bucket: bucket 1 of 7 is cut 3, 2, 2.
  CHECK(schedule.chunk(1, 0) == flat_span{7, 3});
  CHECK(schedule.chunk(1, 2) == flat_span{12, 2});
  CHECK(ring_schedule{0, 3, 7}.buckets() == 0);
  CHECK(ring_schedule{7, 3, 7}.buckets() == 1);
  CHECK(ring_schedule{8, 3, 7}.buckets() == 2);
  CHECK(ring_schedule{5, 1, 7}.rounds() == 0);
  CHECK(ring_schedule{5, 4, 7}.messages_per_bucket() == 6);
}

TEST_CASE("replica r owns chunk r + 1 of every bucket, and the owned spans partition the buffer") {
  ring_schedule example{20, 3, 7};
  CHECK(example.owned_chunk(0) == 1);
  CHECK(example.owned_chunk(2) == 0);
  // Replica 0 owns chunk 1 of each bucket: [3, 5), [10, 12), [16, 18).
  CHECK(example.owned_spans(0) ==
        std::vector<flat_span>{flat_span{3, 2}, flat_span{10, 2}, flat_span{16, 2}});
  for (std::int32_t R = 1; R <= 5; ++R)
    for (std::int64_t n : {0, 1, 2, 4, 20, 23})
      for (std::int64_t bucket : {1, 3, 7, 1 << 18}) {
        CAPTURE(R);
        CAPTURE(n);
        CAPTURE(bucket);
        ring_schedule schedule{n, R, bucket};
        std::vector<flat_span> all;
        for (std::int32_t r = 0; r < R; ++r) {
          auto owned = schedule.owned_spans(r);
          CHECK(owned.size() == static_cast<std::size_t>(schedule.buckets()));
          all.insert(all.end(), owned.begin(), owned.end());
        }
        check_partition(all, 0, n);
      }
}

TEST_CASE("the ring reduces every element exactly once per replica for R = 1 to 5") {
  // Odd sizes, n < R (some chunks empty), one bucket, several buckets, a bucket per element.
  for (std::int32_t R = 1; R <= 5; ++R)
    for (std::int64_t n : {0, 1, 2, 3, 7, 20, 23})
      for (std::int64_t bucket : {1, 3, 7, 1 << 18})
        simulate(n, R, bucket);
}

TEST_CASE("every reduce-scatter round hands each replica the chunk its predecessor sent") {
  // The schedule's own consistency, as the actor relies on it: what r - 1 sends in round t
  // (its started chunk in round 0, else what it received in round t - 1) is what r expects.
  for (std::int32_t R = 2; R <= 5; ++R) {
    ring_schedule schedule{100, R, 1 << 18};
    for (std::int32_t r = 0; r < R; ++r) {
      const auto before = ring_modulo(r - 1, R);
      CHECK(schedule.received_chunk(r, ring_phase::reduce_scatter, 0) ==
            schedule.started_chunk(before));
      CHECK(schedule.received_chunk(r, ring_phase::all_gather, 0) == schedule.owned_chunk(before));
      for (std::int32_t t = 1; t < schedule.rounds(); ++t) {
        CHECK(schedule.received_chunk(r, ring_phase::reduce_scatter, t) ==
              schedule.received_chunk(before, ring_phase::reduce_scatter, t - 1));
        CHECK(schedule.received_chunk(r, ring_phase::all_gather, t) ==
              schedule.received_chunk(before, ring_phase::all_gather, t - 1));
      }
      CHECK(schedule.received_chunk(r, ring_phase::reduce_scatter, schedule.rounds() - 1) ==
            schedule.owned_chunk(r));
    }
  }
}
