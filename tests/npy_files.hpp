// npy_files.hpp: writing NumPy .npy files in tests, byte for byte as NumPy writes them
// (magic, version, a header dict padded to 64 bytes, the data), and lying ones on purpose.
//
// Header-only and test-only: the npy source's tests, the CLI's and the losses' training tests.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace troupe::test {

using bytes = std::vector<unsigned char>;

/// A .npy file: the magic, version, header (padded to 64 bytes as NumPy does), data.
inline bytes npy_file(const std::string& descr, const std::string& shape, const bytes& data,
                      int version = 1, const std::string& order = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + order +
                     ", 'shape': " + shape + ", }";
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0)
    dict += ' ';
  dict += '\n';
  bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(version), 0};
  const auto length = dict.size();
  out.push_back(static_cast<unsigned char>(length & 0xff));
  out.push_back(static_cast<unsigned char>((length >> 8) & 0xff));
  if (version != 1) {
    out.push_back(static_cast<unsigned char>((length >> 16) & 0xff));
    out.push_back(static_cast<unsigned char>((length >> 24) & 0xff));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// The bytes of `values` as they lie in memory (little-endian here, as '<' says).
template <class T>
bytes raw(const std::vector<T>& values) {
  bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

/// Writes `content` to `path`; returns the path.
inline std::string write_test_file(const std::string& path, const bytes& content) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(content.data()),
            static_cast<std::streamsize>(content.size()));
  REQUIRE(out.good());
  return path;
}

/// A float32 .npy of `shape` (like "(4, 2)") holding `values`; returns the path.
inline std::string write_float_npy(const std::string& path, const std::string& shape,
                                   const std::vector<float>& values) {
  return write_test_file(path, npy_file("<f4", shape, raw(values)));
}

}  // namespace troupe::test
