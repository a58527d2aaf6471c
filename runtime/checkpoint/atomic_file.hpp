// atomic_file.hpp: writing a file so that a crash or a full disk never leaves it half
// written, and checksums of what was written (DESIGN.md "Checkpoints").
//
// write_file_atomically writes to a unique temporary name in the target's directory
// (".name.tmp.<pid>.<counter>"), checks every write, fsyncs and closes it, renames it over
// the target and fsyncs the directory: afterwards the target holds the new content, and if
// anything fails it still holds the old one (or does not exist), the temporary file is
// gone and a user_error with exit_code::run_failed names the path and strerror(errno).
// A full disk never looks like success.
//
// Checksums are CRC-32 (IEEE 802.3, as zlib, Python's zlib.crc32 and PNG): it catches the
// damage a checkpoint meets (truncation, flipped bits, a block of zeros) at disk speed, and
// can be checked without troupe. It is not a defence against deliberate tampering.
//
// Not here: what the bytes mean (safetensors.hpp, manifest.hpp), locking between writers
// of the same path (each checkpoint file has one writer), Windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <boost/crc.hpp>

namespace troupe {

/// The size and CRC-32 of a file as it was written.
struct written_file {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

/// Where the callback form of write_file_atomically writes; it counts and checksums the
/// bytes as they pass.
class atomic_file_writer {
 public:
  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;

  /// Appends `size` bytes. Throws user_error (exit_code::run_failed) naming the target,
  /// the temporary file, the bytes written so far and strerror(errno).
  void write(const void* data, std::size_t size);
  /// The bytes appended so far.
  std::uint64_t bytes_written() const { return bytes_; }

 private:
  friend written_file write_file_atomically(
      const std::string& path, const std::function<void(atomic_file_writer&)>& write_content);
  atomic_file_writer(int fd, std::string path, std::string temporary_path)
      : fd_(fd), path_(std::move(path)), temporary_path_(std::move(temporary_path)) {}

  int fd_;  // the temporary file, owned by write_file_atomically
  std::string path_;
  std::string temporary_path_;
  std::uint64_t bytes_ = 0;
  boost::crc_32_type crc_;
};

/// Writes what `write_content` appends to its writer as the file `path`, atomically (see
/// the top of this file). An exception from `write_content` removes the temporary file and
/// propagates unchanged. Returns the size and CRC-32 of the file written.
written_file write_file_atomically(const std::string& path,
                                   const std::function<void(atomic_file_writer&)>& write_content);
/// Writes `bytes` as the file `path`, atomically.
written_file write_file_atomically(const std::string& path, const std::vector<std::uint8_t>& bytes);
/// Writes `text` as the file `path`, atomically.
written_file write_file_atomically(const std::string& path, const std::string& text);

/// fsyncs the directory `path`, so that the names created, renamed or removed in it are
/// durable. Throws user_error (exit_code::run_failed) naming it and strerror(errno).
void sync_directory(const std::string& path);

/// The CRC-32 of `size` bytes at `data`.
std::uint32_t crc32(const void* data, std::size_t size);
/// The CRC-32 of the whole file at `path`. Throws data_error when it cannot be read.
std::uint32_t crc32_of_file(const std::string& path);

}  // namespace troupe
