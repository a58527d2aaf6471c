// window2d.hpp: the argument check every backend's window kernels (im2col, col2im, pooling)
// share, so that a bad geometry fails the same way on the CPU and on CUDA.
//
// Checks only; the geometry itself (ops::window2d) is declared in include/troupe/ops.hpp.
#pragma once

#include <cstdint>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels {

/// Checks that `window` describes a real window over `batch` images: positive sizes, no
/// padding past the kernel, a window that fits the padded image, and output sizes whose
/// products fit an index (the kernels index with 64 bits, but argmax stores H W in 32).
inline void check_window(const char* op, int batch, const window2d& w) {
  TROUPE_CHECK(batch >= 0 && w.channels > 0 && w.height > 0 && w.width > 0 && w.kernel_h > 0 &&
                   w.kernel_w > 0 && w.stride_h > 0 && w.stride_w > 0 && w.pad_h >= 0 &&
                   w.pad_w >= 0,
               op << ": sizes must be positive (padding non-negative): batch=" << batch
                  << " C=" << w.channels << " H=" << w.height << " W=" << w.width
                  << " kernel=" << w.kernel_h << "x" << w.kernel_w << " stride=" << w.stride_h
                  << "x" << w.stride_w << " padding=" << w.pad_h << "x" << w.pad_w);
  TROUPE_CHECK(w.kernel_h <= w.height + 2 * w.pad_h && w.kernel_w <= w.width + 2 * w.pad_w,
               op << ": a " << w.kernel_h << "x" << w.kernel_w << " window does not fit a "
                  << w.height << "x" << w.width << " image padded by " << w.pad_h << "x"
                  << w.pad_w);
  TROUPE_CHECK(static_cast<std::int64_t>(w.height) * w.width <= INT32_MAX,
               op << ": a " << w.height << "x" << w.width << " plane has more pixels than "
                  << "a 32-bit index holds");
}

}  // namespace troupe::kernels
