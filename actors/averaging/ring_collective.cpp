// ring_collective.cpp: the ring backend (collective_backend.hpp): a layer's buffer summed by
// the averagers of its replicas passing chunks around a ring as actor messages. The backend
// only books by ring_schedule: every copy and sum is a job on its averager's device stream,
// and every tensor it sends carries the event of the job that writes it. It never writes a
// tensor it received (they are shared with the sender) unless it was handed over; it writes
// the buffer it was given, and sends views of it (Note [chunks in place]).
//
// The buffer of n floats is cut into buckets, and each bucket is all-reduced independently:
// R - 1 rounds of reduce-scatter, then R - 1 rounds of all-gather, as ring_schedule.hpp lays
// out; replica r sends to replica (r + 1) mod R. Ring messages of a later step or from a
// faster neighbour are kept until needed; those sent before the ring is wired wait in an
// outbox. With [parallel] reduce_dtype = "bf16" the gradient chunks travel in bf16 (Note [a
// ring in bf16]). Not here: other compression, hierarchical or tree reductions.
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "actors/averaging/collective_backend.hpp"
#include "runtime/core/transfer.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe {

// Note [ring order]
// A chunk travels the ring once during reduce-scatter: it starts at one replica, and
// each later replica adds its own copy, so its full sum is computed once, in one order,
// by one replica. All-gather then copies those bits to everyone. That is why every
// replica's result is bit-identical without any broadcast. Each replica processes a
// bucket's ring messages strictly in (phase, round) order, whatever order they arrive
// in: a message that comes early (before the step's local gradients, or before an
// earlier round) waits in `pending_` until its turn.

// Note [chunks in place]
// What a replica sends of its flat buffer is a view, not a copy, though the buffer is
// written later in the step: a span is written only after every replica that reads the
// view has read it. The chunk a replica starts with (round 0) is written again only by
// the all-gather of that chunk, whose full sum comes from a chain of reduce jobs on the
// other replicas, the first of which read our view; each job of the chain waits for the
// tensor it receives, so our copy job, which waits for the full sum, runs after that read.
// The full sum of the chunk a replica owns is added in place (one pass, not a copy out,
// a sum and a copy back) and sent as a view; nothing writes that span again this step.
// Sharded, the all-gather writes the optimizer's new buffer, not the gradients. Across
// nodes a view is serialised once it is written (send_written), which is before the
// replies that make us write it. What is sent carries the event of the job that
// wrote it, so a reader never sees a partial sum. With the reads in place this took DP2
// of the shipped MLP at batch 128 from 1.32x to 1.44x one device's samples/s (medians of
// 7 alternating runs): the copies sat between the largest layer's backward and the next
// forward, which waits for its parameters.

// Note [a ring in bf16]
// With [parallel] reduce_dtype = "bf16" every gradient chunk on the ring is bf16, half the
// bytes, as PyTorch DDP's bf16_compress_hook sends them; every sum is still taken in fp32.
// A replica rounds what it starts (round 0) to bf16; each later replica widens the partial
// sum it receives, adds its own fp32 chunk, and rounds the result to send on; the last one
// keeps the full sum in fp32, rounds it once and writes the rounded value back into its own
// buffer, so that the all-gather (which passes those bf16 bits on unchanged and each replica
// widens exactly) leaves every replica with the same bits. A chunk is so rounded R times
// over R replicas: its relative error grows to about R * 2^-9 (bf16's half-ulp per rounding)
// of the magnitudes summed, against R * 2^-24 in fp32; the summation order is the fp32
// ring's (Note [ring order]). One replica has nothing to send and rounds nothing. Sharded
// (ZeRO-1), the reduce-scatter is the same, and the optimizer that owns a chunk gets its
// full sum rounded as the all-gather would have passed it on, so that sharding changes
// memory, not the math; the all-gather then carries parameters, which stay fp32 (a version
// is rounded for bf16 layers by the optimizer: Note [bf16 parameters] in
// actors/training/layer_actor.cpp).

namespace {

constexpr std::int64_t float_bytes = sizeof(float);

class ring_collective final : public collective_backend {
 public:
  explicit ring_collective(collective_host& host);

  const char* name() const override { return "ring"; }
  void all_reduce(std::int64_t step, tensor flat) override { start(step, std::move(flat), false); }
  bool shards() const override { return true; }
  void reduce_scatter(std::int64_t step, tensor flat) override {
    start(step, std::move(flat), true);
  }
  void all_gather(std::int64_t step, tensor flat) override;
  void connect(const wiring_msg& wiring) override;
  void release() override;
  void receive(ring_msg& message) override;
  std::string waiting_for() const override;

