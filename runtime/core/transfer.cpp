// transfer.cpp: copies on arrival.
#include "runtime/core/transfer.hpp"

#include <cstring>

#include "runtime/core/gpu.hpp"
#include "runtime/core/stream_state.hpp"
#include "runtime/trace/current_handler.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe {

tensor arrive(const tensor& t, device& here) {
  // The copy is the receiving handler's: its actor and micro-batch (Note [critical path]).
  job_label label;
  trace::handler_tags tags;
  if (trace::current_handler(tags)) {
    label.actor = tags.track;
    label.step = tags.step;
    label.microbatch = tags.microbatch;
    label.replica = tags.replica;
    label.phase = tags.phase;
  }
  return arrive(t, here, label);
}

tensor arrive(const tensor& t, device& here, job_label label) {
  if (!t.defined())
    return t;
  if (t.device() == here.id()) {
    // Written by a main-lane job of here's stream: stream order covers it (hurry leaves
    // such an event alone). By an idle-lane job (stream::submit_when_idle): that job may
    // run after jobs submitted later, so it is hurried ahead of them (Note [idle lane]).
    here.work().hurry(t.ready());
    return t;
  }
  auto copy = tensor::empty(t.shape(), t.type(), here.id());
  auto& work = here.work();
  work.wait_for(t.ready());
  label.name = job_kind_name(job_kind::copy);
  label.bytes = static_cast<std::int64_t>(t.bytes());
  label.from_node = t.device().node;
  if (auto* queue = gpu_queue_of(work)) {
    // Onto a GPU, from the host or another GPU: issued to its queue, which keeps both
    // tensors until the GPU has copied (Note [GPU streams] in runtime/core/gpu.hpp).
    copy.set_ready(work.submit(
        [queue, from = t, to = copy] { queue->copy(to.raw(), from.raw(), from.bytes()); }, label));
  } else if (t.device().type == device_type::cuda && t.device().node == here.id().node) {
    // Off a GPU onto a CPU device: its thread copies, as it would memcpy.
    copy.set_ready(work.submit(
        [from = t, to = copy] {
          gpu::require_backend().copy_now(to.raw(), from.raw(), from.bytes());
        },
        label));
  } else {
    copy.set_ready(work.submit(
        [from = t, to = copy] { std::memcpy(to.raw(), from.raw(), from.bytes()); }, label));
  }
  return copy;
}

// Note [reading a peer in place]
// A copy on arrival gives the receiver a tensor on its own device, which it may keep and
// hand to any job. A job that reads a tensor once, right away, needs no copy of its own
// when the sender's memory is as addressable as its own: CPU devices of one process
// share it (as GPUs with peer access read each other's over NVLink). The ring
// all-reduce's sums and gathers read what a neighbour sent that way; the copy first
// doubled the bytes each moved (a reduce read 2 and wrote 1 buffers; with the copy, 4
// and 2). A tensor from another node stays a copy: its bytes were deserialised here,
// but its device names the sender's.
tensor read_in_place(const tensor& t, device& here) {
  if (!t.defined() || t.device().node != here.id().node || t.device().type != device_type::cpu ||
      here.id().type != device_type::cpu)
    return arrive(t, here);
  here.work().wait_for(t.ready());
  return t;
}

tensor in_dtype(const tensor& t, dtype type, device& here, job_label like) {
  if (!t.defined() || t.type() == type)
    return t;
  TROUPE_CHECK((t.type() == dtype::f32 || t.type() == dtype::bf16) &&
                   (type == dtype::f32 || type == dtype::bf16),
               "a " << to_string(t.type()) << " tensor cannot be converted to " << to_string(type));
  TROUPE_CHECK(t.device() == here.id(), "in_dtype: the tensor is not on the device yet");
  auto out = tensor::empty(t.shape(), type, here.id());
  like.name = job_kind_name(job_kind::convert);
  like.bytes = static_cast<std::int64_t>(t.bytes());
  const auto device_type = here.id().type;
  auto job = [from = t, to = out, on = &here, device_type] {
    if (to.type() == dtype::bf16)
      kernels::lookup<kernels::ops::to_bf16>(device_type)(on->context(), from.numel(), from.f32(),
                                                          to.bf16());
    else
      kernels::lookup<kernels::ops::from_bf16>(device_type)(on->context(), from.numel(),
                                                            from.bf16(), to.f32());
  };
  out.set_ready(here.work().submit(std::move(job), like));
  return out;
}

std::vector<tensor> arrive(const std::vector<tensor>& ts, device& here) {
  std::vector<tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts)
    out.push_back(arrive(t, here));
  return out;
}

}  // namespace troupe
