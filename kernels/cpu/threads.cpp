// threads.cpp: how many threads the CPU kernels (OpenBLAS) use per call.
#include <cblas.h>

#include "kernels/kernels.hpp"

namespace troupe::kernels {

void set_cpu_kernel_threads(int threads) {
  openblas_set_num_threads(threads);
}

}  // namespace troupe::kernels
