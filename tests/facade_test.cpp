// The layer and kernel side of the public facade compiles without CAF: a layer plugin
// includes these and nothing of CAF (the actor headers, troupe/actor_kind.hpp and what it
// includes, are the ones that bring CAF in). Included first, before anything else could
// bring CAF in, so the check below sees only what these headers pull in.
#include "troupe/error.hpp"
#include "troupe/kernel.hpp"
#include "troupe/layer.hpp"
#include "troupe/ops.hpp"
#include "troupe/plugin.hpp"
#include "troupe/settings.hpp"
#include "troupe/trace.hpp"
#ifdef CAF_CACHE_LINE_SIZE  // defined by caf/config.hpp, which every CAF header includes
#error "a layer or kernel header of the facade includes CAF"
#endif

#include <doctest/doctest.h>

#include "troupe/actor_kind.hpp"

TEST_CASE("the actor side of the facade brings CAF in, and with it the base of every actor") {
#ifndef CAF_CACHE_LINE_SIZE
  FAIL("troupe/actor_kind.hpp did not include CAF");
#endif
  CHECK(std::is_base_of_v<caf::event_based_actor, troupe::device_actor>);
  CHECK(std::is_base_of_v<troupe::device_actor, troupe::grads_filter>);
}

TEST_CASE("settings read typed values and refuse keys nobody read, naming the table") {
  using troupe::setting_value;
  using troupe::source_position;
  troupe::settings s{
      "actor",
      "clip_2",
      {{"max_norm", setting_value{std::int64_t{2}, source_position{"a.toml", 3, 12}}},
       {"mode", setting_value{std::string{"fast"}, source_position{"a.toml", 4, 8}}},
       {"max_nrom", setting_value{1.0, source_position{"a.toml", 5, 12}}}},
      source_position{"a.toml", 2, 1}};
  CHECK(s.number("max_norm", 0.0, 10.0) == 2.0);  // an integer is a number
  CHECK_THROWS_WITH_AS(s.integer("mode", 0, 1),
                       "a.toml:4:8: actor 'clip_2' setting 'mode': expected an integer, found a "
                       "string",
                       troupe::config_error);
  CHECK_THROWS_WITH_AS(s.number("depth", 0.0, 1.0),
                       "a.toml:2:1: actor 'clip_2' needs the number setting 'depth'",
                       troupe::config_error);
  CHECK_THROWS_WITH_AS(s.finish(),
                       "a.toml:5:12: unknown setting 'max_nrom' for actor 'clip_2'; did you mean "
                       "'max_norm'?",
                       troupe::config_error);
}
