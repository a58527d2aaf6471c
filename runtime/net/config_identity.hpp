// config_identity.hpp: what every node of a multi-node run must share with the coordinator
// to run together: the same config file, byte for byte, and the same plugins, in the same
// order. Each node hashes its own; the coordinator compares, and refuses a node that differs
// with a message that shows both sides.
//
//   const auto mine = troupe::net::identify(config_path, plugin_paths);
//   // ... send mine to the coordinator, receive its identity ...
//   if (const auto difference = troupe::net::mismatch(mine, theirs); !difference.empty())
//     throw troupe::user_error(difference);
//
// The hashes are of the bytes, never of the paths: two machines keep the same file at
// different paths, and one path on two machines can hold different files. Not here: the
// exchange itself, the data files (each node reads its own shard), the troupe binary's
// version (the handshake compares that separately).
#pragma once

#include <string>
#include <vector>

namespace troupe::net {

/// The hashes a node and the coordinator compare before they run together.
struct config_identity {
  std::string config_hash;   // SHA-256 of the config file's bytes, 64 lowercase hex digits
  std::string plugins_hash;  // SHA-256 of `plugins`, in order (each entry length-prefixed)
  /// One entry per plugin, in load order: "<file name>:<SHA-256 of the file's bytes>", the
  /// name without its directory ("libmy_layers.so:3f2a...").
  std::vector<std::string> plugins;
};

/// Hashes the config file at `config_path` and the plugins at `plugin_paths` (in the order
/// they are loaded). Throws user_error naming the file and the reason when one cannot be
/// read.
config_identity identify(const std::string& config_path,
                         const std::vector<std::string>& plugin_paths);

/// "" when `mine` and `coordinator` agree; else a message of several lines for the user,
/// printing both hashes of what differs (the config, the plugins and which of them) and what
/// to do, e.g.
///
///   this node's config differs from the coordinator's:
///     config sha256 ab12... here
///     config sha256 cd34... on the coordinator
///     make every node run the same file (compare `sha256sum CONFIG` on each machine)
std::string mismatch(const config_identity& mine, const config_identity& coordinator);

}  // namespace troupe::net
