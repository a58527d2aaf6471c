// jsonl.hpp: reading JSON Lines (one JSON value a line), as the metrics writer writes them,
// in tests.
//
// Header-only and test-only. A line that is not JSON throws (nlohmann's parse_error), which
// fails the test that reads it.
#pragma once

#include <fstream>
#include <istream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::test {

/// Every line of `in`, parsed.
inline std::vector<nlohmann::json> read_jsonl(std::istream& in) {
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line))
    records.push_back(nlohmann::json::parse(line));
  return records;
}

/// Every line of the file at `path`, parsed (a cut line fails the parse).
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  return read_jsonl(in);
}

}  // namespace troupe::test
