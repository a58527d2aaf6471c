// metrics_writer.hpp: the metrics file of a run, one JSON object per line (JSONL).
//
// Lines: one per training step {"step", "epoch", "loss", "accuracy", "lr",
// "samples_per_s"}, one per evaluation {"epoch", "step", "test_loss", "test_accuracy"},
// and a last one {"event": "done"|"failed", "steps", "train_seconds", "samples_per_s",
// "devices", ["test_accuracy"], ["error"]}. Lines are written whole (Note [whole lines]),
// so a program that follows the file while the run trains never reads half a line. It
// does not decide what goes into a line beyond its keys; the trainer passes the values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe {

class metrics_writer {
 public:
  /// Pending lines are handed to the file once they reach `flush_bytes`, or once
  /// `flush_interval` has passed since the last write, and always at flush().
  explicit metrics_writer(std::size_t flush_bytes = 8192,
                          std::chrono::milliseconds flush_interval = std::chrono::seconds(1));
  ~metrics_writer();
  metrics_writer(const metrics_writer&) = delete;
  metrics_writer& operator=(const metrics_writer&) = delete;

  /// Creates (truncates) `path`, or appends to it (a resumed run); false if it cannot be
  /// written.
  bool open(const std::string& path, bool append = false);
  bool is_open() const { return fd_ >= 0; }

  void step(std::int64_t step, std::int64_t epoch, double loss, double accuracy, double lr,
            double samples_per_second);
  void evaluation(std::int64_t epoch, std::int64_t steps_done, double test_loss,
                  double test_accuracy);
  /// A checkpoint of the parameters after `steps` steps is complete in `directory`.
  void checkpoint(std::int64_t steps, const std::string& directory);
  /// The last line, `event` "done", "failed" or "interrupted"; flushes and closes the file.
  void end(const char* event, std::int64_t steps, double train_seconds, double samples_per_second,
           const nlohmann::json& devices, double test_accuracy, const std::string& error);

  /// Hands every pending line to the file. False if writing failed (now or before).
  bool flush();
  /// False once a write to the file has failed.
  bool good() const { return good_; }
  void close();

 private:
  void add(const nlohmann::json& record);

  int fd_ = -1;
  bool good_ = true;
  std::string path_;
  std::string pending_;  // whole lines not yet written
  std::size_t flush_bytes_;
  std::chrono::milliseconds flush_interval_;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace troupe
