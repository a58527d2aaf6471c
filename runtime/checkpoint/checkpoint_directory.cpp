// checkpoint_directory.cpp: scanning, verifying, pruning and committing checkpoint
// directories (checkpoint_directory.hpp). Paths go through std::filesystem; every failure
// that a user can act on names the directory and the file.
#include "runtime/checkpoint/checkpoint_directory.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>

#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/atomic_file.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

constexpr const char* step_prefix = "step-";
constexpr std::size_t step_digits = 9;

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

[[noreturn]] void throw_remove_failure(const fs::path& path, const std::error_code& error) {
  throw user_error("cannot remove " + quote_user_path(path.string()) +
                       " while pruning checkpoints: " + error.message(),
                   exit_code::run_failed);
}

// Removes `directory`'s manifest (making it incomplete), then the directory.
void remove_checkpoint_directory(const fs::path& directory) {
  std::error_code error;
  fs::remove(directory / manifest_file_name, error);
  if (error)
    throw_remove_failure(directory / manifest_file_name, error);
  fs::remove_all(directory, error);
  if (error)
    throw_remove_failure(directory, error);
}

}  // namespace

std::string checkpoint_directory_name(std::int64_t step) {
  TROUPE_CHECK(step >= 0, "a checkpoint at step " << step);
  std::string digits = std::to_string(step);
  if (digits.size() < step_digits)
    digits.insert(0, step_digits - digits.size(), '0');
  return step_prefix + digits;
}

