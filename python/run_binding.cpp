// run_binding.cpp: a training run on a thread of its own, watched from Python.
//
// The session runs on a C++ thread (run_session, actors/session/session.hpp) that never
// holds the GIL; the metrics lines it makes are queued for run.metrics(), and waiting for
// them or for the end releases the GIL, so Python threads (and a DataLoader feeding the
// run) go on meanwhile. stop() sets the session's own stop request: the clean stop SIGINT
// asks of `troupe run`, for this run only. The Python side (python/troupe/__init__.py) turns
// Ctrl-C into stop() and the outcome into a result or an exception.
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "actors/session/session.hpp"
#include "python/bindings.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/restore.hpp"

namespace troupe::python {

namespace {

/// Records a run keeps for run.metrics() until they are read (~150 bytes each).
constexpr std::size_t kept_records = std::size_t{1} << 20;

class run_handle {
 public:
  run_handle(run_config config, session_options options)
      : stop_(std::make_shared<std::atomic<int>>(0)) {
    options.stop_request = stop_;
    options.on_record = [this](const std::string& line) {
      std::lock_guard<std::mutex> guard{mutex_};
      records_.push_back(line);
      if (records_.size() > kept_records)  // nobody reads them: the newest are kept
        records_.pop_front();
      changed_.notify_all();
    };
    thread_ = std::thread([this, config = std::move(config), options = std::move(options)] {
      session_result result;
      std::exception_ptr error;
      try {
        result = run_session(config, options);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> guard{mutex_};
      result_ = std::move(result);
      error_ = error;
      finished_ = true;
      changed_.notify_all();
    });
  }

  ~run_handle() {
    stop_->store(SIGINT);
    if (thread_.joinable()) {
      py::gil_scoped_release released;  // the run may need the GIL to finish (an iterable)
      thread_.join();
    }
  }

  void stop() { stop_->store(SIGINT); }

  /// Waits up to `seconds` for the end; whether it came.
  bool wait_for(double seconds) {
    py::gil_scoped_release released;
    std::unique_lock<std::mutex> lock{mutex_};
    changed_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return finished_; });
    if (finished_ && thread_.joinable()) {
      lock.unlock();
      thread_.join();
    }
    return finished_;
  }

  /// The next metrics line, waiting up to `seconds`: the line, or None (none yet, or the
  /// run is over: finished() says which).
  std::optional<std::string> next_record(double seconds) {
    py::gil_scoped_release released;
    std::unique_lock<std::mutex> lock{mutex_};
    changed_.wait_for(lock, std::chrono::duration<double>(seconds),
                      [this] { return !records_.empty() || finished_; });
    if (records_.empty())
      return std::nullopt;
    auto line = std::move(records_.front());
    records_.pop_front();
    return line;
  }

  bool finished() {
    std::lock_guard<std::mutex> guard{mutex_};
    return finished_ && records_.empty();
  }

  /// (exit code, failure message); raises what the session threw before it ran.
  std::pair<int, std::string> outcome() {
    std::lock_guard<std::mutex> guard{mutex_};
    if (!finished_)
      throw user_error("the run has not finished: wait() for it first");
    if (error_)
      std::rethrow_exception(error_);
    return {exit_status(result_.outcome.exit_code), result_.outcome.failure};
  }

  std::string trace_written() {
    std::lock_guard<std::mutex> guard{mutex_};
    return result_.trace_written;
  }

  /// {"0.weight": array, ...}: the final parameters, named as torch's state_dict.
  py::dict parameters() {
    if (const auto [code, failure] = outcome(); code != 0)
      throw user_error("the run ended before its last step (" + failure +
                       "): it has no final parameters; troupe.load(CHECKPOINT) reads the "
                       "checkpoint it took");
    py::dict out;
    const auto& values = result_.parameters;
    for (const auto& layer : result_.model) {
      const auto index = static_cast<std::size_t>(layer.index);
      if (index >= values.size())
        continue;
      for (std::size_t p = 0; p < layer.params.size() && p < values[index].size(); ++p) {
        const auto& spec = layer.params[p];
        py::array_t<float> array(std::vector<py::ssize_t>(spec.shape.begin(), spec.shape.end()));
        std::copy(values[index][p].begin(), values[index][p].end(), array.mutable_data());
        out[py::str(parameter_name(layer.index, spec.name))] = array;
      }
    }
    return out;
  }

 private:
  std::shared_ptr<std::atomic<int>> stop_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> records_;
  bool finished_ = false;
  session_result result_;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace

void bind_run(py::module_& m) {
  py::class_<run_handle>(m, "RunHandle")
      .def("stop", &run_handle::stop)
      .def("wait_for", &run_handle::wait_for)
      .def("next_record", &run_handle::next_record)
      .def("finished", &run_handle::finished)
      .def("outcome", &run_handle::outcome)
      .def("trace_written", &run_handle::trace_written)
      .def("parameters", &run_handle::parameters);
  m.def(
      "start_run",
      [](const config_source& source, const py::object& data, const py::dict& settings) {
        auto config = source.parse();
        give_data(config, data);
        session_options options;
        options.quiet = !settings["progress"].cast<bool>();
        options.keep_parameters = true;
        options.sample_length = 0;
        auto text = [&](const char* key) -> std::optional<std::string> {
          if (settings[key].is_none())
            return std::nullopt;
          return settings[key].cast<std::string>();
        };
        options.metrics_path = text("metrics");
        options.trace_path = text("trace");
        if (!settings["watchdog"].is_none()) {
          options.watchdog = settings["watchdog"].cast<double>();
          if (!(options.watchdog >= 0 && options.watchdog < limits::max_seconds))
            throw user_error("run(watchdog=...) must be in [0, " +
                             std::to_string(limits::max_seconds) + ") seconds (0: off), got " +
                             std::to_string(options.watchdog));
        }
        options.resume = text("resume").value_or("");
        return std::make_unique<run_handle>(std::move(config), std::move(options));
      },
      py::arg("config"), py::arg("data"), py::arg("settings"));
  py::class_<config_source>(m, "ConfigSource")
      .def(py::init<std::string, std::string, std::string, std::vector<std::string>>());
}

}  // namespace troupe::python
