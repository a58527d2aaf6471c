// text_checks.hpp: checks on the text of messages, shared by the tests that read them.
//
// One definition each: the tests build in batches of files compiled together (CMake's unity
// build, CMakeLists.txt), where two files' own copies of a helper would clash.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "troupe/error.hpp"

namespace troupe::test {

/// Whether `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The bytes of the file at `path` ("" where it cannot be read).
inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The message of the user_error that `action` throws; fails the test if none is thrown.
template <class Action>
std::string user_error_of(Action&& action) {
  try {
    action();
  } catch (const troupe::user_error& e) {
    return e.what();
  }
  FAIL("expected a user_error, but nothing was thrown");
  return "";
}

}  // namespace troupe::test
