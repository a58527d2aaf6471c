// atomic_file.cpp: the temporary-file, fsync, rename, fsync-directory sequence and the
// CRC-32 helpers declared in atomic_file.hpp. POSIX file descriptors throughout, so that
// every write's result and errno are seen where they happen (no stdio buffer between).
#include "runtime/checkpoint/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/base/unique_fd.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// "No space left on device (errno 28)", with a hint where one helps.
std::string checkpoint_errno(int error) {
  return describe_errno(error, "choose another checkpoint directory");
}

[[noreturn]] void throw_write_failure(const std::string& path, const std::string& what, int error) {
  throw user_error(
      "cannot write " + quote_user_path(path) + ": " + what + ": " + checkpoint_errno(error),
      exit_code::run_failed);
}

int fsync_retrying(int fd) {
  int result;
  do
    result = ::fsync(fd);
  while (result != 0 && errno == EINTR);
  return result;
}

// The temporary name beside `path`: ".name.tmp.<pid>.<counter>", unique within the
// process by the counter and across processes by the pid.
std::string temporary_name_for(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
  const std::filesystem::path target{path};
  const auto name = "." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(counter.fetch_add(1));
  return (target.parent_path() / name).string();
}

std::string directory_of(const std::string& path) {
  const auto parent = std::filesystem::path{path}.parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

void atomic_file_writer::write(const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  std::size_t left = size;
  while (left > 0) {
    const ssize_t wrote = ::write(fd_, p, left);
    if (wrote < 0) {
      if (errno == EINTR)
        continue;
      throw_write_failure(path_,
                          "writing the temporary file " + quote_user_path(temporary_path_) +
                              " failed after " + std::to_string(bytes_ + (size - left)) + " bytes",
                          errno);
    }
    p += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
  crc_.process_bytes(data, size);
  bytes_ += size;
}

written_file write_file_atomically(const std::string& path,
                                   const std::function<void(atomic_file_writer&)>& write_content) {
  const std::string temporary = temporary_name_for(path);
  unique_fd fd{::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)};
  if (fd.get() < 0)
    throw_write_failure(path, "cannot create the temporary file " + quote_user_path(temporary) + "",
                        errno);
  written_file written;
  try {
    atomic_file_writer writer{fd.get(), path, temporary};
    write_content(writer);
    if (fsync_retrying(fd.get()) != 0)
      throw_write_failure(
          path, "fsync of the temporary file " + quote_user_path(temporary) + " failed", errno);
    // close() can report a deferred write error (NFS, some FUSE file systems).
    if (fd.close() != 0)
      throw_write_failure(
          path, "closing the temporary file " + quote_user_path(temporary) + " failed", errno);
    if (std::rename(temporary.c_str(), path.c_str()) != 0)
      throw_write_failure(path, "renaming " + quote_user_path(temporary) + " over it failed",
                          errno);
    written = {writer.bytes_written(), writer.crc_.checksum()};
  } catch (...) {
    ::unlink(temporary.c_str());  // best effort: the error being thrown is the one to report
    throw;
  }
  // The rename is done: the content is in place, and only its durability is left to ensure.
  sync_directory(directory_of(path));
  return written;
}

written_file write_file_atomically(const std::string& path,
                                   const std::vector<std::uint8_t>& bytes) {
  return write_file_atomically(
      path, [&](atomic_file_writer& out) { out.write(bytes.data(), bytes.size()); });
}

written_file write_file_atomically(const std::string& path, const std::string& text) {
  return write_file_atomically(
      path, [&](atomic_file_writer& out) { out.write(text.data(), text.size()); });
}

void sync_directory(const std::string& path) {
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (fd.get() < 0)
    throw user_error("cannot sync directory " + quote_user_path(path) +
                         ": open failed: " + checkpoint_errno(errno),
                     exit_code::run_failed);
  if (fsync_retrying(fd.get()) != 0)
    throw user_error("cannot sync directory " + quote_user_path(path) +
                         ": fsync failed: " + checkpoint_errno(errno),
                     exit_code::run_failed);
}

std::uint32_t crc32(const void* data, std::size_t size) {
  boost::crc_32_type crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

std::uint32_t crc32_of_file(const std::string& path) {
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.get() < 0)
    throw data_error("cannot read " + quote_user_path(path) +
                     " to check its checksum: " + checkpoint_errno(errno));
  boost::crc_32_type crc;
  std::vector<char> buffer(std::size_t{1} << 20);
  std::uint64_t done = 0;
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR)
        continue;
      throw data_error("cannot read " + quote_user_path(path) +
                       " to check its checksum: read failed after " + std::to_string(done) +
                       " bytes: " + checkpoint_errno(errno));
    }
    if (got == 0)
      break;
    crc.process_bytes(buffer.data(), static_cast<std::size_t>(got));
    done += static_cast<std::uint64_t>(got);
  }
  return crc.checksum();
}

}  // namespace troupe
