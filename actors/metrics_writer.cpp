// metrics_writer.cpp: JSON lines, written whole.
//
// Note [whole lines]
// A buffered std::ofstream hands its buffer to the file whenever it fills, which is
// usually in the middle of a line, and a program tailing the metrics file then reads a
// line cut in two. Here lines collect in a string and go to the file in one write() of
// whole lines only (the loop continues a short write, which a regular file only does when
// the disk is full). As many system calls as before: one per ~8 KiB, plus one per
// evaluation and at the end, so the file is at most a second behind the run.
#include "actors/metrics_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace troupe {

metrics_writer::metrics_writer(std::size_t flush_bytes, std::chrono::milliseconds flush_interval)
    : flush_bytes_(flush_bytes), flush_interval_(flush_interval) {}

metrics_writer::~metrics_writer() { close(); }

bool metrics_writer::open(const std::string& path, bool append) {
  close();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0666);
  path_ = path;
  good_ = fd_ >= 0;
  last_flush_ = std::chrono::steady_clock::now();
  return good_;
}

void metrics_writer::add(const nlohmann::json& record) {
  if (fd_ < 0)
    return;
  pending_ += record.dump();
  pending_ += '\n';
  auto now = std::chrono::steady_clock::now();
  if (pending_.size() >= flush_bytes_ || now - last_flush_ >= flush_interval_)
    flush();
}

bool metrics_writer::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  std::size_t written = 0;
  while (fd_ >= 0 && good_ && written < pending_.size()) {
    auto n = ::write(fd_, pending_.data() + written, pending_.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      good_ = false;
    else
      written += static_cast<std::size_t>(n);
  }
  pending_.clear();
  return good_;
}

void metrics_writer::close() {
  if (fd_ < 0)
    return;
  flush();
  ::close(fd_);
  fd_ = -1;
}

void metrics_writer::step(std::int64_t step, std::int64_t epoch, double loss, double accuracy,
                          double lr, double samples_per_second) {
  add({
      {"step", step},
      {"epoch", epoch},
      {"loss", loss},
      {"accuracy", accuracy},
      {"lr", lr},
      {"samples_per_s", samples_per_second},
  });
}

void metrics_writer::evaluation(std::int64_t epoch, std::int64_t steps_done, double test_loss,
                                double test_accuracy) {
  add({
      {"epoch", epoch},
      {"step", steps_done},
      {"test_loss", test_loss},
      {"test_accuracy", test_accuracy},
  });
  flush();
}

void metrics_writer::checkpoint(std::int64_t steps, const std::string& directory) {
  add({{"event", "checkpoint"}, {"steps", steps}, {"path", directory}});
}

void metrics_writer::end(const char* event, std::int64_t steps, double train_seconds,
                         double samples_per_second, const nlohmann::json& devices,
                         double test_accuracy, const std::string& error) {
  nlohmann::json record = {
      {"event", event},
      {"steps", steps},
      {"train_seconds", train_seconds},
      {"samples_per_s", samples_per_second},
      {"devices", devices},
  };
  if (test_accuracy >= 0)
    record["test_accuracy"] = test_accuracy;
  if (!error.empty())
    record["error"] = error;
  add(record);
  close();
}

}  // namespace troupe
