// threads.cpp: how many threads the CPU kernels (OpenBLAS) use per call.
//
// Process-wide, as OpenBLAS 0.3.21 offers it (no openblas_set_num_threads_local); who sets
// it and when is in Note [OpenBLAS threads] (runtime/core/device.cpp).
#include <cblas.h>

#include "troupe/kernel.hpp"

namespace troupe::kernels {

void set_cpu_kernel_threads(int threads) {
  openblas_set_num_threads(threads);
}

int cpu_kernel_threads() {
  return openblas_get_num_threads();
}

}  // namespace troupe::kernels
