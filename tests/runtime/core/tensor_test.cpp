// Tensors: shared storage, zero-copy messages within a process, and serialisation.
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/messages.hpp"
#include "runtime/core/tensor.hpp"

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
