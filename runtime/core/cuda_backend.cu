// cuda_backend.cu: the CUDA implementation of the runtime's GPU backend (runtime/core/
// gpu.hpp): cuda:N queues (a non-blocking CUDA stream with its own cuBLAS handle), raw
// device memory under the caching allocator, copies. Provided when libtroupe_cuda loads.
//
// Every CUDA and cuBLAS call is checked; a failure names the device ("cuda:1: CUDA call
// failed: cudaStreamCreateWithFlags(...): cudaErrorInvalidDevice (...)"). Nothing here
// touches a GPU at static initialisation: providing the backend only makes an object, so
// loading the library on a machine without a GPU works, and device_count says why there
// is none.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"
#include "runtime/core/gpu.hpp"
#include "troupe/error.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

using kernel_context = ::troupe::kernels::context;

std::string device_name(int device) { return "cuda:" + std::to_string(device); }

/// CUDA_CHECK naming the device.
#define CUDA_ON(device, call)                                                               \
  do {                                                                                      \
    const cudaError_t troupe_status_ = (call);                                              \
    if (troupe_status_ != cudaSuccess)                                                      \
      ::troupe::kernels::cuda_backend::throw_call_failure(__FILE__, __LINE__, (device_name(device) + ": CUDA").c_str(), #call, \
                         ::troupe::kernels::cuda_backend::describe(troupe_status_));                                         \
  } while (false)

#define CUBLAS_ON(device, call)                                                             \
  do {                                                                                      \
    const cublasStatus_t troupe_status_ = (call);                                           \
    if (troupe_status_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::troupe::kernels::cuda_backend::throw_call_failure(__FILE__, __LINE__, (device_name(device) + ": cuBLAS").c_str(),      \
                         #call, ::troupe::kernels::cuda_backend::describe(troupe_status_));                                  \
  } while (false)

/// Makes `device` current on this thread for a scope, and the previous one again after:
/// memory is allocated on the current device, and any thread may allocate a GPU tensor.
class current_device {
 public:
  explicit current_device(int device) : device_(device) {
    CUDA_ON(device, cudaGetDevice(&previous_));
    if (previous_ != device)
      CUDA_ON(device, cudaSetDevice(device));
  }
  ~current_device() {
    if (previous_ != device_)
      cudaSetDevice(previous_);
  }
  current_device(const current_device&) = delete;
  current_device& operator=(const current_device&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// What cudaLaunchHostFunc calls: the queue's when_done callback, once.
void CUDART_CB run_host_callback(void* data) {
  std::unique_ptr<std::function<void()>> done{static_cast<std::function<void()>*>(data)};
  try {
    (*done)();
  } catch (...) {
    // The stream's callback fails the stream itself (runtime/core/stream_worker.cpp); nothing may
    // leave a CUDA callback.
  }
}

class cuda_queue final : public gpu::queue {
 public:
  cuda_queue(int device, bool tf32) : device_(device) {
    current_device here{device};
    CUDA_ON(device, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      CUBLAS_ON(device, cublasCreate(&blas_));
      CUBLAS_ON(device, cublasSetStream(blas_, stream_));
      CUBLAS_ON(device, cublasSetMathMode(blas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                      : CUBLAS_DEFAULT_MATH));
    } catch (...) {
      if (blas_ != nullptr)
        cublasDestroy(blas_);
      cudaStreamDestroy(stream_);
      throw;
    }
  }
  ~cuda_queue() override {
    current_device here{device_};
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  cuda_queue(const cuda_queue&) = delete;
  cuda_queue& operator=(const cuda_queue&) = delete;

  void enter_thread() override { CUDA_ON(device_, cudaSetDevice(device_)); }

  kernel_context context() const override {
    kernel_context made;
    made.stream = stream_;
    made.blas = blas_;
    return made;
  }

  void when_done(std::function<void()> done) override {
    auto* data = new std::function<void()>(std::move(done));
    const cudaError_t status = cudaLaunchHostFunc(stream_, run_host_callback, data);
    if (status != cudaSuccess) {
      delete data;
      CUDA_ON(device_, status);
    }
  }

  void copy(void* to, const void* from, std::size_t bytes) override {
    if (bytes > 0)
      CUDA_ON(device_, cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream_));
  }

  void synchronize() override { CUDA_ON(device_, cudaStreamSynchronize(stream_)); }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

class cuda_gpu_backend final : public gpu::backend {
 public:
  std::string name() const override {
    int version = 0;
    if (cudaRuntimeGetVersion(&version) != cudaSuccess)
      return "CUDA";
    return "CUDA " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }

  int device_count(std::string& why) override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();  // not left for a later check to find
      why = "cudaGetDeviceCount: " + cuda_backend::describe(status);
      return 0;
    }
    if (count == 0)
      why = "cudaGetDeviceCount found none";
    return count;
  }

  std::string describe(int device) override {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
      cudaGetLastError();
      return "(no properties)";
    }
    std::ostringstream out;
    out << properties.name << ", " << (properties.totalGlobalMem >> 30) << " GiB";
    return out.str();
  }

  std::unique_ptr<gpu::queue> make_queue(int device, bool tf32) override {
    enable_peer_access(device);
    return std::make_unique<cuda_queue>(device, tf32);
  }

  // Lets `device` read and write the memory of every GPU it can reach directly (NVLink,
  // PCIe peer to peer), once: a copy between two such GPUs then goes straight across
  // instead of through host memory. Where it cannot, copies still work, staged by CUDA.
  void enable_peer_access(int device) {
    std::lock_guard<std::mutex> guard{mutex_};
    if (!peers_enabled_.insert(device).second)
      return;
    std::string why;
    const int count = device_count(why);
    current_device here{device};
    for (int peer = 0; peer < count; ++peer) {
      int can = 0;
      if (peer == device || cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can)
        continue;
      const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        CUDA_ON(device, status);
    }
  }

  void* allocate(int device, std::size_t bytes) override {
    current_device here{device};
    void* memory = nullptr;
    const cudaError_t status = cudaMalloc(&memory, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw user_error(device_name(device) + ": out of memory allocating " +
                           std::to_string(bytes) + " bytes (cudaMalloc: " + cuda_backend::describe(status) + ")",
                       exit_code::run_failed);
    }
    CUDA_ON(device, status);
    return memory;
  }

  void release(int device, void* memory) override {
    current_device here{device};
    cudaFree(memory);  // at exit the driver may be gone; nothing to do about an error then
  }

  void* allocate_host(std::size_t bytes) override {
    void* memory = nullptr;
    int device = 0;
    cudaGetDevice(&device);
    CUDA_ON(device, cudaHostAlloc(&memory, bytes, cudaHostAllocPortable));
    return memory;
  }

  void release_host(void* memory) override { cudaFreeHost(memory); }

  void copy_now(void* to, const void* from, std::size_t bytes) override {
    if (bytes == 0)
      return;
    int device = 0;
    cudaGetDevice(&device);
    CUDA_ON(device, cudaMemcpy(to, from, bytes, cudaMemcpyDefault));
  }

 private:
  std::mutex mutex_;
  std::set<int> peers_enabled_;  // guarded by mutex_
};

// Provided at load (Note [CUDA kernels loaded on demand] in kernels/dispatch.cpp).
const bool provided = [] {
  gpu::provide_backend(std::make_shared<cuda_gpu_backend>());
  return true;
}();

}  // namespace
}  // namespace troupe::kernels::cuda_backend
