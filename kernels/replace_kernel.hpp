// replace_kernel.hpp: swapping a registered kernel out, for tests only.
//
// The fake GPU of tests/runtime/core/fake_gpu.hpp runs the CPU kernels on its own thread in
// place of the CUDA ones, so that a whole training run on cuda:N can be tested on a machine
// without a GPU. Nothing else may replace a kernel: a plugin that registers an existing
// (op, device type) is refused (include/troupe/kernel.hpp).
#pragma once

#include <typeinfo>

#include "troupe/kernel.hpp"

namespace troupe::kernels {

/// Makes `fn` the kernel of (op, type), or removes it (nullptr); returns the one it
/// replaces (nullptr: none). For cuda, libtroupe_cuda is loaded first (if it can be).
erased_function replace_kernel(const char* op, device_type type, erased_function fn,
                               const std::type_info& signature);

/// The typed front: replace<ops::gemm>(device_type::cuda, my_gemm).
template <class Op>
typename Op::function replace(device_type type, typename Op::function fn) {
  return reinterpret_cast<typename Op::function>(replace_kernel(
      Op::name, type, reinterpret_cast<erased_function>(fn), typeid(typename Op::function)));
}

}  // namespace troupe::kernels
