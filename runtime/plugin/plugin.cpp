// plugin.cpp: dlopen, the ABI check, and registration errors.
#include "runtime/plugin/plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "kernels/registration_journal.hpp"
#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"
#include "troupe/kernel.hpp"

namespace troupe {

namespace {

struct plugin_state {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> loaded;  // (name, canonical path)
  std::map<std::string, std::string> failed;                // canonical path -> the error
  std::map<std::string, std::string> origin;  // "layer type 'swish'" -> the plugin's name
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

std::string plugin_that_registered(const std::string& what) {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mutex};
  auto found = s.origin.find(what);
  return found == s.origin.end() ? std::string{} : found->second;
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
    throw user_error("plugin " + quote_user_path(path) + " does not exist");
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

// Throws unless `library` is a troupe plugin of this troupe's ABI version.
void check_plugin_symbols(void* library, const std::string& path) {
  using abi_function = int (*)();
  auto abi = reinterpret_cast<abi_function>(dlsym(library, "troupe_plugin_abi_version"));
  if (abi == nullptr || dlsym(library, "troupe_plugin_name") == nullptr)
    throw user_error(quote_user_path(path) +
                     " is not a troupe plugin: it does not export "
                     "troupe_plugin_abi_version (add TROUPE_PLUGIN(\"name\") to one of its "
                     "sources, from the public header troupe/plugin.hpp)");
  if (abi() != TROUPE_ABI_VERSION)
    throw user_error("plugin " + quote_user_path(path) + " was built against troupe ABI version " +
                     std::to_string(abi()) + ", but this troupe has ABI version " +
                     std::to_string(TROUPE_ABI_VERSION) + "; rebuild it against this troupe");
  if (dlsym(library, "troupe_plugin_register") == nullptr)
    throw user_error("plugin " + quote_user_path(path) + " has ABI version " +
                     std::to_string(TROUPE_ABI_VERSION) +
                     " but no troupe_plugin_register (TROUPE_PLUGIN writes both; declare the "
                     "plugin with TROUPE_PLUGIN(\"name\") from troupe/plugin.hpp)");
}

// Takes the plugin's deferred registrations and commits them, all or nothing: every clash
// is found before anything is registered. A throw from the plugin's code (its hand-over, a
// conflict check or a commit) is a user_error naming the plugin.
std::vector<std::string> register_plugin(void* library, const std::string& path,
                                         const std::string& plugin_name) {
  using register_function = void (*)(std::vector<detail::deferred_registration>*);
  auto hand_over = reinterpret_cast<register_function>(dlsym(library, "troupe_plugin_register"));
  // The registrations' code lives in the library: they go before it may be closed.
  std::vector<detail::deferred_registration> registrations;
  const auto refuse = [&](const std::string& what) {
    registrations.clear();
    return user_error("plugin " + quote_user_path(path) + " (" + plugin_name + ") " + what);
  };
  std::string current = "its registrations";
  try {
    hand_over(&registrations);
    std::vector<std::string> clashes;
    std::set<std::string> seen;
    for (const auto& r : registrations) {
      current = r.what;
      auto problem = r.conflict();
      if (problem.empty() && !seen.insert(r.what).second)
        problem = r.what + " is registered twice by this plugin";
      if (!problem.empty())
        clashes.push_back(problem);
    }
    if (!clashes.empty()) {
      std::string message = "registers names that exist: ";
      for (std::size_t i = 0; i < clashes.size(); ++i)
        message += (i ? "; " : "") + clashes[i];
      throw refuse(message);
    }
    std::vector<std::string> made;
    for (const auto& r : registrations) {
      current = r.what;
      r.commit();
      made.push_back(r.what);
    }
    return made;
  } catch (const user_error&) {
    throw;
  } catch (const std::exception& e) {
    throw refuse("failed while registering " + current + ": " + quote_user_text(e.what()) +
                 "; nothing it registers was kept");
  } catch (...) {
    throw refuse("failed while registering " + current +
                 " (a throw that is not a std::exception); nothing it registers was kept");
  }
}

void open_plugin(const std::string& path, const std::string& canonical) {
  // Declared first, so that it closes last: after the journal has taken back anything the
  // library registered (Note [undoing a failed load] in kernels/registration_journal.hpp).
  library_handle library;
  detail::registration_journal journal;
  // RTLD_LOCAL until accepted, then RTLD_GLOBAL (a plugin's kernels and layers may be used
  // by another plugin): a refused library that stays mapped (NODELETE, unique symbols) keeps
  // its symbols to itself. Its static initialisers run now, but inside a plugin they only
  // record (Note [plugin registrations]); nothing reaches troupe's registries before the
  // checks below, except from a library that is no plugin, which the journal takes back.
  library.handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library.handle == nullptr)
    throw user_error("plugin " + quote_user_path(path) + " cannot be loaded: " + dlerror());
  check_plugin_symbols(library.handle, path);
  using name_function = const char* (*)();
  const std::string plugin_name =
      reinterpret_cast<name_function>(dlsym(library.handle, "troupe_plugin_name"))();
  const auto made = register_plugin(library.handle, path, plugin_name);
  journal.keep();
  // Accepted: its symbols become global, and it stays loaded (this second reference is
  // never dropped, nor is the first).
  dlopen(canonical.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  library.handle = nullptr;
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mutex};
  s.loaded.emplace_back(plugin_name, canonical);
  for (const auto& what : made)
    s.origin.emplace(what, plugin_name);
}

}  // namespace

}  // namespace troupe