std::optional<std::int64_t> step_of_checkpoint_directory(const std::string& name) {
  const std::string prefix = step_prefix;
  if (name.size() < prefix.size() + step_digits || name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() > prefix.size() + 19)  // 19 digits hold any int64
    return std::nullopt;
  std::uint64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return std::nullopt;
    step = step * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  if (step > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return std::nullopt;
  // Only the one spelling we write: "step-0000000042" (10 digits) is not step 42.
  const auto value = static_cast<std::int64_t>(step);
  if (checkpoint_directory_name(value) != name)
    return std::nullopt;
  return value;
}

checkpoint_scan scan_checkpoints(const std::string& root) {
  checkpoint_scan scan;
  std::error_code error;
  const auto status = fs::status(root, error);
  if (!fs::exists(status))
    return scan;
  if (!fs::is_directory(status))
    throw data_error("checkpoint directory " + quote_user_path(root) + " is not a directory");
  fs::directory_iterator it{root, error}, end;
  for (; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    const auto step = step_of_checkpoint_directory(name);
    std::error_code type_error;
    if (!step || !it->is_directory(type_error))
      continue;
    const auto path = it->path().string();
    const auto manifest_path = it->path() / manifest_file_name;
    if (!fs::exists(manifest_path, type_error)) {
      scan.incomplete.push_back({*step, path,
                                 "no manifest.json (a checkpoint being written, or one a "
                                 "crash interrupted)"});
      continue;
    }
    try {
      auto manifest = read_manifest(manifest_path.string());
      if (manifest.step != *step) {
        scan.incomplete.push_back({*step, path,
                                   "its manifest says step " + std::to_string(manifest.step) +
                                       ", not the step of the directory's name"});
        continue;
      }
      scan.complete.push_back({*step, path, std::move(manifest)});
    } catch (const data_error& e) {
      scan.incomplete.push_back({*step, path, e.what()});
    }
  }
  if (error)
    throw data_error("cannot list checkpoint directory " + quote_user_path(root) + ": " +
                     error.message());
  const auto by_step = [](const auto& a, const auto& b) { return a.step < b.step; };
  std::sort(scan.complete.begin(), scan.complete.end(), by_step);
  std::sort(scan.incomplete.begin(), scan.incomplete.end(), by_step);
  return scan;
}

std::vector<checkpoint_info> list_checkpoints(const std::string& root) {
  return scan_checkpoints(root).complete;
}

std::optional<checkpoint_info> latest_checkpoint(const std::string& root) {
  auto complete = list_checkpoints(root);
  if (complete.empty())
    return std::nullopt;
  return std::move(complete.back());
}

checkpoint_manifest verify_checkpoint(const std::string& directory) {
  const fs::path dir{directory};
  auto manifest = read_manifest((dir / manifest_file_name).string());
  const auto where = "checkpoint " + quote_user_path(directory) + ": shard ";
  for (const auto& shard : manifest.shards) {
    const auto path = dir / shard.file;
    const auto label = where + quote_user_text(shard.file);
    std::error_code error;
    const auto status = fs::status(path, error);
    if (!fs::exists(status))
      throw data_error(label + " is missing; the manifest lists it with " +
                       std::to_string(shard.bytes) + " bytes");
    if (!fs::is_regular_file(status))
      throw data_error(label + " is not a regular file");
    const auto size = fs::file_size(path, error);
    if (error)
      throw data_error(label + ": cannot read its size: " + error.message());
    if (size != shard.bytes)
      throw data_error(label + " is " + std::to_string(size) + " bytes; the manifest says " +
                       std::to_string(shard.bytes) +
                       (size < shard.bytes ? " (truncated?)" : " (written over?)"));
    const auto crc = crc32_of_file(path.string());
    if (crc != shard.crc32)
      throw data_error(label + " has CRC-32 " + hex32(crc) + "; the manifest says " +
                       hex32(shard.crc32) + ": the file is damaged");
    const auto header = read_safetensors_header(path.string());
    std::set<std::string> listed(shard.tensors.begin(), shard.tensors.end());
    for (const auto& entry : header.entries())
      if (!listed.erase(entry.name))
        throw data_error(label + " holds the tensor " + quote_user_text(entry.name) +
                         ", which the manifest does not list for it");
    if (!listed.empty())
      throw data_error(label + " lacks the tensor " + quote_user_text(*listed.begin()) +
                       ", which the manifest lists for it");
  }
  return manifest;
}

std::vector<std::string> prune_checkpoints(const std::string& root, std::size_t keep_last,
                                           const std::set<std::int64_t>& keep_also,
                                           std::int64_t up_to) {
  TROUPE_CHECK(keep_last >= 1,
               "prune_checkpoints would remove every checkpoint of '" << root << "'");
  auto scan = scan_checkpoints(root);
  // Not another run's newer checkpoints, and nothing behind a link (an outside review's
  // keep = 1 pruned a linked checkpoint of another run through the link).
  auto foreign = [&](const auto& c) {
    std::error_code error;
    return c.step > up_to || fs::is_symlink(fs::symlink_status(c.path, error));
  };
  scan.complete.erase(std::remove_if(scan.complete.begin(), scan.complete.end(), foreign),
                      scan.complete.end());
  scan.incomplete.erase(std::remove_if(scan.incomplete.begin(), scan.incomplete.end(), foreign),
                        scan.incomplete.end());
  std::vector<std::string> removed;
  const std::size_t count = scan.complete.size();
  for (std::size_t i = 0; i + keep_last < count; ++i) {
    const auto& c = scan.complete[i];
    if (keep_also.count(c.step))
      continue;
    remove_checkpoint_directory(c.path);
    removed.push_back(c.path);
  }
  if (count > 0) {
    const auto newest = scan.complete.back().step;
    for (const auto& c : scan.incomplete) {
      if (c.step >= newest || keep_also.count(c.step))
        continue;
      remove_checkpoint_directory(c.path);
      removed.push_back(c.path);
    }
  }
  if (!removed.empty())
    sync_directory(root);
  return removed;
}

std::vector<std::string> set_aside_newer_checkpoints(const std::string& root, std::int64_t step) {
  const auto scan = scan_checkpoints(root);
  std::vector<std::string> out;
  auto set_aside = [&](const std::string& path) {
    std::error_code error;
    auto target = path + ".superseded";
    for (int n = 2; fs::exists(fs::symlink_status(target, error)); ++n)
      target = path + ".superseded-" + std::to_string(n);
    fs::rename(path, target, error);
    if (error)
      throw user_error("cannot set aside checkpoint " + quote_user_path(path) +
                           " (newer than the step " + std::to_string(step) +
                           " this run resumes from) as " + quote_user_path(target) + ": " +
                           error.message(),
                       exit_code::run_failed);
    out.push_back(target);
  };
  for (const auto& c : scan.complete)
    if (c.step > step)
      set_aside(c.path);
  for (const auto& c : scan.incomplete)
    if (c.step > step)
      set_aside(c.path);
  if (!out.empty())
    sync_directory(root);
  return out;
}

checkpoint_info resolve_resume_path(const std::string& path) {
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status))
    throw data_error("resume path " + quote_user_path(path) + " does not exist");
  if (!fs::is_directory(status))
    throw data_error("resume path " + quote_user_path(path) +
                     " is not a directory; expected a checkpoint directory (one holding "
                     "manifest.json) or a directory of step-<n> checkpoints");
  const auto manifest_path = fs::path{path} / manifest_file_name;
  if (fs::exists(manifest_path, error)) {
    auto manifest = read_manifest(manifest_path.string());
    const auto step = manifest.step;
    return {step, path, std::move(manifest)};
  }
  auto scan = scan_checkpoints(path);
  if (!scan.complete.empty())
    return std::move(scan.complete.back());
  std::string message = "resume path " + quote_user_path(path) + " holds no complete checkpoint";
  if (scan.incomplete.empty())
    message += ": no manifest.json and no step-<n> directories in it";
  for (std::size_t i = 0; i < scan.incomplete.size() && i < 3; ++i)
    message += "\n  " + fs::path{scan.incomplete[i].path}.filename().string() + ": " +
               scan.incomplete[i].reason;
  if (scan.incomplete.size() > 3)
    message += "\n  ... and " + std::to_string(scan.incomplete.size() - 3) + " more";
  throw data_error(message);
}

std::string make_checkpoint_directory(const std::string& root, std::int64_t step) {
  const auto directory = fs::path{root} / checkpoint_directory_name(step);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error)
    throw user_error("cannot create checkpoint directory " + quote_user_path(directory.string()) +
                         ": " + error.message(),
                     exit_code::run_failed);
  const bool had_manifest = fs::remove(directory / manifest_file_name, error);
  if (error)
    throw user_error("cannot remove the old manifest of " + quote_user_path(directory.string()) +
                         ": " + error.message(),
                     exit_code::run_failed);
  if (had_manifest)  // incomplete for good before any shard is written over
    sync_directory(directory.string());
  return directory.string();
}

void commit_checkpoint(const std::string& directory, const checkpoint_manifest& manifest) {
  auto path = fs::path{directory};
  if (!path.has_filename())  // "root/step-000000001/"
    path = path.parent_path();
  write_manifest((path / manifest_file_name).string(), manifest);
  const auto parent = path.parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace troupe