 private:
  /// One step's state, created when the local gradients arrive.
  struct step_state {
    explicit step_state(ring_schedule layout) : schedule(layout) {}
    tensor flat;                          // (n) this replica's buffer, reduced in place
    ring_schedule schedule;               // of n floats over R replicas
    std::vector<std::int32_t> processed;  // per bucket: ring messages taken, 0 .. 2(R-1)
    std::int32_t buckets_left = 0;
    bool sharded = false;           // reduce-scatter, then all-gather of other values
    std::int32_t reduced_left = 0;  // sharded: buckets whose reduce-scatter is not done
    bool gathering = false;         // sharded: `flat` is now the values to all-gather
  };
  using ring_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::int32_t>;
  // (step, bucket, phase, round)

  const grad_averager_settings& settings() const { return host_.settings(); }
  device& on() const { return host_.on(); }
  void start(std::int64_t step_index, tensor flat, bool sharded);
  void take_pending(std::int64_t step_index, std::int32_t bucket);
  /// The chunk `message` carries, for our device's next job to read (where it lies, if it
  /// can: runtime/core/transfer.hpp's read_in_place), after checking it is the one this
  /// replica receives in `phase` and round message.round; `where` is set to its span.
  tensor receive_chunk(step_state& step, const ring_msg& message, ring_phase phase,
                       flat_span& where);
  void reduce_scatter_round(step_state& step, const ring_msg& message);
  void all_gather_round(step_state& step, const ring_msg& message);
  /// A view of `chunk` of `bucket` in step.flat, ready when step.flat is (Note [chunks in
  /// place]: no copy is taken of what we send).
  tensor chunk_view(const step_state& step, std::int32_t bucket, std::int32_t chunk) const;
  void send_ring(std::int64_t step, std::int32_t bucket, ring_phase phase, std::int32_t round,
                 std::int32_t chunk, tensor data);
  /// Whether chunks of `phase` travel in bf16 in `step` (Note [a ring in bf16]).
  bool in_bf16(const step_state& step, ring_phase phase) const {
    return settings().reduce_bf16 && (phase == ring_phase::reduce_scatter || !step.sharded);
  }
  /// `chunk` (a view of our buffer) rounded to bf16 by a job on our device, to send.
  tensor rounded(const tensor& chunk, std::int64_t step);
  /// Reduce-scatter with bf16 chunks: `received` widened and added to our copy of the
  /// chunk at `where`; the last round returns the full sum rounded, and writes that back in
  /// place; other rounds return the rounded partial sum.
  tensor add_bf16(step_state& step, const tensor& received, const flat_span& where, bool last,
                  std::int64_t step_index);
  void finish_if_done(std::int64_t step_index);
  /// Sharded: the reduce-scatter is done; our owned sums go to the optimizer.
  void reduce_scattered(step_state& step, std::int64_t step_index);

  collective_host& host_;
  kernels::ops::copy::function copy_ = nullptr;
  kernels::ops::axpy::function axpy_ = nullptr;
  // reduce_dtype = "bf16"
  kernels::ops::to_bf16::function to_bf16_ = nullptr;
  kernels::ops::from_bf16::function from_bf16_ = nullptr;
  kernels::ops::add_to_bf16::function add_to_bf16_ = nullptr;
  caf::actor next_;  // the averager of replica (replica + 1) % R
  std::uint32_t next_track_ = 0;
  std::map<std::int64_t, step_state> steps_;  // by step
  std::map<ring_key, ring_msg> pending_;      // ring messages not taken yet
  std::vector<ring_msg> outbox_;              // ring messages waiting for `next_`
};

ring_collective::ring_collective(collective_host& host) : host_(host) {
  TROUPE_CHECK(settings().bucket_elements > 0,
               settings().name << ": bucket_elements = " << settings().bucket_elements);
  const auto type = on().id().type;
  copy_ = kernels::lookup<kernels::ops::copy>(type);
  axpy_ = kernels::lookup<kernels::ops::axpy>(type);
  if (settings().reduce_bf16) {
    to_bf16_ = kernels::lookup<kernels::ops::to_bf16>(type);
    from_bf16_ = kernels::lookup<kernels::ops::from_bf16>(type);
    add_to_bf16_ = kernels::lookup<kernels::ops::add_to_bf16>(type);
  }
}

// The ring is circular, so `next` comes with the wiring, once every actor is spawned;
// what was sent before waits in the outbox.
void ring_collective::connect(const wiring_msg& wiring) {
  auto ring = wiring.out("ring");
  TROUPE_CHECK(ring.size() == 1, settings().name << " needs one ring wire out");
  next_ = ring[0].peer;
  next_track_ = ring[0].peer_track;
  for (auto& message : outbox_)
    host_.send_to_peer(next_, next_track_, std::move(message));
  outbox_.clear();
}

// The averagers of a ring hold each other (next_), a cycle of strong references that
// would keep them all in memory after they quit.
void ring_collective::release() {
  next_ = nullptr;
  outbox_.clear();
  pending_.clear();
}

std::string ring_collective::waiting_for() const {
  std::string out;
  for (const auto& [step, state] : steps_)
    out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) + " has " +
           std::to_string(state.buckets_left) + " bucket(s) waiting for ring messages";
  if (!pending_.empty())
    out += (out.empty() ? "" : ", ") + std::to_string(pending_.size()) + " early ring message(s)";
  return out.empty() ? "; no step in progress" : "; steps in progress: " + out;
}

