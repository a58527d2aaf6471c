// file_bytes.cpp: mapped or read data files (file_bytes.hpp, Note [rows from a file]).
#include "runtime/data/file_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

std::vector<std::unique_ptr<unique_fd>>& scratch_files() {
  static std::vector<std::unique_ptr<unique_fd>> files;
  return files;
}
std::mutex scratch_mutex;

}  // namespace

scratch_file make_scratch_file(const std::string& what) {
  const char* directory = std::getenv("TMPDIR");
  const std::string where = directory && *directory ? directory : "/tmp";
  int fd = ::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {  // a file system without O_TMPFILE: a named file, unlinked at once
    std::string name = where + "/troupe-data-XXXXXX";
    fd = ::mkstemp(name.data());
    if (fd >= 0)
      ::unlink(name.c_str());
  }
  if (fd < 0)
    throw data_error(what + ": cannot make a temporary file in " + quote_user_path(where) + ": " +
                     std::strerror(errno) + " (set TMPDIR to a writable directory)");
  std::lock_guard<std::mutex> guard{scratch_mutex};
  scratch_files().push_back(std::make_unique<unique_fd>(fd));
  return scratch_file{fd, "/proc/self/fd/" + std::to_string(fd)};
}

bool write_all(int fd, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const auto n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

unique_fd open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw data_error(quote_user_path(path) + ": cannot open: " + std::strerror(errno));
  return unique_fd{fd};
}

bool read_at(int fd, void* out, std::size_t size, std::int64_t offset) {
  auto* bytes = static_cast<char*>(out);
  while (size > 0) {
    const auto got = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    bytes += got;
    size -= static_cast<std::size_t>(got);
    offset += got;
  }
  return true;
}

file_bytes::file_bytes(const std::string& path, std::int64_t bytes, file_access access)
    : path_(path), file_(open_for_reading(path)) {
  if (access != file_access::read && bytes > 0) {
    void* at = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_PRIVATE,
                      file_.get(), 0);
    if (at != MAP_FAILED) {  // else no address space for it: pread
      ::madvise(at, static_cast<std::size_t>(bytes), MADV_RANDOM);  // batches pick at random
      mapped_ = at;
      mapped_bytes_ = static_cast<std::size_t>(bytes);
    }
  }
  if (access == file_access::mapped && mapped_ == nullptr && bytes > 0)
    throw data_error(quote_user_path(path_) + ": cannot map its " + std::to_string(bytes) +
                     " bytes");
}

file_bytes::file_bytes(std::shared_ptr<const unsigned char> memory, std::string name)
    : path_(std::move(name)), file_(-1), memory_(std::move(memory)) {}

file_bytes::~file_bytes() {
  if (mapped_ != nullptr)
    ::munmap(mapped_, mapped_bytes_);
}

const unsigned char* file_bytes::at(std::int64_t offset, std::size_t size,
                                    std::vector<unsigned char>& buffer) const {
  if (memory_ != nullptr)
    return memory_.get() + offset;
  if (mapped_ != nullptr)
    return static_cast<const unsigned char*>(mapped_) + offset;
  buffer.resize(size);
  if (!read_at(file_.get(), buffer.data(), size, offset))
    throw data_error(quote_user_path(path_) + ": the " + std::to_string(size) + " bytes at byte " +
                     std::to_string(offset) + " could not be read (did the file change?)");
  return buffer.data();
}

}  // namespace troupe
