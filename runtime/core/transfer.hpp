// transfer.hpp: moving a tensor to the device of the actor that received it.
//
// When a message arrives at an actor on another device, the runtime copies each tensor
// it will use onto the actor's device: explicitly, on the receiving device's stream,
// after the producer's ready event (DESIGN.md "Tensors and devices"). On the same device
// nothing is copied. Between CPU devices the copy is a memcpy into the receiver's pool.
#pragma once

#include "troupe/device.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// `t` itself if it already lives on `here` (an idle-lane job that writes it is hurried,
/// so that jobs submitted next see it written); else a copy on `here` whose ready event is
/// the copy job on here's stream (which first waits for t's ready event). The job is
/// labelled as the traced handler this thread is in (the receiver's), or as `like` says
/// (its name becomes "copy"): a pass run later, outside a handler, says whose it is.
tensor arrive(const tensor& t, device& here);
tensor arrive(const tensor& t, device& here, job_label like);

/// `t` itself, to be read by jobs on `here` that are submitted next, when its bytes are
/// in this process's memory as `here`'s are (both CPU devices of this node): `here`'s
/// stream waits for t's ready event instead of copying (Note [reading a peer in place]
/// in transfer.cpp). Else arrive(t, here). The jobs must only read it.
tensor read_in_place(const tensor& t, device& here);

/// `t` (on `here` already, as arrive() leaves it) in dtype `type`, f32 or bf16: itself, or
/// rounded to bf16 / widened to f32 into a new tensor by a job on here's stream, labelled as
/// `like` with the name "convert" (Note [bf16 activations] in actors/training/layer_actor.cpp).
tensor in_dtype(const tensor& t, dtype type, device& here, job_label like);

/// arrive() for each tensor.
std::vector<tensor> arrive(const std::vector<tensor>& ts, device& here);

}  // namespace troupe
