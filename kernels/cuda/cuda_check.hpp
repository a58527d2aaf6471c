// cuda_check.hpp: CUDA_CHECK and CUBLAS_CHECK, the check macros for CUDA runtime and
// cuBLAS calls (STYLE.md "Errors").
//
// A failed call is a programmer error (or a broken device), so it throws
// troupe::check_failure naming file, line, the call as written and the library's own
// error name and text. Host code only: device code cannot throw. This header does not
// retry, reset the device or swallow an error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "troupe/check.hpp"

namespace troupe::kernels::cuda_backend {

/// Throws check_failure "file:line: CUDA call failed: call: error".
[[noreturn]] inline void throw_call_failure(const char* file, int line, const char* library,
                                            const char* call, const std::string& error) {
  throw check_failure(std::string{file} + ":" + std::to_string(line) + ": " + library +
                      " call failed: " + call + ": " + error);
}

inline std::string describe(cudaError_t status) {
  return std::string{cudaGetErrorName(status)} + " (" + cudaGetErrorString(status) + ")";
}

inline std::string describe(cublasStatus_t status) {
  return std::string{cublasGetStatusName(status)} + " (" + cublasGetStatusString(status) +
         ")";
}

}  // namespace troupe::kernels::cuda_backend

/// Checks a CUDA runtime call returning cudaError_t.
#define CUDA_CHECK(call)                                                             \
  do {                                                                               \
    const cudaError_t troupe_cuda_status_ = (call);                                  \
    if (troupe_cuda_status_ != cudaSuccess)                                          \
      ::troupe::kernels::cuda_backend::throw_call_failure(                           \
          __FILE__, __LINE__, "CUDA", #call,                                         \
          ::troupe::kernels::cuda_backend::describe(troupe_cuda_status_));           \
  } while (false)

/// Checks a cuBLAS call returning cublasStatus_t.
#define CUBLAS_CHECK(call)                                                           \
  do {                                                                               \
    const cublasStatus_t troupe_cublas_status_ = (call);                             \
    if (troupe_cublas_status_ != CUBLAS_STATUS_SUCCESS)                              \
      ::troupe::kernels::cuda_backend::throw_call_failure(                           \
          __FILE__, __LINE__, "cuBLAS", #call,                                       \
          ::troupe::kernels::cuda_backend::describe(troupe_cublas_status_));         \
  } while (false)
