// window2d.cuh: index arithmetic the CUDA window kernels (im2col.cu, max_pool2d.cu,
// avg_pool2d.cu) share: which outputs' windows cover an input pixel.
//
// The backward kernels gather (one thread per input pixel, adding what each covering output
// sends it) instead of scattering with atomics, so the sums have a fixed order and a run
// gives the same bits every time (the equivalence tests compare runs).
#pragma once

#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {

/// The outputs [first, last) along one axis whose windows (size kernel, stride, pad) cover
/// input coordinate `at`, clipped to [0, out).
__device__ inline void covering_outputs(int at, int kernel, int stride, int pad, int out,
                                        int& first, int& last) {
  // o stride - pad <= at < o stride - pad + kernel
  const int low = at + pad - kernel + 1;
  first = low <= 0 ? 0 : (low + stride - 1) / stride;
  last = min(out, (at + pad) / stride + 1);
}

}  // namespace troupe::kernels::cuda_backend
