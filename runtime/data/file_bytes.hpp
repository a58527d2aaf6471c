// file_bytes.hpp: a data file's bytes for reads at any offset, never read whole.
//
// Note [rows from a file]
// A data file may be larger than the machine's memory, so it is never read whole: a batch
// reads what it picks. Mapping the file makes that a copy from the page cache; but a mapping
// takes address space, and a process under an address-space limit (ulimit -v, a
// container's) cannot map a file larger than the limit. So the file is mapped when that
// succeeds and read with pread, into a small buffer of the reading thread, when it does not:
// slower (a system call a read), the same bytes. Either way the kernel's page cache holds
// what was read recently, and nothing holds the file. The .npy rows (npy.cpp) and the token
// files (tokens.cpp) read through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/unique_fd.hpp"

namespace troupe {

/// How a file is read: mapped when the address space allows (`automatic`), or one way only
/// (the tests check that both give the same values).
enum class file_access { automatic, mapped, read };

class file_bytes {
 public:
  /// Opens `path` for reads of its first `bytes` bytes. Throws data_error when it cannot be
  /// opened, or (file_access::mapped) mapped.
  file_bytes(const std::string& path, std::int64_t bytes, file_access access);
  /// Bytes a program holds in memory (an array the Python module was given), read in
  /// place: `memory` keeps them alive; `name` is how messages call them.
  file_bytes(std::shared_ptr<const unsigned char> memory, std::string name);
  ~file_bytes();
  file_bytes(const file_bytes&) = delete;
  file_bytes& operator=(const file_bytes&) = delete;

  /// The `size` bytes at `offset`: a pointer into the mapping, or into `buffer` (resized)
  /// once they are read. Throws data_error when the file no longer holds them. Safe to call
  /// from several threads at once, each with its own buffer.
  const unsigned char* at(std::int64_t offset, std::size_t size,
                          std::vector<unsigned char>& buffer) const;

  bool mapped() const { return mapped_ != nullptr || memory_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  unique_fd file_;
  void* mapped_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::shared_ptr<const unsigned char> memory_;  // when set: the bytes, not a file's
};

/// An anonymous file in the temporary directory (TMPDIR, or /tmp), which the kernel removes
/// when the process ends, however it ends: written once as the data loads (an .npz entry
/// inflated, a CSV table parsed), then read by `path` (/proc/self/fd/N) as any data file.
/// It stays open for the life of the process.
struct scratch_file {
  int fd = -1;
  std::string path;
};

/// A new scratch file; `what` says what it is for in the data_error when none can be made.
scratch_file make_scratch_file(const std::string& what);

/// Writes `size` bytes to `fd` whole; false (errno set) when it cannot.
bool write_all(int fd, const void* data, std::size_t size);

/// `path` opened for reading; a data_error naming it when it cannot be.
unique_fd open_for_reading(const std::string& path);

/// Reads exactly `size` bytes at `offset` of `fd`; false if the file ends first.
bool read_at(int fd, void* out, std::size_t size, std::int64_t offset);

}  // namespace troupe
