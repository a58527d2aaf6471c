// The house's one direction of dependency (DESIGN.md "Layers of the code"), checked on the
// sources: kernels/ includes nothing of ours above it, runtime/ never includes actors/ or a
// concrete layer, and each runtime/ folder includes only the folders below it. A new
// #include that breaks the order fails here, naming the file and the line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct include_line {
  std::string file;  // relative to the source tree
  int line = 0;
  std::string target;  // "runtime/core/tensor.hpp"
};

// Every quoted #include of our own headers in the files under `folder`.
std::vector<include_line> includes_under(const std::string& folder) {
  const fs::path root{TROUPE_SOURCE_DIR};
  const std::regex include_pattern{R"re(^\s*#\s*include\s+"([^"]+)")re"};
  std::vector<include_line> out;
  for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
    const auto extension = entry.path().extension().string();
    if (!entry.is_regular_file() ||
        (extension != ".hpp" && extension != ".cpp" && extension != ".cu" && extension != ".cuh"))
      continue;
    std::ifstream in{entry.path()};
    std::string text;
    for (int number = 1; std::getline(in, text); ++number) {
      std::smatch match;
      if (std::regex_search(text, match, include_pattern))
        out.push_back({fs::relative(entry.path(), root).string(), number, match[1]});
    }
  }
  return out;
}

// "runtime/core/tensor.hpp" -> "core"; "" for anything not under runtime/.
std::string runtime_folder(const std::string& path) {
  const std::string prefix = "runtime/";
  if (path.rfind(prefix, 0) != 0)
    return "";
  const auto slash = path.find('/', prefix.size());
  return slash == std::string::npos ? "" : path.substr(prefix.size(), slash - prefix.size());
}

}  // namespace

TEST_CASE("kernels include nothing of troupe's but kernels") {
  const auto lines = includes_under("kernels");
  REQUIRE_FALSE(lines.empty());
  for (const auto& i : lines) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    CHECK(i.target.rfind("kernels/", 0) == 0);
  }
}

TEST_CASE("each runtime folder includes only the folders below it, and never actors") {
  // The order of README.md's layout table: a folder may use those before it.
  const std::vector<std::string> order{"base", "trace", "core",   "config",     "model",
                                       "data", "graph", "plugin", "checkpoint", "trace_tools"};
  std::map<std::string, std::size_t> rank;
  for (std::size_t i = 0; i < order.size(); ++i)
    rank[order[i]] = i;
  std::set<std::string> seen_folders;
  for (const auto& i : includes_under("runtime")) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    const auto from = runtime_folder(i.file);
    REQUIRE_MESSAGE(rank.count(from), "runtime/" << from << " is not in the layering order");
    seen_folders.insert(from);
    CHECK(i.target.rfind("actors/", 0) != 0);
    CHECK(i.target.rfind("cli/", 0) != 0);
    const auto to = runtime_folder(i.target);
    if (to.empty()) {
      CHECK(i.target.rfind("kernels/", 0) == 0);  // runtime may use kernels, nothing else
      continue;
    }
    REQUIRE_MESSAGE(rank.count(to), "runtime/" << to << " is not in the layering order");
    CHECK(rank[to] <= rank[from]);
  }
  CHECK(seen_folders.size() == order.size());  // the order names no folder that is gone
}
