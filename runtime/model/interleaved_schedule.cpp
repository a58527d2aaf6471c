// interleaved_schedule.cpp: Megatron's interleaved order, its memory bound, and the
// sequencer that keeps them on one device (Note [interleaved stages] in the header).
#include "runtime/model/interleaved_schedule.hpp"

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// (chunk, micro-batch) of the k-th pass of a step: groups of P micro-batches, each group
// through the v chunks in turn.
std::pair<std::int64_t, std::int64_t> chunk_and_microbatch(const interleaved_pipeline& p,
                                                           std::int64_t k) {
  const auto P = p.devices, v = p.virtual_stages;
  TROUPE_CHECK(k >= 0 && k < p.passes(), "pass " << k << " of " << p.passes());
  const auto group = k / (P * v), within = k % (P * v);
  return {within / P, group * P + within % P};
}

}  // namespace

stage_turn interleaved_pipeline::forward_turn(std::int64_t device, std::int64_t k) const {
  auto [chunk, microbatch] = chunk_and_microbatch(*this, k);
  return {chunk * devices + device, microbatch};
}

stage_turn interleaved_pipeline::backward_turn(std::int64_t device, std::int64_t k) const {
  auto [chunk, microbatch] = chunk_and_microbatch(*this, k);
  return {(virtual_stages - 1 - chunk) * devices + device, microbatch};
}

std::int64_t interleaved_pipeline::warmup(std::int64_t device) const {
  if (one_f_one_b)
    return std::min(passes(), devices - device - 1);
  return std::min(passes(), 2 * (devices - device - 1) + (virtual_stages - 1) * devices);
}

stage_turn interleaved_pipeline::turn(std::int64_t device, std::int64_t i, bool& forward) const {
  const auto w = warmup(device), n = passes();
  TROUPE_CHECK(i >= 0 && i < 2 * n, "turn " << i << " of " << 2 * n);
  // Turns: w forwards; then forward w + k and backward k in turn; then the backwards left.
  std::int64_t k;
  if (i < w) {
    forward = true;
    k = i;
  } else if (i < w + 2 * (n - w)) {
    forward = (i - w) % 2 == 0;
    k = forward ? w + (i - w) / 2 : (i - w) / 2;
  } else {
    forward = false;
    k = i - n;  // the backwards before it: (n - w) in the steady state
  }
  return forward ? forward_turn(device, k) : backward_turn(device, k);
}

std::int64_t interleaved_pipeline::stash_bound(std::int64_t device) const {
  return std::min(passes(), warmup(device) + 1);
}

double interleaved_pipeline::bubble() const {
  const auto P = static_cast<double>(devices);
  return (P - 1) / (static_cast<double>(virtual_stages * microbatches) + P - 1);
}

stage_sequencer::stage_sequencer(interleaved_pipeline pipeline, std::int64_t device)
    : pipeline_(pipeline), device_(device), bound_(pipeline.stash_bound(device)) {
  TROUPE_CHECK(!pipeline.one_f_one_b || pipeline.virtual_stages == 1,
               "1F1B's turns with v = " << pipeline.virtual_stages);
  TROUPE_CHECK(pipeline.one_f_one_b || pipeline.microbatches % pipeline.devices == 0,
               "M = " << pipeline.microbatches << " is not a multiple of P = " << pipeline.devices);
  TROUPE_CHECK(device >= 0 && device < pipeline.devices, "device " << device);
}

void stage_sequencer::on_turn(std::int64_t stage, std::function<void()> wake) {
  std::lock_guard<std::mutex> guard{mutex_};
  wake_[stage].push_back(std::move(wake));
}

// The turns count the passes of one step; a pass of a later step starts counting anew
// only once the step it counts is complete (so a run starts, or resumes, at any step).
bool stage_sequencer::admit(std::int64_t step, const stage_turn& wanted, bool forward) {
  const auto turns = 2 * pipeline_.passes();
  if (step_ < 0 || (step > step_ && index_ == turns)) {
    step_ = step;
    index_ = 0;
  }
  if (step != step_ || index_ == turns || backward_open_ || forward_open_)
    return false;
  bool is_forward = false;
  auto turn = pipeline_.turn(device_, index_, is_forward);
  if (is_forward != forward || !(turn == wanted))
    return false;
  ++index_;
  if (forward) {
    ++held_;
    forward_open_ = true;
  } else {
    backward_open_ = true;
  }
  return true;
}

bool stage_sequencer::try_forward(std::int64_t step, std::int64_t stage, std::int64_t microbatch) {
  std::lock_guard<std::mutex> guard{mutex_};
  return admit(step, {stage, microbatch}, true);  // the next turn waits for forward_passed()
}

void stage_sequencer::forward_passed() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    TROUPE_CHECK(forward_open_, "a forward passed its stage with no forward open");
    forward_open_ = false;
  }
  wake_turn();
}

bool stage_sequencer::try_backward(std::int64_t step, std::int64_t stage, std::int64_t microbatch) {
  std::lock_guard<std::mutex> guard{mutex_};
  return admit(step, {stage, microbatch}, false);  // the next turn waits for release()
}

void stage_sequencer::release() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    TROUPE_CHECK(held_ > 0 && backward_open_,
                 "a micro-batch released on a device that holds none or has no backward open");
    --held_;
    backward_open_ = false;
  }
  wake_turn();
}

void stage_sequencer::add_layer(std::int64_t stage, std::int32_t layer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [span, fresh] = layers_.emplace(stage, std::make_pair(layer, layer));
  span->second.first = std::min(span->second.first, layer);
  span->second.second = std::max(span->second.second, layer);
}

bool stage_sequencer::first_of(std::int64_t stage, std::int32_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto span = layers_.find(stage);
  return span != layers_.end() && span->second.first == layer;
}

bool stage_sequencer::last_of(std::int64_t stage, std::int32_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto span = layers_.find(stage);
  return span != layers_.end() && span->second.second == layer;
}

std::int64_t stage_sequencer::held() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return held_;
}

// Wakes the stage whose turn is next (at the end of a step: the next step's first).
void stage_sequencer::wake_turn() {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    bool forward = false;
    const auto i = index_ == 2 * pipeline_.passes() ? 0 : index_;
    auto found = wake_.find(pipeline_.turn(device_, i, forward).stage);
    if (found != wake_.end())
      calls = found->second;
  }
  for (auto& call : calls)
    call();
}

std::string stage_sequencer::describe() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::string next;
  if (step_ < 0) {
    next = "the first step's first forward";
  } else if (index_ == 2 * pipeline_.passes()) {
    next = "step " + std::to_string(step_ + 1) + "'s first forward";
  } else if (backward_open_) {
    next = "the open backward reaching its stage's first layer";
  } else if (forward_open_) {
    next = "the open forward reaching its stage's last layer";
  } else {
    bool forward = false;
    auto t = pipeline_.turn(device_, index_, forward);
    next = std::string{forward ? "the forward" : "the backward"} + " of stage " +
           std::to_string(t.stage) + ", micro-batch " + std::to_string(t.microbatch) + " of step " +
           std::to_string(step_);
  }
  return std::string{pipeline_.one_f_one_b ? "zero-bubble" : "interleaved"} +
         " turns on this device: next " + next + "; holds " + std::to_string(held_) + " of " +
         std::to_string(bound_) + " micro-batches";
}

}  // namespace troupe
