// metrics_writer.cpp: JSON lines, each written whole as it is made.
//
// Note [whole lines]
// A buffered std::ofstream hands its buffer to the file whenever it fills, which is
// usually in the middle of a line: a program tailing the metrics file reads a line cut in
// two, a killed run leaves its last lines in a buffer that is never written, and a write
// that fails (a full disk) is only noticed, if at all, when the stream is closed. Here
// each line is one write() of the whole line, made when the line is: a kill can only lose
// the line being made, and each write's result is seen at once. That is one system call
// per step (a few microseconds, against steps of a millisecond or more). A write that
// writes only part of a line (the disk filled up during it) is undone by truncating the
// file back to its last whole line, where the file allows it (a regular file does,
// /dev/full does not), so that even a full disk never leaves half a record.
#include "actors/trainer/metrics_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"

namespace troupe {

metrics_writer::~metrics_writer() { close(); }

bool metrics_writer::open(const std::string& path, bool append) {
  close();
  path_ = path;
  error_.clear();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    error_ = "cannot write the metrics file " + quote_user_path(path) + ": " + describe_errno(errno);
    return false;
  }
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  whole_ = end > 0 ? end : 0;  // a device (/dev/null, /dev/full) has no size
  return true;
}

void metrics_writer::fail(const std::string& what, int error) {
  if (error_.empty())
    error_ = what + " the metrics file " + quote_user_path(path_) + " failed: " + describe_errno(error);
}

void metrics_writer::write_line(const nlohmann::json& record) {
  std::string line = record.dump();
  if (listener_)
    listener_(line);
  if (fd_ < 0 || !good())
    return;
  line += '\n';
  // One write() of the whole line; write_all only loops when the kernel wrote less.
  if (const int error = write_all(fd_, line.data(), line.size())) {
    fail("writing", error);
    if (::ftruncate(fd_, whole_) != 0) {
      // Not a regular file (or not ours to cut): what it holds past whole_ stays.
    }
    return;
  }
  whole_ += static_cast<off_t>(line.size());
}

void metrics_writer::close() {
  if (fd_ < 0)
    return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)  // never retried: on Linux the descriptor is gone anyway
    fail("closing", errno);
}

void metrics_writer::step(std::int64_t step, std::int64_t epoch, double loss,
                          const metric_values& metrics, double lr, double samples_per_second,
                          double train_seconds, std::int64_t net_bytes) {
  nlohmann::json record = {{"step", step}, {"epoch", epoch}, {"loss", loss}};
  for (const auto& [name, value] : metrics)
    record[name] = value;
  record["lr"] = lr;
  record["samples_per_s"] = samples_per_second;
  record["train_s"] = train_seconds;
  if (net_bytes >= 0)
    record["net_bytes"] = net_bytes;
  write_line(record);
}

void metrics_writer::evaluation(std::int64_t epoch, std::int64_t steps_done, double test_loss,
                                const metric_values& test_metrics, const std::string& split) {
  nlohmann::json record = {{"epoch", epoch}, {"step", steps_done}, {"test_loss", test_loss}};
  if (split != "test")
    record["split"] = split;
  for (const auto& [name, value] : test_metrics)
    record["test_" + name] = value;
  write_line(record);
}

void metrics_writer::checkpoint(std::int64_t steps, const std::string& directory) {
  write_line({{"event", "checkpoint"}, {"steps", steps}, {"path", directory}});
}

void metrics_writer::end(const char* event, std::int64_t steps, double train_seconds,
                         double samples_per_second, const nlohmann::json& devices,
                         const metric_values& test_metrics, const std::string& error) {
  nlohmann::json record = {
      {"event", event},
      {"steps", steps},
      {"train_s", train_seconds},
      {"samples_per_s", samples_per_second},
      {"devices", devices},
  };
  for (const auto& [name, value] : test_metrics)
    record["test_" + name] = value;
  if (!error.empty())
    record["error"] = error;
  write_line(record);
  close();
}

}  // namespace troupe
