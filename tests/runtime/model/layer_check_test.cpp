// The size bound of the gradient check (runtime/model/layer_check.hpp): a check too big to
// finish (or to allocate) is refused before any work, naming the sizes and the limit.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/model/layer_check.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

layer_config layer_of(const std::string& type, std::int64_t out = 0) {
  layer_config c;
  c.type = type;
  c.where = c.type_where = {"the command line"};
  if (out > 0)
    c.settings["out"] = setting_value{out, {"--set out=" + std::to_string(out)}};
  return c;
}

gradient_check_options with_input(std::int64_t features, std::int64_t batch = 3) {
  gradient_check_options options;
  options.input_shape = {features};
  options.batch = batch;
  return options;
}

}  // namespace

TEST_CASE(
    "a gradient check of 10^8 input features is refused at once, naming the work and the limit") {
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(check_layer_gradients(layer_of("relu"), with_input(100'000'000)),
                       doctest::Contains("check-layer 'relu': checking a batch of 3 x (100000000) "
                                         "by finite differences takes 4 forward passes"),
                       user_error);
  CHECK_THROWS_WITH_AS(check_layer_gradients(layer_of("linear", 5), with_input(1'000'000)),
                       doctest::Contains("more than the limit of 2e+10"), user_error);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
}

TEST_CASE("sizes whose product overflows are refused, not allocated") {
  CHECK_THROWS_WITH_AS(
      check_layer_gradients(layer_of("relu"), with_input(std::int64_t{1} << 62, 4)),
      doctest::Contains("is more than the limit of 1073741824 values"), user_error);
  CHECK_THROWS_WITH_AS(check_layer_gradients(layer_of("linear", 1 << 20), with_input(1 << 20, 1)),
                       doctest::Contains("its parameter"), user_error);
}

TEST_CASE("the default check and a moderate one stay within the limit and pass") {
  CHECK(check_layer_gradients(layer_of("linear", 5), gradient_check_options{}).passed);
  CHECK(check_layer_gradients(layer_of("relu"), with_input(200, 4)).passed);
}
