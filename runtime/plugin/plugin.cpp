// plugin.cpp: dlopen, the ABI check, and registration errors.
#include "runtime/plugin/plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "kernels/kernels.hpp"
#include "runtime/base/error.hpp"

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

void load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw user_error("plugin '" + path + "' does not exist");
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

void open_plugin(const std::string& path, const std::string& canonical) {
  kernels::take_registration_errors();  // only this library's from here on
  // RTLD_GLOBAL: a plugin's kernels and layers may be used by another plugin.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr)
    throw user_error("plugin '" + path + "' cannot be loaded: " + dlerror());
  using abi_function = int (*)();
  using name_function = const char* (*)();
  auto abi = reinterpret_cast<abi_function>(dlsym(handle, "troupe_plugin_abi_version"));
  auto name = reinterpret_cast<name_function>(dlsym(handle, "troupe_plugin_name"));
  if (abi == nullptr || name == nullptr)
    throw user_error("'" + path + "' is not a troupe plugin: it does not export "
                     "troupe_plugin_abi_version (add TROUPE_PLUGIN(\"name\") to one of its "
                     "sources, from runtime/plugin/plugin.hpp)");
  if (abi() != TROUPE_ABI_VERSION)
    throw user_error("plugin '" + path + "' was built against troupe ABI version " +
                     std::to_string(abi()) + ", but this troupe has ABI version " +
                     std::to_string(TROUPE_ABI_VERSION) + "; rebuild it against this troupe");
  auto errors = kernels::take_registration_errors();
  if (!errors.empty()) {
    std::string message = "plugin '" + path + "' (" + name() + ") registers names that exist: ";
    for (std::size_t i = 0; i < errors.size(); ++i)
      message += (i ? "; " : "") + errors[i];
    throw user_error(message);
  }
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mutex};
  s.loaded.emplace_back(name(), canonical);
}

}  // namespace

}  // namespace troupe
