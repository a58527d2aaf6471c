// npz.cpp: the zip directory of an .npz, and its entries as arrays (npz.hpp).
#include "runtime/data/npz.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "runtime/base/limits.hpp"
#include "runtime/data/file_bytes.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

/// An entry of the zip's central directory.
struct zip_entry {
  std::string name;
  int method = 0;              // 0 stored, 8 deflate
  std::uint16_t flags = 0;
  std::uint32_t crc = 0;
  std::int64_t compressed = 0, size = 0;
  std::int64_t local_header = 0;  // offset of its local header
};

std::uint64_t little(const unsigned char* at, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = (value << 8) | at[i];
  return value;
}

class zip_reader {
 public:
  explicit zip_reader(const std::string& path) : path_(path), file_(open_for_reading(path)) {
    struct stat info {};
    if (::fstat(file_.get(), &info) != 0)
      fail("cannot read its size: " + std::string(std::strerror(errno)));
    size_ = info.st_size;
    read_directory();
  }

  const std::vector<zip_entry>& entries() const { return entries_; }
  const std::string& path() const { return path_; }
  int fd() const { return file_.get(); }

  /// Where the entry's data starts: after its local header's name and extra field.
  std::int64_t data_offset(const zip_entry& entry) const {
    unsigned char local[30];
    if (!read(local, 30, entry.local_header) || little(local, 4) != 0x04034b50)
      fail("entry " + quote_user_path(entry.name) + ": no local header at byte " +
           std::to_string(entry.local_header) + " (a damaged archive?)");
    const auto start = entry.local_header + 30 + static_cast<std::int64_t>(little(local + 26, 2)) +
                       static_cast<std::int64_t>(little(local + 28, 2));
    if (start + entry.compressed > size_)
      fail("entry " + quote_user_path(entry.name) + ": its " + std::to_string(entry.compressed) +
           " bytes at byte " + std::to_string(start) + " run past the archive's end (" +
           std::to_string(size_) + " bytes: is it truncated?)");
    return start;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw data_error(quote_user_path(path_) + ": " + what);
  }

  bool read(void* out, std::size_t bytes, std::int64_t offset) const {
    return offset >= 0 && read_at(file_.get(), out, bytes, offset);
  }

 private:
  void read_directory() {
    // The end-of-directory record: in the last 22 + 65535 bytes (a comment may follow it).
    const auto tail = std::min<std::int64_t>(size_, 22 + 65535);
    std::vector<unsigned char> end(static_cast<std::size_t>(tail));
    if (size_ < 22 || !read(end.data(), end.size(), size_ - tail))
      fail("not a zip archive (an .npz is one): too short");
    std::int64_t at = tail - 22;
    while (at >= 0 && little(end.data() + at, 4) != 0x06054b50)
      --at;
    if (at < 0)
      fail("not a zip archive (an .npz is one): no end-of-directory record");
    const auto* record = end.data() + at;
    std::uint64_t count = little(record + 10, 2);
    std::uint64_t directory_size = little(record + 12, 4);
    std::uint64_t directory_at = little(record + 16, 4);
    if (count == 0xffff || directory_size == 0xffffffff || directory_at == 0xffffffff)
      read_zip64_end(size_ - tail + at, count, directory_size, directory_at);
    if (directory_size > static_cast<std::uint64_t>(size_) ||
        directory_at > static_cast<std::uint64_t>(size_) - directory_size)
      fail("its directory (" + std::to_string(directory_size) + " bytes at byte " +
           std::to_string(directory_at) + ") lies outside the file");
    if (directory_size > (std::uint64_t{64} << 20))
      fail("a directory of " + std::to_string(directory_size) + " bytes; troupe reads at most 64 MiB");
    std::vector<unsigned char> directory(static_cast<std::size_t>(directory_size));
    if (!read(directory.data(), directory.size(), static_cast<std::int64_t>(directory_at)))
      fail("cannot read its directory");
    std::size_t p = 0;
    for (std::uint64_t i = 0; i < count; ++i)
      p = read_entry(directory, p);
  }

  void read_zip64_end(std::int64_t end_at, std::uint64_t& count, std::uint64_t& directory_size,
                      std::uint64_t& directory_at) {
    unsigned char locator[20];
    if (end_at < 20 || !read(locator, 20, end_at - 20) || little(locator, 4) != 0x07064b50)
      fail("a zip64 archive without its zip64 end locator");
    unsigned char record[56];
    const auto record_at = static_cast<std::int64_t>(little(locator + 8, 8));
    if (!read(record, 56, record_at) || little(record, 4) != 0x06064b50)
      fail("no zip64 end-of-directory record at byte " + std::to_string(record_at));
    count = little(record + 32, 8);
    directory_size = little(record + 40, 8);
    directory_at = little(record + 48, 8);
  }