void ring_collective::start(std::int64_t step_index, tensor flat, bool sharded) {
  const auto replicas = settings().replicas;
  ring_schedule schedule{flat.numel(), replicas, settings().bucket_elements};
  auto& step = steps_.emplace(step_index, step_state{schedule}).first->second;
  step.flat = std::move(flat);
  const auto buckets = step.schedule.buckets();
  step.processed.assign(static_cast<std::size_t>(buckets), 0);
  // With one replica there is nothing to exchange: every bucket is complete at once.
  step.buckets_left = replicas > 1 ? buckets : 0;
  step.sharded = sharded && replicas > 1;
  step.reduced_left = step.sharded ? buckets : 0;
  if (replicas > 1) {
    // Reduce-scatter round 0: replica r starts its own chunk of every bucket on its way.
    const auto started = step.schedule.started_chunk(settings().replica);
    for (std::int32_t b = 0; b < buckets; ++b) {
      auto chunk = chunk_view(step, b, started);
      if (in_bf16(step, ring_phase::reduce_scatter))
        chunk = rounded(chunk, step_index);
      send_ring(step_index, b, ring_phase::reduce_scatter, 0, started, std::move(chunk));
    }
  }
  for (std::int32_t b = 0; b < buckets; ++b)
    take_pending(step_index, b);
  finish_if_done(step_index);
}

void ring_collective::receive(ring_msg& message) {
  const auto& s = settings();
  if (message.layer != s.layer_index)
    throw std::logic_error(s.name + ": ring message of layer " + std::to_string(message.layer) +
                           ", expected layer " + std::to_string(s.layer_index));
  if (s.replicas < 2 || message.phase < 0 || message.phase > 1 || message.round < 0 ||
      message.round > s.replicas - 2)
    throw std::logic_error(s.name + ": unexpected ring message (step " +
                           std::to_string(message.step) + ", phase " +
                           std::to_string(message.phase) + ", round " +
                           std::to_string(message.round) + ")");
  const auto step_index = message.step;
  const auto bucket = message.bucket;
  ring_key key{step_index, bucket, message.phase, message.round};
  if (!pending_.emplace(key, std::move(message)).second)
    throw std::logic_error(s.name + ": ring message of step " + std::to_string(step_index) +
                           ", bucket " + std::to_string(bucket) + " arrived twice");
  if (steps_.count(step_index) == 0)
    return;  // the local gradients of that step are not here yet
  take_pending(step_index, bucket);
  finish_if_done(step_index);
}

void ring_collective::take_pending(std::int64_t step_index, std::int32_t bucket) {
  auto& step = steps_.at(step_index);
  if (bucket < 0 || bucket >= step.schedule.buckets())
    throw std::logic_error(settings().name + ": ring message for bucket " +
                           std::to_string(bucket) + " of step " + std::to_string(step_index) +
                           ", which has " + std::to_string(step.processed.size()) +
                           " buckets (do the replicas' gradients have the same size?)");
  const std::int32_t rounds = step.schedule.rounds();
  auto& processed = step.processed[static_cast<std::size_t>(bucket)];
  while (processed < step.schedule.messages_per_bucket()) {
    if (processed == rounds && step.sharded && !step.gathering)
      return;  // the all-gather waits for our optimizer's updated parameters
    auto it = pending_.find(ring_key{step_index, bucket, processed / rounds, processed % rounds});
    if (it == pending_.end())
      return;
    auto message = std::move(it->second);
    pending_.erase(it);
    if (message.phase == static_cast<std::int32_t>(ring_phase::reduce_scatter))
      reduce_scatter_round(step, message);
    else
      all_gather_round(step, message);
    if (++processed == step.schedule.messages_per_bucket())
      --step.buckets_left;
  }
}

