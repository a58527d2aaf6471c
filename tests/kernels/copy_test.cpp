// copy_test.cpp: the CPU copy moves exactly the bytes asked for and refuses overlap.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("copy copies exactly the given number of bytes") {
  auto copy = kernels::lookup<kernels::ops::copy>(kernels::device_type::cpu);
  std::vector<std::uint8_t> source(1031);
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<std::uint8_t>(i * 7 + 3);
  std::vector<std::uint8_t> destination(source.size() + 1, 0);
  copy(test::cpu_context(), static_cast<std::int64_t>(source.size()), source.data(),
       destination.data());
  CHECK(std::vector<std::uint8_t>(destination.begin(), destination.end() - 1) == source);
  CHECK(destination.back() == 0);
  copy(test::cpu_context(), 0, source.data(), nullptr);  // nothing to copy: no access
}

TEST_CASE("copy between overlapping buffers is a programmer error") {
  auto copy = kernels::lookup<kernels::ops::copy>(kernels::device_type::cpu);
  std::vector<float> buffer(16);
  CHECK_THROWS_AS(copy(test::cpu_context(), 8 * sizeof(float), buffer.data(), buffer.data() + 4),
                  check_failure);
}
