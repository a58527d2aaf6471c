// temp_files.hpp: unique temporary files and directories for tests.
//
// A fixed name under /tmp breaks as soon as two runs of the suite share a machine (ctest -j,
// two worktrees, two users): one run reads or deletes the other's file. Every test that
// writes a file takes its path from here instead: a directory made by mkdtemp (a name no
// other process has), removed with everything in it when it goes.
//
// Header-only and test-only. Not for files a test must keep after it ends.
#pragma once

#include <stdlib.h>  // mkdtemp (POSIX)

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace troupe::test {

/// A fresh, empty directory under the system's temporary directory, named
/// `<prefix>-XXXXXX`, removed with its contents at scope exit.
class temp_directory {
 public:
  explicit temp_directory(const std::string& prefix = "troupe-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~temp_directory() {
    std::error_code ignored;  // never throw from a destructor; a leftover is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  temp_directory(const temp_directory&) = delete;
  temp_directory& operator=(const temp_directory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The path of `name` inside this directory (the file is not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
  std::string string() const { return path_.string(); }

  /// Writes `text` to `name` inside this directory, making the directories on the way;
  /// the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const auto path = path_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }

 private:
  std::filesystem::path path_;
};

/// The path of `name` inside a directory unique to this process, made on first use and
/// removed (with everything in it) when the process exits normally. For tests whose
/// files are simplest named by a helper; a test that wants its own scope uses
/// temp_directory.
inline std::string temp_file(const std::string& name) {
  static const temp_directory directory{"troupe-test"};
  return directory.file(name);
}

}  // namespace troupe::test
