// plugin.cpp: dlopen, the ABI check, and registration errors.
#include "runtime/plugin/plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"
#include "troupe/kernel.hpp"

namespace troupe {

namespace {

struct plugin_state {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> loaded;  // (name, canonical path)
  std::map<std::string, std::string> failed;                // canonical path -> the error
};

plugin_state& state() {
  static plugin_state s;
  return s;
}

// A plugin path for a message: a path that does not exist may be megabytes long.
std::string quoted_path(const std::string& path) {
  return quote_user_text(path, limits::max_quoted_path_length);
}

}  // namespace

void check_builtin_registrations() {
  auto errors = kernels::take_registration_errors();
  if (errors.empty())
    return;
  std::string message = "troupe's own registrations clash: ";
  for (std::size_t i = 0; i < errors.size(); ++i)
    message += (i ? "; " : "") + errors[i];
  TROUPE_CHECK(false, message);
}

std::vector<std::pair<std::string, std::string>> loaded_plugins() {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mutex};
  return s.loaded;
}

namespace {

/// dlopen and the checks, for a file not tried before.
void open_plugin(const std::string& path, const std::string& canonical);

}  // namespace

// Loads are serialised: the clash checks and the commits of one plugin must not interleave
// with another's.
static std::mutex& load_mutex() {
  static std::mutex mutex;
  return mutex;
}

void load_plugin(const std::string& path) {
  std::lock_guard<std::mutex> loading{load_mutex()};
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw user_error("plugin " + quoted_path(path) + " does not exist");
  auto canonical = fs::canonical(path, ec).string();
  {
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mutex};
    for (const auto& [name, file] : s.loaded)
      if (file == canonical)
        return;
    auto failed = s.failed.find(canonical);
    if (failed != s.failed.end())
      throw user_error(failed->second);
  }
  try {
    open_plugin(path, canonical);
  } catch (const user_error& e) {
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mutex};
    s.failed.emplace(canonical, e.what());
    throw;
  }
}

void load_config_plugins(const run_config& config) {
  for (const auto& plugin : config.run.plugins) {
    auto path = std::filesystem::path(std::get<std::string>(plugin.value));
    if (path.is_relative())
      path = std::filesystem::path(config.directory) / path;
    try {
      load_plugin(path.string());
    } catch (const user_error& e) {
      throw config_error(plugin.where, e.what());
    }
  }
}

namespace {

// Closes a library on the way out of open_plugin unless released (an accepted plugin
// stays loaded: what it registered points into it).
struct library_handle {
  void* handle = nullptr;
  ~library_handle() {
    if (handle != nullptr)
      dlclose(handle);
  }
};

void open_plugin(const std::string& path, const std::string& canonical) {
  // RTLD_GLOBAL: a plugin's kernels and layers may be used by another plugin. Its static
  // initialisers run now, but inside a plugin they only record (Note [plugin
  // registrations]); nothing reaches troupe's registries before the checks below.
  library_handle library{dlopen(canonical.c_str(), RTLD_NOW | RTLD_GLOBAL)};
  if (library.handle == nullptr)
    throw user_error("plugin " + quoted_path(path) + " cannot be loaded: " + dlerror());
  using abi_function = int (*)();
  using name_function = const char* (*)();
  using register_function = void (*)(std::vector<detail::deferred_registration>*);
  auto abi = reinterpret_cast<abi_function>(dlsym(library.handle, "troupe_plugin_abi_version"));
  auto name = reinterpret_cast<name_function>(dlsym(library.handle, "troupe_plugin_name"));
  if (abi == nullptr || name == nullptr)
    throw user_error(quoted_path(path) +
                     " is not a troupe plugin: it does not export "
                     "troupe_plugin_abi_version (add TROUPE_PLUGIN(\"name\") to one of its "
                     "sources, from runtime/plugin/plugin.hpp)");
  if (abi() != TROUPE_ABI_VERSION)
    throw user_error("plugin " + quoted_path(path) + " was built against troupe ABI version " +
                     std::to_string(abi()) + ", but this troupe has ABI version " +
                     std::to_string(TROUPE_ABI_VERSION) + "; rebuild it against this troupe");
  auto hand_over =
      reinterpret_cast<register_function>(dlsym(library.handle, "troupe_plugin_register"));
  TROUPE_CHECK(hand_over != nullptr,
               "plugin " << quoted_path(path) << " has ABI version " << TROUPE_ABI_VERSION
                         << " but no troupe_plugin_register (TROUPE_PLUGIN writes both)");
  const std::string plugin_name = name();
  {
    // The registrations' code lives in the library: they go before it may be closed.
    std::vector<detail::deferred_registration> registrations;
    hand_over(&registrations);
    // All or nothing: every clash is found before anything is registered.
    std::vector<std::string> clashes;
    std::set<std::string> seen;
    for (const auto& r : registrations) {
      auto problem = r.conflict();
      if (problem.empty() && !seen.insert(r.what).second)
        problem = r.what + " is registered twice by this plugin";
      if (!problem.empty())
        clashes.push_back(problem);
    }
    if (!clashes.empty()) {
      std::string message =
          "plugin " + quoted_path(path) + " (" + plugin_name + ") registers names that exist: ";
      for (std::size_t i = 0; i < clashes.size(); ++i)
        message += (i ? "; " : "") + clashes[i];
      registrations.clear();
      throw user_error(message);
    }
    try {
      for (const auto& r : registrations)
        r.commit();  // checked above: a throw here is a bug
    } catch (...) {
      library.handle = nullptr;  // some registrations point into it now: keep it loaded
      throw;
    }
  }
  library.handle = nullptr;  // accepted: stays loaded
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mutex};
  s.loaded.emplace_back(plugin_name, canonical);
}

}  // namespace

}  // namespace troupe
