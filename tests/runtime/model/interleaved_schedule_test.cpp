// Interleaved 1F1B's order and bound (runtime/model/interleaved_schedule.hpp), and the
// sequencer that keeps them on one device, driven pass by pass.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/interleaved_schedule.hpp"

using namespace troupe;

namespace {

// "0.1" is stage 0, micro-batch 1.
std::string turns(const interleaved_pipeline& p, std::int64_t device, bool forward) {
  std::string out;
  for (std::int64_t k = 0; k < p.passes(); ++k) {
    auto t = forward ? p.forward_turn(device, k) : p.backward_turn(device, k);
    out += (out.empty() ? "" : " ") + std::to_string(t.stage) + "." + std::to_string(t.microbatch);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "forwards go round in groups of P micro-batches, chunk by chunk, and backwards in reverse") {
  // Megatron-LM's interleaved schedule at P = 2, v = 2, M = 4 (Narayanan et al. 2021, fig. 4).
  const interleaved_pipeline p{2, 2, 4};
  CHECK(turns(p, 0, true) == "0.0 0.1 2.0 2.1 0.2 0.3 2.2 2.3");
  CHECK(turns(p, 1, true) == "1.0 1.1 3.0 3.1 1.2 1.3 3.2 3.3");
  CHECK(turns(p, 0, false) == "2.0 2.1 0.0 0.1 2.2 2.3 0.2 0.3");
  CHECK(turns(p, 1, false) == "3.0 3.1 1.0 1.1 3.2 3.3 1.2 1.3");
  const interleaved_pipeline q{3, 3, 3};
  CHECK(turns(q, 2, true) == "2.0 2.1 2.2 5.0 5.1 5.2 8.0 8.1 8.2");
}

TEST_CASE("a device holds at most Megatron's warm-up plus one micro-batches") {
  // 2 (P - d - 1) + (v - 1) P + 1, and never more than the M v passes of a step.
  const interleaved_pipeline p{2, 2, 4};
  CHECK(p.stash_bound(0) == 5);
  CHECK(p.stash_bound(1) == 3);
  const interleaved_pipeline q{4, 2, 8};
  CHECK(q.stash_bound(0) == 11);
  CHECK(q.stash_bound(3) == 5);
  const interleaved_pipeline few{4, 3, 4};  // M v = 12 passes at most
  CHECK(few.stash_bound(0) == 12);
  CHECK(p.bubble() == doctest::Approx(1.0 / 9));
}

TEST_CASE("a device's turns: Megatron's warm-up, then one forward and one backward in turn") {
  const interleaved_pipeline p{2, 2, 4};
  auto sequence = [&](std::int64_t device) {
    std::string out;
    for (std::int64_t i = 0; i < 2 * p.passes(); ++i) {
      bool forward = false;
      auto t = p.turn(device, i, forward);
      out += (out.empty() ? "" : " ") + std::string{forward ? "F" : "B"} + std::to_string(t.stage) +
             "." + std::to_string(t.microbatch);
    }
    return out;
  };
  CHECK(p.warmup(0) == 4);
  CHECK(sequence(0) ==
        "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 "
        "B2.2 B2.3 B0.2 B0.3");
  CHECK(p.warmup(1) == 2);
  CHECK(sequence(1) ==
        "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 "
        "F3.3 B3.3 B1.2 B1.3");
}

TEST_CASE("ZB-H1's turns are 1F1B's: P - d - 1 forwards, then one forward and one backward") {
  // Megatron's non-interleaved 1F1B (Note [zero-bubble turns]); M need not be a multiple of P.
  const interleaved_pipeline p{4, 1, 5, true};
  auto sequence = [&](std::int64_t device) {
    std::string out;
    for (std::int64_t i = 0; i < 2 * p.passes(); ++i) {
      bool forward = false;
      auto t = p.turn(device, i, forward);
      CHECK(t.stage == device);
      out += std::string{forward ? "F" : "B"} + std::to_string(t.microbatch);
    }
    return out;
  };
  CHECK(p.warmup(0) == 3);
  CHECK(sequence(0) == "F0F1F2F3B0F4B1B2B3B4");
  CHECK(p.stash_bound(0) == 4);
  CHECK(sequence(3) == "F0B0F1B1F2B2F3B3F4B4");
  CHECK(p.stash_bound(3) == 1);
  stage_sequencer s{p, 1};
  CHECK(s.describe() ==
        "zero-bubble turns on this device: next the first step's first forward; holds 0 of 3 "
        "micro-batches");
  const interleaved_pipeline few{4, 1, 2, true};  // fewer micro-batches than the warm-up
  CHECK(few.warmup(0) == 2);
  CHECK(few.stash_bound(0) == 2);
}

TEST_CASE("the sequencer admits only the pass whose turn it is") {
  stage_sequencer s{interleaved_pipeline{2, 2, 4}, 0};
  std::vector<std::int64_t> woken;
  s.on_turn(0, [&] { woken.push_back(0); });
  s.on_turn(2, [&] { woken.push_back(2); });
  CHECK_FALSE(s.try_forward(7, 2, 0));  // chunk 1 waits for chunk 0's group
  CHECK_FALSE(s.try_forward(7, 0, 1));  // micro-batch 1 waits for 0
  CHECK(s.try_forward(7, 0, 0));        // the run may start at any step
  CHECK_FALSE(s.try_forward(7, 0, 1));  // until that forward reaches its stage's last layer
  CHECK(s.describe() ==
        "interleaved turns on this device: next the open forward reaching its stage's last "
        "layer; holds 1 of 5 micro-batches");
  s.forward_passed();
  CHECK(s.try_forward(7, 0, 1));
  s.forward_passed();
  CHECK(woken.back() == 2);  // chunk 1's turn has come
  for (auto [stage, microbatch] : {std::pair{2, 0}, {2, 1}, {0, 2}}) {
    CHECK(s.try_forward(7, stage, microbatch));
    s.forward_passed();
  }
  CHECK(s.held() == 5);
  CHECK(s.describe() ==
        "interleaved turns on this device: next the backward of stage 2, micro-batch 0 of "
        "step 7; holds 5 of 5 micro-batches");
  CHECK_FALSE(s.try_forward(7, 0, 3));   // the bound: a backward goes first
  CHECK_FALSE(s.try_backward(7, 0, 0));  // backwards start with chunk 1
  CHECK(s.try_backward(7, 2, 0));
  CHECK_FALSE(s.try_forward(7, 0, 3));  // until the backward reaches its stage's first layer
  woken.clear();
  s.release();
  CHECK(woken == std::vector<std::int64_t>{0});
  CHECK(s.try_forward(7, 0, 3));
  s.forward_passed();
  CHECK(s.held() == 5);
  CHECK_FALSE(s.try_forward(8, 0, 0));  // step 8 starts only when step 7 is done
}

TEST_CASE("the sequencer runs whole steps in its sequence and moves on to the next") {
  // Offers device 1's passes of P = 2, v = 2, M = 2 as fast as their inputs could exist: a
  // backward only after its forward. What is refused is offered again.
  const interleaved_pipeline p{2, 2, 2};
  stage_sequencer s{p, 1};
  for (std::int64_t step = 3; step < 5; ++step) {
    std::int64_t forwards = 0, backwards = 0;
    std::set<std::pair<std::int64_t, std::int64_t>> forwarded;  // (stage, micro-batch)
    std::string order;
    while (forwards < p.passes() || backwards < p.passes()) {
      bool moved = false;
      if (backwards < p.passes()) {
        auto t = p.backward_turn(1, backwards);
        if (forwarded.count({t.stage, t.microbatch}) > 0 &&
            s.try_backward(step, t.stage, t.microbatch)) {
          ++backwards;
          s.release();
          order += "B";
          moved = true;
        }
      }
      if (forwards < p.passes()) {
        auto t = p.forward_turn(1, forwards);
        if (s.try_forward(step, t.stage, t.microbatch)) {
          s.forward_passed();
          forwarded.insert({t.stage, t.microbatch});
          ++forwards;
          order += "F";
          moved = true;
        }
      }
      REQUIRE(moved);
    }
    CHECK(order == "FFFBFBBB");  // warm-up of (v - 1) P = 2 at the last device, then 1F1B
    CHECK(s.held() == 0);
  }
}
