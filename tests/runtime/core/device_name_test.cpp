// device_name_test.cpp: parse_device_name(), the one parser of "[nodeK/]cpu:N" / "cuda:N".
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
    CHECK(parsed.error == "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0', found '" +
                              std::string(bad) + "'");
  }
}

TEST_CASE("a device index with leading zeros is refused, so one device has one spelling") {
  auto parsed = parse_device_name("cpu:01");
  CHECK_FALSE(parsed.ok());
  CHECK(parsed.error ==
        "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0' (an index without leading "
        "zeros), found "
        "'cpu:01'");
  CHECK_FALSE(parse_device_name("cuda:00").ok());
}

TEST_CASE("a device index past max_device_index is refused however many digits it has") {
  const std::string range = " with an index in [0, " + std::to_string(max_device_index) + "]";
  for (const std::string& bad :
       {"cpu:" + std::to_string(max_device_index + 1), std::string("cpu:1234567"),
        std::string("cuda:99999999999999999999999")}) {
    auto parsed = parse_device_name(bad);
    INFO("name: '" << bad << "'");
    CHECK_FALSE(parsed.ok());
    CHECK(parsed.error == "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0'" + range +
                              ", found '" + bad + "'");
  }
}

TEST_CASE("device_id::parse agrees with parse_device_name") {
  for (const char* name : {"cpu:0", "cuda:3", "cpu:1023", "cpu:1024", "cpu:01", "gpu:0", "cpu:"}) {
    device_id id;
    INFO("name: '" << name << "'");
    CHECK(device_id::parse(name, id) == parse_device_name(name).ok());
  }
}

TEST_CASE("a device may name its node, and node 0's devices have one spelling") {
  auto remote = parse_device_name("node1/cpu:0");
  REQUIRE(remote.ok());
  CHECK(remote.id.node == 1);
  CHECK(remote.id.type == device_type::cpu);
  CHECK(remote.id.index == 0);
  CHECK(remote.id.to_string() == "node1/cpu:0");
  auto gpu = parse_device_name("node12/cuda:3");
  REQUIRE(gpu.ok());
  CHECK(gpu.id.to_string() == "node12/cuda:3");
  // "node0/cpu:0" is the coordinator's cpu:0, the same device as "cpu:0".
  auto local = parse_device_name("node0/cpu:1");
  REQUIRE(local.ok());
  CHECK(local.id == parse_device_name("cpu:1").id);
  CHECK(local.id.to_string() == "cpu:1");
  CHECK(parse_device_name("node1/cpu:0").id != parse_device_name("cpu:0").id);
  CHECK(parse_device_name("cpu:0").id < parse_device_name("node1/cpu:0").id);
}

TEST_CASE("a malformed node is an error saying how a node is written") {
  for (const char* bad : {"node/cpu:0", "nod1/cpu:0", "node-1/cpu:0", "nodex/cpu:0", "/cpu:0",
                          "node1/", "node1/gpu:0", "node1/node2/cpu:0"}) {
    auto parsed = parse_device_name(bad);
    INFO("name: '" << bad << "'");
    CHECK_FALSE(parsed.ok());
    CHECK(parsed.error.find("found '" + std::string(bad) + "'") != std::string::npos);
  }
  CHECK(parse_device_name("node01/cpu:0").error ==
        "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0' (a node rank without leading "
        "zeros), found 'node01/cpu:0'");
  CHECK(parse_device_name("node4096/cpu:0").error ==
        "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0' with a node rank in [0, 4095], "
        "found 'node4096/cpu:0'");
}
