// gpu.hpp: what the runtime needs from a GPU, behind an interface that libtroupe_cuda
// implements (runtime/core/cuda_backend.cu) and tests fake on machines without one.
//
// libtroupe does not link the CUDA runtime (Note [CUDA kernels loaded on demand] in
// kernels/dispatch.cpp): the first `cuda:N` device loads libtroupe_cuda, whose static
// initialiser provides its backend here. A device of type cuda then gets a gpu::queue (a
// CUDA stream and a cuBLAS handle: its kernels' context), memory from a caching allocator
// over the backend's raw allocation (runtime/core/caching_allocator.hpp), and copies.
//
// Note [GPU streams]
// A cuda:N device is a troupe stream like a CPU device's: one host thread that runs its
// jobs in order and, between them, the handlers of the actors placed on it. A job does not
// compute on that thread: it issues kernels to the device's queue and returns. So a job's
// event cannot be reached when the job returns; it is reached when the GPU has run what
// the job issued. After each job the host thread asks the queue to call back once the GPU
// gets there (queue::when_done, cudaLaunchHostFunc), and that callback advances the
// stream's progress: in order, since the queue runs them in order, and without the host
// thread, which is issuing the next job meanwhile. What a job captured (the tensors it
// reads and writes) is kept until then, so no block returns to the allocator while the
// GPU still reads it. The callback runs on the backend's thread, where CUDA may not be
// called: it only advances progress and runs event callbacks (which send messages); the
// captures are released on the stream's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "troupe/kernel.hpp"

namespace troupe::gpu {

/// One GPU's in-order work queue: a CUDA stream with a cuBLAS handle.
class queue {
 public:
  virtual ~queue() = default;
  /// Makes this queue's GPU the calling thread's current one (cudaSetDevice): its stream's
  /// thread calls it first.
  virtual void enter_thread() = 0;
  /// What kernels issued to this queue run with (include/troupe/kernel.hpp).
  virtual kernels::context context() const = 0;
  /// Calls `done` on a backend thread once the GPU has run everything issued so far.
  /// Never blocks; calls come in the order asked for. `done` must not call the backend.
  virtual void when_done(std::function<void()> done) = 0;
  /// Issues a copy of `bytes` from `from` to `to`; either may be GPU or host memory, of
  /// this GPU or another (peer). Asynchronous: the source must stay put until when_done.
  virtual void copy(void* to, const void* from, std::size_t bytes) = 0;
  /// Blocks the calling thread until everything issued has run.
  virtual void synchronize() = 0;
};

/// A GPU runtime (CUDA): devices, raw memory, queues.
class backend {
 public:
  virtual ~backend() = default;
  /// "CUDA 13.0" or the like, for messages.
  virtual std::string name() const = 0;
  /// The GPUs this process can use; with none, `why` says what the driver said.
  virtual int device_count(std::string& why) = 0;
  /// "NVIDIA H200, 139 GiB" or the like.
  virtual std::string describe(int device) = 0;
  /// `tf32`: its GEMMs may use TF32 tensor cores (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH).
  virtual std::unique_ptr<queue> make_queue(int device, bool tf32) = 0;
  /// Raw device memory (cudaMalloc): throws, naming the device and the size, when there is
  /// none; release gives it back (cudaFree). The caching allocator calls these rarely.
  virtual void* allocate(int device, std::size_t bytes) = 0;
  virtual void release(int device, void* memory) = 0;
  /// Raw page-locked host memory (cudaHostAlloc, portable to every GPU), and back.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void release_host(void* memory) = 0;
  /// A synchronous copy between any two places (cudaMemcpy): host code that must read a
  /// value now (a loss, a checkpoint) and tensors made on the host thread.
  virtual void copy_now(void* to, const void* from, std::size_t bytes) = 0;
};

/// The backend of device type cuda: libtroupe_cuda provides it when it is loaded.
void provide_backend(std::shared_ptr<backend> provided);

/// Puts `installed` in the place of the provided backend (nullptr: the provided one
/// again); returns the one installed before. Tests install a fake one and put the previous
/// back. Not while devices or tensors of either live.
std::shared_ptr<backend> install_backend(std::shared_ptr<backend> installed);

/// The cuda backend, loading libtroupe_cuda if nothing is installed yet; throws, saying
/// why (no CUDA library, no driver), when there is none.
backend& require_backend();

/// Throws unless `device` (cuda:N) is present: "cuda:1 is not on this machine: CUDA 13.0
/// sees 1 GPU (0: NVIDIA H200)" or "... sees no GPU (cudaGetDeviceCount: ...)".
void require_device(int device);

/// Device memory of cuda:N from its caching allocator (per device, process-wide).
void* allocate(int device, std::size_t bytes);
void release(int device, void* memory, std::size_t bytes);

/// Page-locked host memory from a caching allocator over backend::allocate_host; plain
/// host memory (64-byte aligned) when no backend can be had (tensor::empty_pinned).
void* allocate_pinned(std::size_t bytes);
void release_pinned(void* memory);

/// The caching allocator's figures for cuda:N (traces and the run summary); -1: the
/// pinned host memory's.
struct memory_figures {
  std::int64_t current = 0;          // bytes in tensors now
  std::int64_t peak = 0;             // the most at once since reset_peak
  std::int64_t reserved = 0;         // bytes taken from the device (in tensors or cached)
  std::int64_t raw_allocations = 0;  // calls of backend::allocate so far
};
memory_figures memory(int device);
void reset_memory_peak(int device);

}  // namespace troupe::gpu
