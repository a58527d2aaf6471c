// Tensors: shared storage, zero-copy messages within a process, and serialisation.
// tensor.hpp itself must not bring CAF in (a layer plugin compiles it): see the first test.
#include "troupe/tensor.hpp"
#ifdef CAF_CACHE_LINE_SIZE  // defined by caf/config.hpp, which every CAF header includes
#error "troupe/tensor.hpp includes CAF; its inspect belongs in tensor_inspect.hpp"
#endif

#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "troupe/messages.hpp"
#include "troupe/tensor.hpp"

using namespace troupe;

TEST_CASE("copying a tensor shares its storage") {
  auto a = tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = a;
  CHECK(a.raw() == b.raw());
  CHECK(a.use_count() == 2);
  auto c = a.reshaped({3, 2});
  CHECK(c.raw() == a.raw());
  CHECK(c.shape() == shape_t{3, 2});
  CHECK_THROWS_AS(a.reshaped({4, 2}), check_failure);
  CHECK_THROWS_AS(a.i32(), check_failure);
  CHECK(shape_to_string(a.shape()) == "(2, 3)");
}

TEST_CASE("a shape whose elements or bytes overflow 64 bits is refused, and a 0 anywhere has none") {
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_AS(element_count({big, big}), check_failure);
  CHECK_THROWS_AS(tensor::empty({big, big}), check_failure);
  CHECK_THROWS_AS(tensor::empty({std::int64_t{1} << 62}), check_failure);  // 2^64 bytes
  CHECK(element_count({big, big, 0}) == 0);
  CHECK(element_count({0, big, big}) == 0);
  CHECK(tensor::empty({big, big, 0}).numel() == 0);
}

TEST_CASE("a freed tensor's block goes back to its own device's pool, not another's") {
  // Note [a pool by device] in runtime/core/tensor.cpp: a block another core wrote last
  // costs the next writer a fetch from that core's cache.
  const shape_t shape{12347};  // a size no other test allocates
  const device_id zero{device_type::cpu, 0};
  const device_id one{device_type::cpu, 1};
  const void* block = nullptr;
  {
    auto a = tensor::empty(shape, dtype::f32, zero);
    block = a.raw();
  }
  auto b = tensor::empty(shape, dtype::f32, one);
  CHECK(b.raw() != block);  // cpu:1 does not get cpu:0's block
  auto c = tensor::empty(shape, dtype::f32, zero);
  CHECK(c.raw() == block);  // cpu:0 does
}

TEST_CASE("a tensor in a message is not copied between actors in one process") {
  caf::actor_system_config config;
  add_message_types(config);
  caf::actor_system system{config};
  auto x = tensor::from({1, 2, 3}, {1, 3});
  const void* sent = x.raw();
  auto echo = system.spawn([]() -> caf::behavior {
    return {[](activation_msg& m) { return m; }};
  });
  caf::scoped_actor self{system};
  self->request(echo, caf::infinite, activation_msg{micro_tag{}, x})
      .receive([&](activation_msg& back) { CHECK(back.x.raw() == sent); },
               [&](caf::error& e) { FAIL(system.render(e)); });
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("a tensor survives serialisation with shape, dtype and bytes") {
  caf::actor_system_config config;
  add_message_types(config);
  caf::actor_system system{config};
  std::vector<char> buffer;
  micro_tag tag;
  tag.step = 7;
  tag.microbatch = 2;
  tag.stage = phase::eval;
  activation_msg out{tag, tensor::from({1.5f, -2.0f, 3.25f, 4.0f}, {2, 2})};
  {
    caf::binary_serializer sink{system, buffer};
    REQUIRE(!sink(out));
  }
  activation_msg in;
  {
    caf::binary_deserializer source{system, buffer};
    REQUIRE(!source(in));
  }
  CHECK(in.tag.step == 7);
  CHECK(in.tag.microbatch == 2);
  CHECK(in.tag.stage == phase::eval);
  CHECK(in.x.shape() == shape_t{2, 2});
  CHECK(in.x.to_vector() == std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f});
  CHECK(in.x.raw() != out.x.raw());
}

