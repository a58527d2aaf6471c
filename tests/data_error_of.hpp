// data_error_of.hpp: the message of the data_error a call throws, for the readers' tests.
#pragma once

#include <string>

#include "troupe/error.hpp"

namespace troupe::test {

/// The message of the data_error that `f` throws, or a marker that fails every check.
template <class F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const troupe::data_error& e) {
    return e.what();
  }
  return "<no data_error thrown>";
}

}  // namespace troupe::test
