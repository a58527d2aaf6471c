// The house's one direction of dependency (DESIGN.md "Layers of the code"), checked on the
// sources: the public facade include/troupe/ includes only itself (it is all that is
// installed); kernels/ includes nothing of ours above it; runtime/ never includes actors/
// or a concrete layer, and each runtime/ folder includes only the folders below it, the
// facade's headers counting as the folder they belong to. A new #include that breaks the
// order fails here, naming the file and the line.
#include <doctest/doctest.h>

#include <algorithm>
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
  std::string target;  // "troupe/tensor.hpp"
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

// Where each header of the facade belongs in the layering: "kernels", a runtime folder, or
// "actors". A facade header missing here fails the facade test below.
const std::map<std::string, std::string> facade_homes = {
    {"troupe/check.hpp", "kernels"},       {"troupe/registration.hpp", "kernels"},
    {"troupe/kernel.hpp", "kernels"},      {"troupe/ops.hpp", "kernels"},
    {"troupe/exit_code.hpp", "base"},      {"troupe/error.hpp", "base"},
    {"troupe/trace.hpp", "trace"},         {"troupe/device.hpp", "core"},
    {"troupe/tensor.hpp", "core"},         {"troupe/detail/tensor_inspect.hpp", "actors"},
    {"troupe/settings.hpp", "config"},     {"troupe/layer.hpp", "model"},
    {"troupe/loss.hpp", "model"},
    {"troupe/plugin.hpp", "plugin"},       {"troupe/messages.hpp", "actors"},
    {"troupe/inputs.hpp", "actors"},       {"troupe/traced.hpp", "actors"},
    {"troupe/device_actor.hpp", "actors"}, {"troupe/grads_filter.hpp", "actors"},
    {"troupe/actor_kind.hpp", "actors"},
    // Internals a public template needs (installed, not for plugins): troupe/detail/.
    {"troupe/detail/tensor_inspect.hpp", "actors"}, {"troupe/detail/posting.hpp", "actors"},
};

bool is_facade(const std::string& path) { return path.rfind("troupe/", 0) == 0; }

// A facade header that belongs to kernels/ (kernels may include those).
bool is_kernel_facade(const std::string& path) {
  auto home = facade_homes.find(path);
  return home != facade_homes.end() && home->second == "kernels";
}

// "troupe/tensor.hpp" -> "core", "troupe/tensor.hpp" -> "core"; "" for anything
// else (facade headers of kernels/ and actors/ included).
std::string runtime_folder(const std::string& path) {
  if (is_facade(path)) {
    auto home = facade_homes.find(path);
    return home == facade_homes.end() || home->second == "kernels" || home->second == "actors"
               ? ""
               : home->second;
  }
  const std::string prefix = "runtime/";
  if (path.rfind(prefix, 0) != 0)
    return "";
  const auto slash = path.find('/', prefix.size());
  return slash == std::string::npos ? "" : path.substr(prefix.size(), slash - prefix.size());
}

}  // namespace

TEST_CASE("the public facade includes nothing of troupe's outside itself") {
  const auto lines = includes_under("include/troupe");
  REQUIRE_FALSE(lines.empty());
  std::set<std::string> headers;
  const fs::path facade{fs::path{TROUPE_SOURCE_DIR} / "include"};
  for (const auto& entry : fs::recursive_directory_iterator(facade / "troupe"))
    if (entry.is_regular_file())
      headers.insert(entry.path().lexically_relative(facade).generic_string());
  for (const auto& header : headers) {
    INFO(header << " has no place in facade_homes");
    CHECK(facade_homes.count(header) == 1);
  }
  for (const auto& i : lines) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    CHECK(headers.count(i.target) == 1);
    // Down the layering only (kernels, then the runtime's folders, then actors).
    const std::vector<std::string> homes{"kernels", "base", "trace", "core",   "config",
                                         "model",   "data", "graph", "plugin", "actors"};
    auto rank = [&](const std::string& header) {
      return std::find(homes.begin(), homes.end(), facade_homes.at(header)) - homes.begin();
    };
    CHECK(rank(i.target) <= rank(fs::path{i.file}.lexically_relative("include").generic_string()));
  }
}

TEST_CASE("kernels include nothing of troupe's but kernels") {
  const auto lines = includes_under("kernels");
  REQUIRE_FALSE(lines.empty());
  for (const auto& i : lines) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    CHECK((i.target.rfind("kernels/", 0) == 0 || is_kernel_facade(i.target)));
  }
}

