// config_identity.cpp: hashing a node's config file and plugins, and the message that says
// how two nodes' differ (config_identity.hpp). Whole files are read into memory: configs
// are kilobytes and plugins megabytes, read once at start-up.
#include "runtime/net/config_identity.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "runtime/net/secret.hpp"
#include "troupe/error.hpp"

namespace troupe::net {

namespace {

// The bytes of the file at `path`; `what` ("config file", "plugin") names it in messages.
std::string read_whole_file(const std::string& path, const std::string& what) {
  auto refuse = [&](int error) {
    return user_error("cannot read the " + what + " '" + path +
                      "' to hash it: " + std::strerror(error));
  };
  struct descriptor {
    int fd;
    ~descriptor() {
      if (fd >= 0)
        ::close(fd);
    }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0)
    throw refuse(errno);
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(file.fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      throw refuse(errno);  // a directory fails here, with EISDIR
    if (got == 0)
      break;
    bytes.append(buffer, static_cast<std::size_t>(got));
  }
  return bytes;
}

// SHA-256 of the entries, each preceded by its length as 8 bytes, so that ["ab", "c"] and
// ["a", "bc"] hash differently.
std::string hash_of_list(const std::vector<std::string>& entries) {
  std::string message;
  for (const auto& entry : entries) {
    const std::uint64_t size = entry.size();
    for (int shift = 56; shift >= 0; shift -= 8)
      message += static_cast<char>((size >> shift) & 0xff);
    message += entry;
  }
  return sha256_hex(message);
}

}  // namespace

config_identity identify(const std::string& config_path,
                         const std::vector<std::string>& plugin_paths) {
  config_identity out;
  out.config_hash = sha256_hex(read_whole_file(config_path, "config file"));
  for (const auto& path : plugin_paths)
    out.plugins.push_back(std::filesystem::path{path}.filename().string() + ":" +
                          sha256_hex(read_whole_file(path, "plugin")));
  out.plugins_hash = hash_of_list(out.plugins);
  return out;
}

std::string mismatch(const config_identity& mine, const config_identity& coordinator) {
  std::string out;
  auto line = [&](const std::string& text) { out += (out.empty() ? "" : "\n") + text; };
  if (mine.config_hash != coordinator.config_hash) {
    line("this node's config differs from the coordinator's:");
    line("  config sha256 " + mine.config_hash + " here");
    line("  config sha256 " + coordinator.config_hash + " on the coordinator");
    line("  make every node run the same file (compare `sha256sum CONFIG` on each machine)");
  }
  if (mine.plugins_hash != coordinator.plugins_hash || mine.plugins != coordinator.plugins) {
    line("this node's plugins differ from the coordinator's:");
    line("  plugins sha256 " + mine.plugins_hash + " here");
    line("  plugins sha256 " + coordinator.plugins_hash + " on the coordinator");
    const auto count = std::max(mine.plugins.size(), coordinator.plugins.size());
    for (std::size_t i = 0; i < count; ++i) {
      const auto here = i < mine.plugins.size() ? mine.plugins[i] : "none";
      const auto there = i < coordinator.plugins.size() ? coordinator.plugins[i] : "none";
      if (here != there)
        line("  plugin " + std::to_string(i + 1) + ": " + here + " here, " + there +
             " on the coordinator");
    }
    line(
        "  load the same plugins, in the same order, on every node (each entry is the file "
        "name and the sha256 of its bytes)");
  }
  return out;
}

}  // namespace troupe::net
