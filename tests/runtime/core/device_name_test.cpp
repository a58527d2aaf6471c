// device_name_test.cpp: parse_device_name(), the one parser of "cpu:N" / "cuda:N".
#include "runtime/core/device_name.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace troupe;

TEST_CASE("device names of either type with an index up to max_device_index parse") {
  auto cpu = parse_device_name("cpu:0");
  REQUIRE(cpu.ok());
  CHECK(cpu.id.type == device_type::cpu);
  CHECK(cpu.id.index == 0);
  auto cuda = parse_device_name("cuda:17");
  REQUIRE(cuda.ok());
  CHECK(cuda.id.type == device_type::cuda);
  CHECK(cuda.id.index == 17);
  auto last = parse_device_name("cpu:" + std::to_string(max_device_index));
  REQUIRE(last.ok());
  CHECK(last.id.index == max_device_index);
  CHECK(last.id.to_string() == "cpu:" + std::to_string(max_device_index));
}

TEST_CASE("a malformed device name is an error saying what was expected and what was found") {
  for (const char* bad : {"cpu", "cpu:", "gpu:0", "cpu:-1", "cpu:+1", "cpu:x", ":0", "cpu: 1",
                          "CPU:0", "cpu:0:1", "", "cpu:1e3"}) {
    auto parsed = parse_device_name(bad);
    INFO("name: '" << bad << "'");
    CHECK_FALSE(parsed.ok());
    CHECK(parsed.error ==
          "expected a device like 'cpu:0' or 'cuda:0', found '" + std::string(bad) + "'");
  }
}

TEST_CASE("a device index with leading zeros is refused, so one device has one spelling") {
  auto parsed = parse_device_name("cpu:01");
  CHECK_FALSE(parsed.ok());
  CHECK(parsed.error ==
        "expected a device like 'cpu:0' or 'cuda:0' (an index without leading zeros), found "
        "'cpu:01'");
  CHECK_FALSE(parse_device_name("cuda:00").ok());
}

TEST_CASE("a device index past max_device_index is refused however many digits it has") {
  const std::string range = " with an index in [0, " + std::to_string(max_device_index) + "]";
  for (const std::string bad :
       {"cpu:" + std::to_string(max_device_index + 1), std::string("cpu:1234567"),
        std::string("cuda:99999999999999999999999")}) {
    auto parsed = parse_device_name(bad);
    INFO("name: '" << bad << "'");
    CHECK_FALSE(parsed.ok());
    CHECK(parsed.error ==
          "expected a device like 'cpu:0' or 'cuda:0'" + range + ", found '" + bad + "'");
  }
}

TEST_CASE("device_id::parse agrees with parse_device_name") {
  for (const char* name : {"cpu:0", "cuda:3", "cpu:1023", "cpu:1024", "cpu:01", "gpu:0", "cpu:"}) {
    device_id id;
    INFO("name: '" << name << "'");
    CHECK(device_id::parse(name, id) == parse_device_name(name).ok());
  }
}
