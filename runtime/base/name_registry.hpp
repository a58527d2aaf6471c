// name_registry.hpp: the one shape of troupe's registries (layer types, losses, actor
// kinds): names, each with a one-line description and what the registry keeps for it, behind
// a mutex (a plugin registers while the process runs). What a registry does with its entries
// (factories, signatures, the message of a clash or of an unknown name) stays its own.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/registration_journal.hpp"
#include "troupe/error.hpp"

namespace troupe {

template <class Entry>
class name_registry {
 public:
  /// Adds `name`; false (and nothing changes) when it is there already.
  bool add(const std::string& name, std::string description, Entry entry) {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (!entries_.emplace(name, std::make_pair(std::move(description), std::move(entry))).second)
        return false;
    }
    // Taken back if a library being loaded added it and its load fails.
    detail::record_undo([this, name] {
      std::lock_guard<std::mutex> guard{mutex_};
      entries_.erase(name);
    });
    return true;
  }

  bool has(const std::string& name) const {
    std::lock_guard<std::mutex> guard{mutex_};
    return entries_.count(name) > 0;
  }

  /// The entry of `name`, or none, with every name registered then (for did-you-mean).
  std::optional<Entry> find(const std::string& name, std::vector<std::string>& names) const {
    std::lock_guard<std::mutex> guard{mutex_};
    names.clear();
    for (const auto& entry : entries_)
      names.push_back(entry.first);
    auto it = entries_.find(name);
    if (it == entries_.end())
      return std::nullopt;
    return it->second.second;
  }

  /// The names with their descriptions, sorted by name.
  std::vector<std::pair<std::string, std::string>> described() const {
    std::lock_guard<std::mutex> guard{mutex_};
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [name, entry] : entries_)
      out.emplace_back(name, entry.first);
    return out;
  }

  /// "unknown loss 'mes'; did you mean 'mse'? (registered: l1, mse, ...); one a plugin
  /// adds needs ...": `what` is the start ("unknown loss 'mes'"), `names` find()'s. Every
  /// registry's names can come from plugins, so the message says how one is loaded.
  static std::string unknown(const std::string& what, const std::string& name,
                             const std::vector<std::string>& names) {
    return what + did_you_mean(name, names) + " (registered: " + comma_list(names) +
           "); one that a plugin adds needs the plugin loaded: [run] plugins = [\"lib.so\"] in "
           "the config, or --plugin PATH on the command line";
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::pair<std::string, Entry>> entries_;  // name: description, entry
};

}  // namespace troupe
