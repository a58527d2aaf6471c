// metrics_writer.hpp: the metrics file of a run, one JSON object per line (JSONL).
//
// Lines: one per training step {"step", "epoch", "loss", METRIC..., "lr", "samples_per_s",
// "train_s" (seconds of training so far, evaluations left out)},
// one per evaluation {"epoch", "step", "test_loss", "test_" METRIC...}, one per complete
// checkpoint {"event": "checkpoint", "steps", "path"}, and a last one {"event":
// "done"|"failed"|"interrupted", "steps", "train_s", "samples_per_s", "devices",
// ["test_" METRIC...], ["error"]}. The metrics are the loss's (troupe/loss.hpp): "accuracy"
// for a classifier, "rmse" and "mae" for a regression. Each line goes to the file as it is made, in
// one write() (Note [whole lines]), so a program that follows the file never reads half a
// line and a killed run loses nothing it had reported. Every write is checked: after the
// first failure good() is false and error() names the file and the OS error. It does not
// decide what goes into a line beyond its keys, nor what a failure means for the run: the
// trainer passes the values and ends the run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe {

/// A loss's metrics, (name, value) in its spec's order: {"accuracy", 0.91}.
using metric_values = std::vector<std::pair<std::string, double>>;

class metrics_writer {
 public:
  metrics_writer() = default;
  ~metrics_writer();
  metrics_writer(const metrics_writer&) = delete;
  metrics_writer& operator=(const metrics_writer&) = delete;

  /// Creates (truncates) `path`, or appends to it (a resumed run); false (and error()
  /// says why) if it cannot be opened for writing.
  bool open(const std::string& path, bool append = false);
  /// Also hands each line (without its newline) to `listener` as it is made, file or no
  /// file (the Python module's run.metrics()); called on the trainer's thread.
  void listen(std::function<void(const std::string&)> listener) { listener_ = std::move(listener); }
  /// Whether lines go anywhere: a file, or a listener.
  bool is_open() const { return fd_ >= 0 || listener_ != nullptr; }

  /// `net_bytes`: the tensor bytes the run's nodes have sent each other so far (written
  /// when >= 0: runs over several nodes).
  void step(std::int64_t step, std::int64_t epoch, double loss, const metric_values& metrics,
            double lr, double samples_per_second, double train_seconds,
            std::int64_t net_bytes = -1);
  /// `split`: which split was evaluated; written as "split" unless it is "test".
  void evaluation(std::int64_t epoch, std::int64_t steps_done, double test_loss,
                  const metric_values& test_metrics, const std::string& split = "test");
  /// A checkpoint of the parameters after `steps` steps is complete in `directory`.
  void checkpoint(std::int64_t steps, const std::string& directory);
  /// The last line, `event` "done", "failed" or "interrupted"; then closes the file.
  void end(const char* event, std::int64_t steps, double train_seconds, double samples_per_second,
           const nlohmann::json& devices, const metric_values& test_metrics,
           const std::string& error);

  /// False once opening, a write or the close has failed; the lines after it are dropped.
  bool good() const { return error_.empty(); }
  /// Why it is not good: "writing the metrics file 'PATH' failed: No space left on device
  /// (errno 28); ..."; empty while good.
  const std::string& error() const { return error_; }
  /// Closes the file (checking close(), which can report a deferred write error).
  void close();

 private:
  void write_line(const nlohmann::json& record);
  void fail(const std::string& what, int error);

  int fd_ = -1;
  std::function<void(const std::string&)> listener_;
  std::string path_;
  std::string error_;
  off_t whole_ = 0;  // bytes of the file that are whole lines
};

}  // namespace troupe
