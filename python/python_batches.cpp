// python_batches.cpp: a Python iterable's batches as the rows of a training split.
//
// Note [batches from Python]
// Row i of an epoch's training split is row i % B of the iterable's batch i / B, the loader
// reading an epoch's rows in order (shuffle is off: the iterable shuffles, as a DataLoader
// does). Batches are asked for in step order by several threads (each replica's device
// gathers its rows, the loader its labels), a few steps ahead (the prefetch). A thread of
// the source's own, the fetcher, runs `ahead` batches past the furthest one asked for:
// it calls the iterator (with the GIL) while the devices compute, so a batch is usually
// there when a device asks, and asking never waits for Python then. Each batch is kept
// until `kept` newer ones are, so a thread that comes late still finds its batch. One asked
// for again after that (a resumed run skipping to its step) starts the epoch's iterator
// again: fn(epoch) must give the same batches each time it is called for an epoch. A batch
// that fails is the failure of whoever asks for it; one fetched ahead and never asked for
// (past the run's last step) fails nothing.
#include "python/python_batches.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <pybind11/numpy.h>

#include "troupe/error.hpp"

namespace troupe::python {

namespace {

constexpr std::size_t kept = 64;   // batches kept after they arrive
constexpr std::int64_t ahead = 4;  // batches the fetcher runs past the furthest asked for

/// A NumPy array's values, copied (python/troupe/data.py made them C-ordered and typed).
template <class T>
std::vector<T> values_of(const py::handle& object) {
  const auto array = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(object);
  if (!array)
    throw py::error_already_set();
  return std::vector<T>(array.data(), array.data() + array.size());
}

std::string where(std::int64_t epoch, std::int64_t index) {
  return "troupe.data.iterable: epoch " + std::to_string(epoch) + ", batch " +
         std::to_string(index) + ": ";
}

}  // namespace

python_batches::python_batches(py::object fn, py::object next_batch, std::int64_t batch,
                               std::int64_t features, std::int64_t positions, std::int64_t classes)
    : fn_(std::move(fn)),
      next_batch_(std::move(next_batch)),
      batch_(batch),
      features_(features),
      positions_(positions),
      classes_(classes) {}

python_batches::~python_batches() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stopping_ = true;
  }
  wanted_.notify_all();
  if (fetcher_.joinable()) {
    // The fetcher may be waiting for the GIL: let it have it (where this thread holds it).
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release released;
      fetcher_.join();
    } else {
      fetcher_.join();
    }
  }
  if (!Py_IsInitialized())
    return;
  py::gil_scoped_acquire gil;
  iterator_ = py::object();
  fn_ = py::object();
  next_batch_ = py::object();
}

void python_batches::gather(const std::int64_t* picked, std::size_t first, std::size_t last,
                            float* out) const {
  gather_in_epoch(picked, first, last, out, 0);
}

void python_batches::gather_in_epoch(const std::int64_t* picked, std::size_t first,
                                     std::size_t last, float* out, std::int64_t epoch) const {
  each_row(picked, first, last, epoch, [&](const fetched& b, std::int64_t row, std::size_t i) {
    std::memcpy(out + (i - first) * features_, b.x.data() + row * features_,
                static_cast<std::size_t>(features_) * sizeof(float));
  });
}

void python_batches::gather_labels(const std::int64_t* picked, std::size_t first, std::size_t last,
                                   std::int32_t* out) const {
  gather_labels_in_epoch(picked, first, last, out, 0);
}

void python_batches::gather_labels_in_epoch(const std::int64_t* picked, std::size_t first,
                                            std::size_t last, std::int32_t* out,
                                            std::int64_t epoch) const {
  each_row(picked, first, last, epoch, [&](const fetched& b, std::int64_t row, std::size_t i) {
    std::copy_n(b.y.data() + row * positions_, positions_, out + (i - first) * positions_);
  });
}

template <class Each>
void python_batches::each_row(const std::int64_t* picked, std::size_t first, std::size_t last,
                              std::int64_t epoch, Each each) const {
  std::shared_ptr<const fetched> b;
  std::int64_t at = -1;
  for (std::size_t i = first; i < last; ++i) {
    const auto index = picked[i] / batch_;
    if (index != at) {
      b = batch_of(epoch, index);
      at = index;
    }
    each(*b, picked[i] % batch_, i);
  }
}

std::shared_ptr<const python_batches::fetched> python_batches::batch_of(std::int64_t epoch,
                                                                        std::int64_t index) const {
  const key wanted{epoch, index};
  // A thread that holds the GIL (a tool called from Python) lets the fetcher have it while
  // it waits, and never holds the lock while taking the GIL back.
  std::optional<py::gil_scoped_release> released;
  if (Py_IsInitialized() && PyGILState_Check())
    released.emplace();
  std::unique_lock<std::mutex> lock{mutex_};
  if (wanted > furthest_) {
    furthest_ = wanted;
    wanted_.notify_all();
  }
  auto found = cache_.find(wanted);
  if (found != cache_.end())
    return found->second;
  if (!fetcher_.joinable())
    fetcher_ = std::thread([this] { fetch_ahead(); });
  if (wanted < next_ && !failed_.count(wanted)) {  // behind the iterator and not kept
    rewind_ = wanted;
    wanted_.notify_all();
  }
  std::string failure;
  arrived_.wait(lock, [&] { return cache_.count(wanted) || failed(wanted, failure); });
  if (!failure.empty())
    throw data_error(failure);
  return cache_.at(wanted);
}

