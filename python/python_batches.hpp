// python_batches.hpp: a Python iterable's batches as the rows of a training split
// (troupe.data.iterable; Note [batches from Python] in python_batches.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/data/dataset.hpp"

namespace troupe::python {

namespace py = pybind11;

class python_batches final : public feature_rows {
 public:
  /// `fn(epoch)` gives an epoch's iterable; `next_batch(iterator, epoch, index)` its next
  /// batch as (float32 (B, D), int32 (B, T)) arrays (python/troupe/data.py). Labels are
  /// checked to lie in [0, classes). Made with the GIL held.
  python_batches(py::object fn, py::object next_batch, std::int64_t batch, std::int64_t features,
                 std::int64_t positions, std::int64_t classes);
  ~python_batches() override;

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override;
  void gather_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
                       std::int64_t epoch) const override;
  bool holds_labels() const override { return true; }
  void gather_labels(const std::int64_t* picked, std::size_t first, std::size_t last,
                     std::int32_t* out) const override;
  void gather_labels_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last,
                              std::int32_t* out, std::int64_t epoch) const override;

 private:
  struct fetched {
    std::vector<float> x;         // (B, D)
    std::vector<std::int32_t> y;  // (B, T)
  };
  using key = std::pair<std::int64_t, std::int64_t>;  // (epoch, batch index)

  template <class Each>
  void each_row(const std::int64_t* picked, std::size_t first, std::size_t last, std::int64_t epoch,
                Each each) const;
  std::shared_ptr<const fetched> batch_of(std::int64_t epoch, std::int64_t index) const;
  bool failed(key wanted, std::string& failure) const;
  void fetch_ahead() const;
  bool fetch_next(std::unique_lock<std::mutex>& lock) const;
  void check(const fetched& b, std::int64_t epoch, std::int64_t index) const;

  mutable py::object fn_, next_batch_;
  const std::int64_t batch_, features_, positions_, classes_;

  mutable std::mutex mutex_;  // guards everything below
  mutable std::condition_variable wanted_, arrived_;
  mutable std::map<key, std::shared_ptr<const fetched>> cache_;
  mutable std::map<key, std::string> failed_;  // why a batch could not be fetched
  mutable key furthest_{-1, -1};               // the furthest batch asked for
  mutable key rewind_{-1, -1};                 // a batch behind the fetcher, not kept
  mutable py::object iterator_;                // used by the fetcher only (with the GIL)
  mutable key next_{-1, 0};                    // the batch the iterator gives next
  mutable bool stopping_ = false;
  mutable std::thread fetcher_;  // started by the first batch asked for
};

}  // namespace troupe::python