  /// The directory entry at byte `p` of `directory`; returns where the next one starts.
  std::size_t read_entry(const std::vector<unsigned char>& directory, std::size_t p) {
    if (p + 46 > directory.size() || little(directory.data() + p, 4) != 0x02014b50)
      fail("a damaged directory: no entry header at its byte " + std::to_string(p));
    const auto* h = directory.data() + p;
    zip_entry e;
    e.flags = static_cast<std::uint16_t>(little(h + 8, 2));
    e.method = static_cast<int>(little(h + 10, 2));
    e.crc = static_cast<std::uint32_t>(little(h + 16, 4));
    std::uint64_t compressed = little(h + 20, 4), size = little(h + 24, 4);
    std::uint64_t local = little(h + 42, 4);
    const auto name_length = little(h + 28, 2), extra_length = little(h + 30, 2),
               comment_length = little(h + 32, 2);
    const auto next = p + 46 + name_length + extra_length + comment_length;
    if (next > directory.size())
      fail("a damaged directory: an entry runs past its end");
    e.name.assign(reinterpret_cast<const char*>(h + 46), name_length);
    // Zip64: the sizes and offset that did not fit are in extra field 0x0001, in this order.
    for (std::size_t x = 0; x + 4 <= extra_length;) {
      const auto* field = h + 46 + name_length + x;
      const auto id = little(field, 2), length = little(field + 2, 2);
      if (x + 4 + length > extra_length)
        break;
      if (id == 0x0001) {
        std::size_t q = 4;
        for (auto* value : {&size, &compressed, &local})
          if (*value == 0xffffffff && q + 8 <= 4 + length) {
            *value = little(field + q, 8);
            q += 8;
          }
      }
      x += 4 + length;
    }
    if (size > static_cast<std::uint64_t>(limits::max_data_elements) ||
        compressed > static_cast<std::uint64_t>(size_) || local > static_cast<std::uint64_t>(size_))
      fail("entry " + quote_user_path(e.name) + ": sizes past the archive or the limits (" +
           std::to_string(size) + " bytes, " + std::to_string(compressed) + " compressed)");
    e.size = static_cast<std::int64_t>(size);
    e.compressed = static_cast<std::int64_t>(compressed);
    e.local_header = static_cast<std::int64_t>(local);
    entries_.push_back(std::move(e));
    return next;
  }

  std::string path_;
  unique_fd file_;
  std::int64_t size_ = 0;
  std::vector<zip_entry> entries_;
};

/// Inflates the deflated `entry` into a new scratch file, checking its size and CRC-32;
/// returns the file's path.
std::string inflate_entry(const zip_reader& zip, const zip_entry& entry, std::int64_t offset) {
  const auto out =
      make_scratch_file(quote_user_path(zip.path()) + " entry " + quote_user_path(entry.name));
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK)  // raw deflate, as zip stores it
    zip.fail("zlib cannot start");
  std::vector<unsigned char> in(1 << 16), buffer(1 << 18);
  std::int64_t read = 0, written = 0;
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0, nullptr, 0));
  int status = Z_OK;
  std::string error;
  while (status != Z_STREAM_END && error.empty()) {
    if (z.avail_in == 0) {
      const auto want = std::min<std::int64_t>(static_cast<std::int64_t>(in.size()), entry.compressed - read);
      if (want <= 0 || !zip.read(in.data(), static_cast<std::size_t>(want), offset + read)) {
        error = "its compressed data ends early";
        break;
      }
      read += want;
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(want);
    }
    z.next_out = buffer.data();
    z.avail_out = static_cast<uInt>(buffer.size());
    status = ::inflate(&z, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END) {
      error = "its compressed data is corrupt (zlib: " + std::string(z.msg ? z.msg : "error") + ")";
      break;
    }
    const auto got = static_cast<std::int64_t>(buffer.size() - z.avail_out);
    if (written + got > entry.size) {  // never more than the directory says: no zip bombs
      error = "it inflates past the " + std::to_string(entry.size) + " bytes the directory states";
      break;
    }
    crc = static_cast<std::uint32_t>(::crc32(crc, buffer.data(), static_cast<uInt>(got)));
    if (!write_all(out.fd, buffer.data(), static_cast<std::size_t>(got))) {
      error = "cannot write its inflated bytes to a temporary file: " + std::string(std::strerror(errno));
      break;
    }
    written += got;
  }
  inflateEnd(&z);
  if (error.empty() && written != entry.size)
    error = "it inflates to " + std::to_string(written) + " bytes, and the directory states " +
            std::to_string(entry.size);
  if (error.empty() && crc != entry.crc)
    error = "its CRC-32 is not the one the directory states (a damaged archive)";
  if (!error.empty())
    zip.fail("entry " + quote_user_path(entry.name) + ": " + error);
  return out.path;
}

}  // namespace

std::vector<std::string> npz_names(const std::string& path) {
  std::vector<std::string> names;
  const zip_reader zip(path);
  for (const auto& entry : zip.entries()) {
    const auto& n = entry.name;
    names.push_back(n.size() > 4 && n.compare(n.size() - 4, 4, ".npy") == 0 ? n.substr(0, n.size() - 4) : n);
  }
  return names;
}

npy_array npz_array(const std::string& path, const std::string& name) {
  const zip_reader zip(path);
  const auto& entries = zip.entries();
  const auto found = std::find_if(entries.begin(), entries.end(),
                                  [&](const zip_entry& e) { return e.name == name + ".npy"; });
  if (found == entries.end()) {
    std::string names;
    for (const auto& n : npz_names(path))
      names += (names.empty() ? "" : ", ") + quote_user_path(n);
    zip.fail("no array " + quote_user_path(name) + " (entry " + quote_user_path(name + ".npy") +
             "); it holds " + (names.empty() ? std::string("none") : names));
  }
  const auto& entry = *found;
  const auto label = quote_user_path(path) + " entry " + quote_user_path(entry.name);
  if (entry.flags & 1)
    zip.fail("entry " + quote_user_path(entry.name) + " is encrypted; troupe reads plain archives");
  const auto offset = zip.data_offset(entry);
  if (entry.method == 0)
    return npy_array{path, read_npy_header(path, offset, entry.size), label, offset};
  if (entry.method != 8)
    zip.fail("entry " + quote_user_path(entry.name) + " is compressed with method " +
             std::to_string(entry.method) +
             "; troupe reads stored entries (np.savez) and "
             "deflate (np.savez_compressed)");
  const auto inflated = inflate_entry(zip, entry, offset);
  auto header = read_npy_header(inflated, 0, entry.size);
  return npy_array{inflated, std::move(header), label + " (inflated)", 0};
}

}  // namespace troupe