tensor ring_collective::receive_chunk(step_state& step, const ring_msg& message,
                                      ring_phase phase, flat_span& where) {
  const auto& s = settings();
  const auto r = s.replica;
  const auto expected_chunk = step.schedule.received_chunk(r, phase, message.round);
  if (message.chunk != expected_chunk)
    throw std::logic_error(s.name + " (replica " + std::to_string(r) +
                           "): ring message of phase " + std::to_string(message.phase) +
                           ", round " + std::to_string(message.round) + " carries chunk " +
                           std::to_string(message.chunk) + ", expected " +
                           std::to_string(expected_chunk));
  where = step.schedule.chunk(message.bucket, message.chunk);
  const auto type = in_bf16(step, phase) ? dtype::bf16 : dtype::f32;
  if (message.data.defined() && message.data.type() != type)
    throw std::logic_error(s.name + ": ring chunk " + std::to_string(message.chunk) +
                           " of bucket " + std::to_string(message.bucket) + " of step " +
                           std::to_string(message.step) + " is " + to_string(message.data.type()) +
                           ", expected " + to_string(type) +
                           " (is [parallel] reduce_dtype the same on every node?)");
  if (!message.data.defined() || message.data.numel() != where.size)
    throw std::logic_error(s.name + ": ring chunk " + std::to_string(message.chunk) +
                           " of bucket " + std::to_string(message.bucket) + " of step " +
                           std::to_string(message.step) + " has " +
                           (message.data.defined() ? std::to_string(message.data.numel()) : "no") +
                           " elements, expected " + std::to_string(where.size) +
                           " (do the replicas' gradients have the same size?)");
  // Only read, by the job submitted next (Note [reading a peer in place]).
  return read_in_place(message.data, on());
}

void ring_collective::reduce_scatter_round(step_state& step, const ring_msg& message) {
  // We receive a partial sum of a chunk, add our own copy of it, and pass it on; after
  // the last round it is the full sum of the chunk we own.
  flat_span where;
  auto received = receive_chunk(step, message, ring_phase::reduce_scatter, where);
  if (in_bf16(step, ring_phase::reduce_scatter)) {
    const bool last = step.schedule.last_reduce_round(message.round);
    auto sent = add_bf16(step, received, where, last, message.step);
    if (!last)
      send_ring(message.step, message.bucket, ring_phase::reduce_scatter, message.round + 1,
                message.chunk, std::move(sent));
    else if (!step.sharded)
      send_ring(message.step, message.bucket, ring_phase::all_gather, 0, message.chunk,
                std::move(sent));
    else if (--step.reduced_left == 0)
      reduce_scattered(step, message.step);
    return;
  }
  if (step.schedule.last_reduce_round(message.round)) {
    // The full sum is ours to keep, and the first to be gathered: added in place (Note
    // [chunks in place]). The same sum, bit for bit, as into a buffer of its own.
    step.flat.set_ready(on().work().submit(
        [axpy = axpy_, context = on().context(), flat = step.flat, received, where] {
          axpy(context, where.size, 1.0f, received.f32(), flat.f32() + where.offset);
        },
        host_.reduce_job(message.step, where.size)));
    if (step.sharded) {
      if (--step.reduced_left == 0)
        reduce_scattered(step, message.step);
    } else {
      send_ring(message.step, message.bucket, ring_phase::all_gather, 0, message.chunk,
                chunk_view(step, message.bucket, message.chunk));
    }
    return;
  }
  auto sum = tensor::empty({where.size}, dtype::f32, on().id());
  sum.set_ready(on().work().submit(
      [copy = copy_, axpy = axpy_, context = on().context(), flat = step.flat, received, sum,
       where] {
        copy(context, where.size * float_bytes, flat.f32() + where.offset, sum.raw());
        axpy(context, where.size, 1.0f, received.f32(), sum.f32());
      },
      host_.reduce_job(message.step, where.size)));
  send_ring(message.step, message.bucket, ring_phase::reduce_scatter, message.round + 1,
            message.chunk, std::move(sum));
}

void ring_collective::all_gather_round(step_state& step, const ring_msg& message) {
  // We receive the full sum of a chunk, take it exactly, and pass it on unless the next
  // replica is the one that computed it.
  flat_span where;
  auto received = receive_chunk(step, message, ring_phase::all_gather, where);
  if (in_bf16(step, ring_phase::all_gather))
    on().work().submit(
        [widen = from_bf16_, context = on().context(), flat = step.flat, received, where] {
          widen(context, where.size, received.bf16(), flat.f32() + where.offset);
        },
        host_.reduce_job(message.step, where.size));
  else
    on().work().submit(
        [copy = copy_, context = on().context(), flat = step.flat, received, where] {
          copy(context, where.size * float_bytes, received.raw(), flat.f32() + where.offset);
        },
        host_.reduce_job(message.step, where.size));
  if (step.schedule.forwards_gathered(message.round))  // a received tensor is never written
    send_ring(message.step, message.bucket, ring_phase::all_gather, message.round + 1,
              message.chunk, received);
}

