// dispatch_test.cpp: the (op, device type) table: every op has a CPU kernel, and a missing
// kernel's error names the op and the device types that do have it.
#include <doctest/doctest.h>

#include <string>

#include "troupe/ops.hpp"

using namespace troupe::kernels;

namespace {

// An op only this test registers, and only for the CPU, so that looking it up for CUDA
// fails whether or not the build has CUDA kernels.
struct cpu_only_test_op {
  static constexpr const char* name = "dispatch_test_private_op";
  using function = void (*)(const context&, int);
};

void cpu_only_test_kernel(const context&, int) {}

TROUPE_REGISTER_KERNEL(cpu_only_test_op, device_type::cpu, cpu_only_test_kernel);

template <class... Ops>
void check_cpu_kernels_exist() {
  for (const char* name : {Ops::name...}) {
    CAPTURE(name);
    CHECK(has_kernel(name, device_type::cpu));
  }
}

}  // namespace

TEST_CASE("every op in ops.hpp has a CPU kernel") {
  check_cpu_kernels_exist<ops::gemm, ops::bias_add, ops::bias_grad, ops::relu_forward,
                          ops::relu_backward, ops::gelu_forward, ops::gelu_backward,
                          ops::tanh_forward, ops::tanh_backward, ops::softmax_xent,
                          ops::accuracy, ops::sgd_update, ops::adam_update, ops::axpy,
                          ops::scale, ops::fill, ops::copy>();
}

TEST_CASE("a missing kernel's error names the op and the device types that have it") {
  const bool found = lookup<cpu_only_test_op>(device_type::cpu) == &cpu_only_test_kernel;
  CHECK(found);
  CHECK_THROWS_WITH_AS(lookup<cpu_only_test_op>(device_type::cuda),
                       doctest::Contains("dispatch_test_private_op"), missing_kernel);
  try {
    lookup<cpu_only_test_op>(device_type::cuda);
  } catch (const missing_kernel& error) {
    const std::string message = error.what();
    CHECK(message.find("cuda") != std::string::npos);   // what was asked for
    CHECK(message.find("cpu") != std::string::npos);    // what exists
  }

  // gemm on CUDA: found when this build registers CUDA kernels, otherwise the same error.
  if (has_kernel(ops::gemm::name, device_type::cuda)) {
    const bool found_cuda = lookup<ops::gemm>(device_type::cuda) != nullptr;
    CHECK(found_cuda);
  } else {
    try {
      lookup<ops::gemm>(device_type::cuda);
      FAIL("lookup of a missing kernel returned");
    } catch (const missing_kernel& error) {
      const std::string message = error.what();
      CHECK(message.find("gemm") != std::string::npos);
      CHECK(message.find("cpu") != std::string::npos);
    }
  }
}

TEST_CASE("registering the same op and device type twice is refused") {
  CHECK_THROWS_AS(register_kernel(cpu_only_test_op::name, device_type::cpu,
                                  reinterpret_cast<erased_function>(&cpu_only_test_kernel),
                                  typeid(cpu_only_test_op::function)),
                  std::logic_error);
  // A registration line (a static initialiser, e.g. in a plugin) must not throw: it
  // records the clash for the plugin loader to report.
  take_registration_errors();
  CHECK_NOTHROW(kernel_registrar<cpu_only_test_op>(device_type::cpu, &cpu_only_test_kernel));
  auto errors = take_registration_errors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("registered twice") != std::string::npos);
}
