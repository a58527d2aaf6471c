// data_error_of.hpp: the message of the data_error a call throws, for the readers' tests.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "troupe/error.hpp"

namespace troupe::test {

/// The message of the data_error `action` throws; fails the test if it throws none (any
/// other exception escapes and fails the test too).
template <class Action>
std::string data_error_of(Action&& action) {
  try {
    action();
  } catch (const troupe::data_error& e) {
    return e.what();
  }
  FAIL("expected a data_error, but nothing was thrown");
  return "";
}

}  // namespace troupe::test