TEST_CASE("each runtime folder includes only the folders below it, and never actors") {
  // The order of docs/architecture.md's folder table: a folder may use those before it.
  const std::vector<std::string> order{"base",  "trace",      "core",        "net",
                                       "config", "model",     "data",        "graph",
                                       "plugin", "checkpoint", "trace_tools", "collective",
                                       "plot"};
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
    CHECK_FALSE((is_facade(i.target) && facade_homes.count(i.target) &&
                 facade_homes.at(i.target) == "actors"));
    const auto to = runtime_folder(i.target);
    if (to.empty()) {
      // runtime may use kernels, nothing else
      CHECK((i.target.rfind("kernels/", 0) == 0 || is_kernel_facade(i.target)));
      continue;
    }
    REQUIRE_MESSAGE(rank.count(to), "runtime/" << to << " is not in the layering order");
    CHECK(rank[to] <= rank[from]);
  }
  CHECK(seen_folders.size() == order.size());  // the order names no folder that is gone
}

TEST_CASE("each actors folder includes only the folders below it, and layers only the facade") {
  // DESIGN.md "Layers of the code": the actor base, then delivery between processes, the
  // training actors, the averagers, the trainer, the session (the run as phases and
  // modes), and the tools that drive sessions. A folder may use those before it.
  const std::vector<std::string> order{"base",    "transport", "training", "averaging",
                                       "trainer", "session",   "tools"};
  auto folder_of = [](const std::string& path) -> std::string {
    const std::string prefix = "actors/";
    if (path.rfind(prefix, 0) != 0)
      return "";
    const auto slash = path.find('/', prefix.size());
    return slash == std::string::npos ? "" : path.substr(prefix.size(), slash - prefix.size());
  };
  std::set<std::string> seen_folders;
  for (const auto& entry : fs::directory_iterator(fs::path{TROUPE_SOURCE_DIR} / "actors")) {
    INFO("actors/" << entry.path().filename().string());
    CHECK(entry.is_directory());  // no file left at the top: each has its concern's folder
    const auto name = entry.path().filename().string();
    if (entry.is_directory() && name != "layers" && name != "losses") {
      CHECK(std::find(order.begin(), order.end(), entry.path().filename().string()) !=
            order.end());
      seen_folders.insert(entry.path().filename().string());
    }
  }
  CHECK(seen_folders.size() == order.size());  // the order names no folder that is gone
  const auto lines = includes_under("actors");
  REQUIRE_FALSE(lines.empty());
  for (const auto& i : lines) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    const auto from = folder_of(i.file);
    CHECK(i.target.rfind("cli/", 0) != 0);
    if (from == "layers" || from == "losses") {
      // Built-in layers and loss kinds are written as a plugin's are: the public facade only.
      CHECK((is_facade(i.target) || folder_of(i.target) == from));
      continue;
    }
    const auto to = folder_of(i.target);
    if (to.empty())
      continue;  // runtime/, kernels/ and the facade lie below every actors folder
    // Layers and loss kinds are found through their registries, never by name.
    CHECK((to != "layers" && to != "losses"));
    const auto rank = [&](const std::string& folder) {
      return std::find(order.begin(), order.end(), folder) - order.begin();
    };
    REQUIRE_MESSAGE(rank(from) < static_cast<long>(order.size()),
                    "actors/" << from << " is not in the layering order");
    CHECK(rank(to) <= rank(from));
  }
}

TEST_CASE("the CLI and the Python module sit beside each other on top: nothing below includes "
          "them, and neither includes the other") {
  for (const char* below : {"kernels", "runtime", "actors", "include/troupe"})
    for (const auto& i : includes_under(below)) {
      INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
      CHECK(i.target.rfind("python/", 0) != 0);
      CHECK(i.target.rfind("cli/", 0) != 0);
    }
  const auto python = includes_under("python");
  REQUIRE_FALSE(python.empty());
  for (const auto& i : python) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    CHECK(i.target.rfind("cli/", 0) != 0);
  }
  for (const auto& i : includes_under("cli")) {
    INFO(i.file << ":" << i.line << " includes \"" << i.target << "\"");
    CHECK(i.target.rfind("python/", 0) != 0);
  }
}
