// current_handler.hpp: what the handler this thread runs is about, for jobs submitted on
// its behalf by code that does not know (a copy on arrival, runtime/core/transfer.cpp).
#pragma once

#include <cstdint>

namespace troupe::trace {

struct handler_tags {
  std::uint32_t track = 0;  // the handling actor's
  std::int64_t step = -1;
  std::int32_t microbatch = -1;
  std::int32_t replica = -1;
  std::uint8_t phase = 0;
};

/// True, with `tags` those of the handler span this thread is inside, when tracing records
/// one; false (and `tags` untouched) otherwise.
bool current_handler(handler_tags& tags);

}  // namespace troupe::trace