// Whether batch `wanted` cannot come: its fetch failed, or the epoch's iterator failed at a
// batch before it (and stays there); `failure` says why.
bool python_batches::failed(key wanted, std::string& failure) const {
  if (const auto it = failed_.find(wanted); it != failed_.end()) {
    failure = it->second;
    return true;
  }
  const auto stuck = failed_.find(next_);
  if (stuck == failed_.end() || next_.first != wanted.first || !(next_ < wanted))
    return false;
  failure = where(wanted.first, wanted.second) + "not fetched: the epoch's iterable failed at " +
            "batch " + std::to_string(next_.second) + " first (" + stuck->second + ")";
  return true;
}

// The fetcher: fetches until `ahead` past the furthest batch asked for (or a rewound one),
// then waits to be asked for more; gone when the source is.
void python_batches::fetch_ahead() const {
  // Started by whichever thread first asked, maybe a device's, bound to its core: the
  // fetcher may run on any core of the process (the main thread's), beside the devices.
  cpu_set_t cores;
  if (::sched_getaffinity(::getpid(), sizeof cores, &cores) == 0)
    ::pthread_setaffinity_np(::pthread_self(), sizeof cores, &cores);
  ::pthread_setname_np(::pthread_self(), "troupe python");
  std::unique_lock<std::mutex> lock{mutex_};
  while (!stopping_) {
    const bool behind = rewind_.first >= 0;
    const key target = behind ? rewind_ : key{furthest_.first, furthest_.second + ahead};
    // The iterator failed here: nothing more from it until asked for another epoch.
    const bool blocked = !behind && next_.first == target.first && failed_.count(next_);
    if (blocked || (!behind && next_ > target)) {
      wanted_.wait(lock);
      continue;
    }
    fetch_next(lock);  // a failure leaves the iterator where it failed: blocked above
  }
}

// Fetches the iterator's next batch (a new epoch's iterator first where the target is in
// another epoch or behind), with the lock released while Python runs. False once the epoch's
// iterable is exhausted or failed: nothing more to fetch until asked.
bool python_batches::fetch_next(std::unique_lock<std::mutex>& lock) const {
  const bool behind = rewind_.first >= 0;
  const key target = behind ? rewind_ : key{furthest_.first, furthest_.second + ahead};
  const bool restart = behind ? !(next_.first == target.first && next_.second <= target.second)
                              : next_.first != target.first;
  const key at = restart ? key{target.first, 0} : next_;
  if (restart)
    next_ = at;
  lock.unlock();
  std::shared_ptr<fetched> b;
  std::string failure;
  {
    py::gil_scoped_acquire gil;
    try {
      if (restart)
        iterator_ = py::iter(fn_(at.first));
      auto got = next_batch_(iterator_, at.first, at.second).cast<py::tuple>();
      b = std::make_shared<fetched>();
      b->x = values_of<float>(got[0]);
      b->y = values_of<std::int32_t>(got[1]);
      check(*b, at.first, at.second);
    } catch (py::error_already_set& e) {
      failure = where(at.first, at.second) + e.what();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  lock.lock();
  if (!failure.empty()) {
    failed_[at] = failure;
    if (rewind_.first == at.first && !(rewind_ < at))  // it cannot be reached now
      rewind_ = {-1, -1};
    arrived_.notify_all();
    return false;
  }
  cache_[at] = std::move(b);
  while (cache_.size() > kept)
    cache_.erase(cache_.begin());
  next_ = {at.first, at.second + 1};
  if (rewind_.first >= 0 && rewind_ < next_)
    rewind_ = {-1, -1};
  arrived_.notify_all();
  return true;
}

void python_batches::check(const fetched& b, std::int64_t epoch, std::int64_t index) const {
  if (static_cast<std::int64_t>(b.x.size()) != batch_ * features_ ||
      static_cast<std::int64_t>(b.y.size()) != batch_ * positions_)
    throw data_error(where(epoch, index) + "expected " + std::to_string(batch_) + " rows of " +
                     std::to_string(features_) + " features and " + std::to_string(positions_) +
                     " label(s), as the first batch had, got " + std::to_string(b.x.size()) +
                     " feature and " + std::to_string(b.y.size()) +
                     " label values (every batch must be whole: DataLoader(drop_last=True))");
  for (std::size_t i = 0; i < b.y.size(); ++i)
    if (b.y[i] < 0 || b.y[i] >= classes_)
      throw data_error(where(epoch, index) + "label " + std::to_string(i) + " is " +
                       std::to_string(b.y[i]) + "; the classes are 0 .. " +
                       std::to_string(classes_ - 1));
}

}  // namespace troupe::python
