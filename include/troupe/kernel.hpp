// kernels.hpp: the few types every kernel shares, and the op dispatch table.
//
// A kernel is pure compute on raw buffers of one device. It knows nothing of tensors,
// actors or CAF. Each op is declared once in include/troupe/ops.hpp as a struct with a name and
// a function signature; each backend registers its implementation with one line at the
// end of the op's file:
//
//     TROUPE_REGISTER_KERNEL(ops::relu_forward, device_type::cpu, relu_forward);
//
// and callers resolve it once (not per call) by (op, device type):
//
//     auto relu = kernels::lookup<ops::relu_forward>(device_type::cpu);
//     relu(ctx, n, x, y);
//
// A missing kernel is an error that names the op and the device types that have it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "troupe/registration.hpp"  // Note [plugin registrations]

namespace troupe::kernels {

/// The kind of a device. A device is an in-order stream of work with its own memory.
enum class device_type : std::uint8_t { cpu, cuda };

/// "cpu", "cuda". Inline: a plugin's registration lines use it before the plugin is
/// accepted, when they must not call into troupe.
inline const char* to_string(device_type type) {
  switch (type) {
    case device_type::cpu:
      return "cpu";
    case device_type::cuda:
      return "cuda";
  }
  return "unknown";
}

/// Which library computes a CPU device's f32 GEMMs ([run] cpu_gemm). automatic: oneDNN where
/// its kernels use AVX-512, OpenBLAS elsewhere (Note [CPU GEMM backend] in kernels/cpu/gemm.cpp).
enum class cpu_gemm : std::uint8_t { automatic, openblas, onednn };

/// Whether a CPU device with this choice computes its f32 products on oneDNN: "automatic" where
/// oneDNN's kernels use AVX-512 (Note [CPU GEMM backend] in kernels/cpu/gemm.cpp). Its f32
/// convolutions are then oneDNN's too (Note [direct convolution] in kernels/cpu/conv2d.cpp).
bool cpu_gemm_is_onednn(cpu_gemm choice);

/// Where a kernel runs. CUDA kernels read their stream (cudaStream_t) and cuBLAS handle
/// (cublasHandle_t) from it; the CPU GEMM reads its library.
struct context {
  void* stream = nullptr;
  void* blas = nullptr;
  cpu_gemm gemm = cpu_gemm::automatic;
};

/// Thrown when no kernel is registered for an (op, device type) pair.
class missing_kernel : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using erased_function = void (*)();

/// Registers `fn` as op `op` for device type `type`. Registering the same pair twice
/// throws (a plugin must not silently replace a built-in kernel).
void register_kernel(const char* op, device_type type, erased_function fn,
                     const std::type_info& signature);

/// Finds the kernel of `op` for `type`; throws missing_kernel naming the device types
/// that do have it, or std::logic_error if the registered signature differs.
erased_function find_kernel(const char* op, device_type type, const std::type_info& signature);

/// True if a kernel of `op` is registered for `type`.
bool has_kernel(const char* op, device_type type);

/// The typed front of find_kernel: `lookup<ops::gemm>(device_type::cpu)`.
template <class Op>
typename Op::function lookup(device_type type) {
  return reinterpret_cast<typename Op::function>(
      find_kernel(Op::name, type, typeid(typename Op::function)));
}

/// "kernel 'gemm' for device type 'cpu' is registered twice": the clash message.
inline std::string kernel_registered_twice(const char* op, device_type type) {
  return std::string{"kernel '"} + op + "' for device type '" + to_string(type) +
         "' is registered twice";
}

/// Registration errors of static initialisers in troupe (a kernel registered twice): they
/// must not throw, so they are kept until check_builtin_registrations() reports them.
using detail::record_registration_error;
using detail::take_registration_errors;

/// What TROUPE_REGISTER_KERNEL makes: registers at construction, or inside a plugin
/// records the registration for the loader (Note [plugin registrations]); never throws.
template <class Op>
struct TROUPE_LOCAL kernel_registrar {
  kernel_registrar(device_type type, typename Op::function fn) {
    const char* op = Op::name;
    detail::register_or_defer(
        std::string{"kernel '"} + op + "' for device type '" + to_string(type) + "'",
        [op, type] {
          return has_kernel(op, type) ? kernel_registered_twice(op, type) : std::string{};
        },
        [op, type, fn] {
          register_kernel(op, type, reinterpret_cast<erased_function>(fn),
                          typeid(typename Op::function));
        });
  }
};

}  // namespace troupe::kernels

#define TROUPE_KERNEL_CONCAT_INNER(a, b) a##b
#define TROUPE_KERNEL_CONCAT(a, b) TROUPE_KERNEL_CONCAT_INNER(a, b)

/// Registers `fn` as the implementation of `Op` on devices of type `type`.
#define TROUPE_REGISTER_KERNEL(Op, type, fn)                                 \
  static const ::troupe::kernels::kernel_registrar<Op> TROUPE_KERNEL_CONCAT( \
      troupe_kernel_registrar_, __COUNTER__) {                               \
    type, fn                                                                 \
  }

namespace troupe::kernels {
/// Threads each CPU kernel call may use (OpenBLAS's pool). A CPU device is one core, so
/// the runtime sets 1 while devices live; without it OpenBLAS would spread every GEMM over
/// all cores. Process-wide: this OpenBLAS has no per-thread setting (Note [OpenBLAS
/// threads] in runtime/core/device.cpp).
void set_cpu_kernel_threads(int threads);
/// The current setting.
int cpu_kernel_threads();
}  // namespace troupe::kernels
