// checkpoint_test_files.hpp: helpers for the checkpoint tests: raw safetensors bytes built
// from a header text (to write malformed files by hand), file reading and writing
// (the message of a data_error: tests/data_error_of.hpp).
//
// Test-only and header-only. Not a second safetensors writer: the headers are literal text.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/data_error_of.hpp"
#include "tests/text_checks.hpp"

namespace troupe::test {

using byte_vector = std::vector<std::uint8_t>;

/// A safetensors file's bytes: the 8-byte little-endian length of `header`, `header` as
/// given (no padding added), then `data_bytes` bytes counting 0, 1, 2, ...
inline byte_vector raw_safetensors(const std::string& header, std::size_t data_bytes = 0) {
  byte_vector out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(std::uint64_t{header.size()} >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(i));
  return out;
}

inline byte_vector read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return byte_vector(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const byte_vector& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace troupe::test