tensor ring_collective::rounded(const tensor& chunk, std::int64_t step) {
  auto source = read_in_place(chunk, on());
  auto out = tensor::empty({chunk.numel()}, dtype::bf16, on().id());
  out.set_ready(
      on().work().submit([round = to_bf16_, context = on().context(), source,
                          out] { round(context, source.numel(), source.f32(), out.bf16()); },
                         host_.reduce_job(step, chunk.numel())));
  return out;
}

tensor ring_collective::add_bf16(step_state& step, const tensor& received, const flat_span& where,
                                 bool last, std::int64_t step_index) {
  // Our chunk + the widened partial sum, in float (the fp32 ring's order), rounded to send
  // on; the last round keeps the rounded full sum in place, so that our copy is everyone's
  // (Note [a ring in bf16]). One pass: ops::add_to_bf16.
  auto out = tensor::empty({where.size}, dtype::bf16, on().id());
  auto done = on().work().submit(
      [add = add_to_bf16_, context = on().context(), flat = step.flat, received, out, where, last] {
        add(context, where.size, received.bf16(), flat.f32() + where.offset, out.bf16(), last);
      },
      host_.reduce_job(step_index, where.size));
  out.set_ready(done);
  if (last)
    step.flat.set_ready(done);
  return out;
}

void ring_collective::reduce_scattered(step_state& step, std::int64_t step_index) {
  auto flat = step.flat;
  flat.set_ready(on().work().last());
  host_.reduce_scattered(step_index, std::move(flat),
                         step.schedule.owned_spans(settings().replica));
}

tensor ring_collective::chunk_view(const step_state& step, std::int32_t bucket,
                                   std::int32_t chunk) const {
  auto where = step.schedule.chunk(bucket, chunk);
  auto view = step.flat.view(where.offset, {where.size});
  view.set_ready(step.flat.ready());
  return view;
}

void ring_collective::send_ring(std::int64_t step, std::int32_t bucket, ring_phase phase,
                                std::int32_t round, std::int32_t chunk, tensor data) {
  ring_msg message{
      step,  settings().layer_index, bucket,       static_cast<std::int32_t>(phase), round,
      chunk, std::move(data),        trace_stamp{}};
  if (next_)
    host_.send_to_peer(next_, next_track_, std::move(message));
  else
    outbox_.push_back(std::move(message));
}

void ring_collective::finish_if_done(std::int64_t step_index) {
  auto it = steps_.find(step_index);
  if (it == steps_.end() || it->second.buckets_left > 0)
    return;
  auto step = std::move(it->second);
  steps_.erase(it);
  // Ready once everything this step submitted has run.
  step.flat.set_ready(on().work().last());
  if (step.sharded)
    host_.all_gathered(step_index, std::move(step.flat));
  else
    host_.all_reduced(step_index, std::move(step.flat), 0, 0);
}

void ring_collective::all_gather(std::int64_t step_index, tensor flat) {
  auto it = steps_.find(step_index);
  if (it == steps_.end() || !it->second.sharded || it->second.reduced_left > 0 ||
      it->second.gathering)
    throw std::logic_error(settings().name + ": unexpected updated parameters of step " +
                           std::to_string(step_index));
  auto& step = it->second;
  if (flat.numel() != step.flat.numel())
    throw std::logic_error(settings().name + ": updated parameters of " +
                           std::to_string(flat.numel()) + " floats, expected " +
                           std::to_string(step.flat.numel()));
  // The optimizer handed the buffer over: we write the chunks others own into it, and
  // send views of ours, which nobody writes again.
  step.flat = std::move(flat);
  step.gathering = true;
  const auto buckets = step.schedule.buckets();
  const auto owned = step.schedule.owned_chunk(settings().replica);
  for (std::int32_t b = 0; b < buckets; ++b)
    send_ring(step_index, b, ring_phase::all_gather, 0, owned, chunk_view(step, b, owned));
  for (std::int32_t b = 0; b < buckets; ++b)
    take_pending(step_index, b);
  finish_if_done(step_index);
}

}  // namespace

std::unique_ptr<collective_backend> make_ring_collective(collective_host& host) {
  return std::make_unique<ring_collective>(host);
}

}  // namespace troupe