TEST_CASE("a serialised tensor whose byte count disagrees with its shape is rejected") {
  caf::actor_system_config config;
  caf::actor_system system{config};
  std::vector<char> buffer;
  {
    caf::binary_serializer sink{system, buffer};
    shape_t shape{2, 2};
    std::uint8_t type = 0;
    std::uint64_t bytes = 12;  // a (2, 2) f32 tensor has 16
    REQUIRE(!sink(shape, type, bytes));
  }
  tensor t;
  caf::binary_deserializer source{system, buffer};
  auto error = source(t);
  CHECK(error);
  CHECK_FALSE(t.defined());
}

namespace {

/// Deserialises a tensor from a header (and no payload) as a peer would send it.
caf::error receive_header(const shape_t& shape, std::uint8_t type, std::uint64_t bytes,
                          tensor& out) {
  caf::actor_system_config config;
  caf::actor_system system{config};
  std::vector<char> buffer;
  {
    caf::binary_serializer sink{system, buffer};
    auto copy = shape;
    REQUIRE(!sink(copy, type, bytes));
  }
  caf::binary_deserializer source{system, buffer};
  return source(out);
}

}  // namespace

TEST_CASE("a tensor header whose sizes overflow or exceed the cap is refused before allocating") {
  const std::int64_t two_to_32 = std::int64_t{1} << 32;
  SUBCASE("2^32 x 2^32 elements wrap to 0 bytes without an overflow check") {
    tensor t;
    CHECK(receive_header({two_to_32, two_to_32}, 0, 0, t));
    CHECK_FALSE(t.defined());
    CHECK(tensor_header_problem({two_to_32, two_to_32}, 0, 0).find("overflows") !=
          std::string::npos);
  }
  SUBCASE("a partial product past int64 is refused even when a 0 makes the whole empty") {
    // The message fuzzer's finding: element_count() overflowed on {2^24, ~2^40, 0}. 2^63
    // fits a uint64_t (the old check's type) but not an int64_t.
    const shape_t shape{std::int64_t{1} << 24, std::int64_t{1} << 39, 0};
    CHECK(tensor_header_problem(shape, 0, 0).find("overflows") != std::string::npos);
    tensor t;
    CHECK(receive_header(shape, 0, 0, t));
    CHECK_FALSE(t.defined());
  }
  SUBCASE("an element count that fits but whose bytes overflow") {
    // 2^62 f32 elements fit an int64_t; their 2^64 bytes do not fit a uint64_t.
    const std::int64_t two_to_31 = std::int64_t{1} << 31;
    CHECK(tensor_header_problem({two_to_31, two_to_31}, 0, 0).find("needs more than") !=
          std::string::npos);
  }
  SUBCASE("a consistent header above max_received_tensor_bytes") {
    const auto elements = static_cast<std::int64_t>(max_received_tensor_bytes / 4 + 1);
    const auto bytes = static_cast<std::uint64_t>(elements) * 4;
    tensor t;
    CHECK(receive_header({elements}, 0, bytes, t));
    CHECK_FALSE(t.defined());
    CHECK(tensor_header_problem({elements}, 0, bytes).find("needs more than") !=
          std::string::npos);
  }
  SUBCASE("a negative dimension, an unknown dtype, a rank above 8") {
    CHECK_FALSE(tensor_header_problem({2, -1}, 0, 0).empty());
    CHECK_FALSE(tensor_header_problem({2}, 7, 8).empty());
    CHECK_FALSE(tensor_header_problem(shape_t(9, 1), 0, 4).empty());
  }
  SUBCASE("a valid header of 4 GiB with no payload behind it is refused before allocating") {
    // Within max_received_tensor_bytes, but the message ends after the header: refused
    // from the bytes left (a 4 GiB allocation first would fail under ASan's malloc limit).
    const std::int64_t elements = std::int64_t{1} << 30;
    tensor t;
    auto error = receive_header({elements}, 0, std::uint64_t{1} << 32, t);
    REQUIRE(error);
    CHECK_FALSE(t.defined());
    caf::actor_system_config config;
    caf::actor_system system{config};
    CHECK(system.render(error).find(
              "tensor of 4294967296 bytes, but the message holds only 0 more") !=
          std::string::npos);
  }
  SUBCASE("the largest allowed header and an empty tensor pass") {
    const auto elements = static_cast<std::int64_t>(max_received_tensor_bytes / 4);
    CHECK(tensor_header_problem({elements}, 0, max_received_tensor_bytes).empty());
    CHECK(tensor_header_problem({0, 5}, 1, 0).empty());
  }
}
