// data_binding.cpp: data handed over from Python (troupe.data.arrays and troupe.data.iterable,
// python/troupe/data.py) as given sources (runtime/data/given.hpp).
//
// Arrays are read in place: their memory is held (a reference to the NumPy array, dropped
// with the GIL) and read as a .npy file's would be, through the same checks, conversions and
// normalisation. An iterable's batches are fetched by whichever thread gathers a batch (a
// device's, or the loader's for labels), under the GIL, in the iterable's order; each batch
// is kept until the steps after it have taken it (Note [batches from Python]).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/bindings.hpp"
#include "runtime/data/given.hpp"
#include "runtime/data/npy.hpp"
#include "troupe/error.hpp"

namespace troupe::python {

namespace {

/// What a Python data object hands the runtime: the source, and what it asks of the run.
struct given_data {
  std::shared_ptr<const given_source> source;
  bool ordered = false;         // the batches' own order: no shuffling
  bool has_test = false;        // a test split to evaluate on
  std::int64_t batch_size = 0;  // > 0: the global batch (an iterable's batches)
};

/// A NumPy array's bytes, held until the runtime is done with them.
std::shared_ptr<const unsigned char> hold(const py::array& array) {
  const auto* data = static_cast<const unsigned char*>(array.data());
  py::object keep = array;
  return std::shared_ptr<const unsigned char>(data, [keep](const unsigned char*) mutable {
    if (!Py_IsInitialized()) {  // the interpreter is gone: nothing to drop
      keep.release();
      return;
    }
    py::gil_scoped_acquire gil;
    keep = py::object();
  });
}

/// A NumPy array's values, copied (python/troupe/data.py made them C-ordered and typed).
template <class T>
std::vector<T> values_of(const py::handle& object) {
  const auto array = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(object);
  if (!array)
    throw py::error_already_set();
  return std::vector<T>(array.data(), array.data() + array.size());
}

npy_array array_of(const py::array& array, const std::string& name) {
  std::vector<std::int64_t> shape(array.shape(), array.shape() + array.ndim());
  const auto descr = py::str(array.dtype().attr("str")).cast<std::string>();
  return memory_array(name, descr, shape, hold(array));
}

class array_source final : public given_source {
 public:
  npy_split_arrays train;
  std::optional<npy_split_arrays> test;

  dataset_split load(target_kind targets, const feature_normalisation& n) const override {
    return load_arrays(train, test ? &*test : nullptr, n, targets);
  }
};

// Note [batches from Python]
// Row i of an epoch's training split is row i % B of the iterable's batch i / B, the loader
// reading an epoch's rows in order (shuffle is off: the iterable shuffles, as a DataLoader
// does). Batches are asked for in step order but by several threads (each replica's device
// gathers its rows, the loader its labels), a few steps ahead (the prefetch), so each is
// kept until `kept` newer ones are: a thread that comes late still finds its batch. One
// asked for again after that (a resumed run skipping to its step, a second pass) starts the
// epoch's iterator again: fn(epoch) must give the same batches each time it is called.
class python_batches final : public feature_rows {
 public:
  python_batches(py::object fn, py::object next_batch, std::int64_t batch, std::int64_t features,
                 std::int64_t positions, std::int64_t classes)
      : fn_(std::move(fn)),
        next_batch_(std::move(next_batch)),
        batch_(batch),
        features_(features),
        positions_(positions),
        classes_(classes) {}

  ~python_batches() override {
    if (!Py_IsInitialized())
      return;
    py::gil_scoped_acquire gil;
    iterator_ = py::object();
    fn_ = py::object();
    next_batch_ = py::object();
  }

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override {
    gather_in_epoch(picked, first, last, out, 0);
  }
  void gather_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
                       std::int64_t epoch) const override {
    each_row(picked, first, last, epoch, [&](const fetched& b, std::int64_t row, std::size_t i) {
      std::memcpy(out + (i - first) * features_, b.x.data() + row * features_,
                  static_cast<std::size_t>(features_) * sizeof(float));
    });
  }
  bool holds_labels() const override { return true; }
  void gather_labels(const std::int64_t* picked, std::size_t first, std::size_t last,
                     std::int32_t* out) const override {
    gather_labels_in_epoch(picked, first, last, out, 0);
  }
  void gather_labels_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last,
                              std::int32_t* out, std::int64_t epoch) const override {
    each_row(picked, first, last, epoch, [&](const fetched& b, std::int64_t row, std::size_t i) {
      std::copy_n(b.y.data() + row * positions_, positions_, out + (i - first) * positions_);
    });
  }

 private:
  struct fetched {
    std::vector<float> x;         // (B, D)
    std::vector<std::int32_t> y;  // (B, T)
  };
  static constexpr std::size_t kept = 64;

  template <class Each>
  void each_row(const std::int64_t* picked, std::size_t first, std::size_t last, std::int64_t epoch,
                Each each) const {
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

  std::shared_ptr<const fetched> batch_of(std::int64_t epoch, std::int64_t index) const {
    std::lock_guard<std::mutex> guard{mutex_};
    const auto key = std::make_pair(epoch, index);
    if (const auto it = cache_.find(key); it != cache_.end())
      return it->second;
    std::string failed;
    {
      py::gil_scoped_acquire gil;
      try {
        if (epoch != epoch_ || index < next_) {
          iterator_ = py::iter(fn_(epoch));
          epoch_ = epoch;
          next_ = 0;
        }
        while (next_ <= index) {
          auto got = next_batch_(iterator_, epoch, next_).cast<py::tuple>();
          auto b = std::make_shared<fetched>();
          b->x = values_of<float>(got[0]);
          b->y = values_of<std::int32_t>(got[1]);
          check(*b, epoch, next_);
          cache_[std::make_pair(epoch, next_++)] = std::move(b);
          while (cache_.size() > kept)
            cache_.erase(cache_.begin());
        }
      } catch (py::error_already_set& e) {
        failed = e.what();
      }
    }
    if (!failed.empty())
      throw data_error("troupe.data.iterable: epoch " + std::to_string(epoch) + ", batch " +
                       std::to_string(index) + ": " + failed);
    return cache_.at(key);
  }

  void check(const fetched& b, std::int64_t epoch, std::int64_t index) const {
    const auto where = "troupe.data.iterable: epoch " + std::to_string(epoch) + ", batch " +
                       std::to_string(index) + ": ";
    if (static_cast<std::int64_t>(b.x.size()) != batch_ * features_ ||
        static_cast<std::int64_t>(b.y.size()) != batch_ * positions_)
      throw data_error(where + "expected " + std::to_string(batch_) + " rows of " +
                       std::to_string(features_) + " features and " + std::to_string(positions_) +
                       " label(s), as the first batch had, got " + std::to_string(b.x.size()) +
                       " feature and " + std::to_string(b.y.size()) +
                       " label values (every batch must be whole: DataLoader(drop_last=True))");
    for (std::size_t i = 0; i < b.y.size(); ++i)
      if (b.y[i] < 0 || b.y[i] >= classes_)
        throw data_error(where + "label " + std::to_string(i) + " is " + std::to_string(b.y[i]) +
                         "; the classes are 0 .. " + std::to_string(classes_ - 1));
  }

  mutable py::object fn_, next_batch_;
  std::int64_t batch_, features_, positions_, classes_;
  mutable std::mutex mutex_;
  mutable std::map<std::pair<std::int64_t, std::int64_t>, std::shared_ptr<const fetched>> cache_;
  mutable py::object iterator_;
  mutable std::int64_t epoch_ = -1, next_ = 0;
};

class iterable_source final : public given_source {
 public:
  py::object fn, next_batch;
  std::int64_t batch = 0, features = 0, positions = 1, classes = 0, steps = 0;
  std::optional<npy_split_arrays> test;

  ~iterable_source() override {
    if (!Py_IsInitialized())
      return;
    py::gil_scoped_acquire gil;
    fn = py::object();
    next_batch = py::object();
  }

  dataset_split load(target_kind targets, const feature_normalisation& n) const override {
    if (targets != target_kind::class_ids)
      throw data_error(
          "troupe.data.iterable gives class labels; a loss of float targets reads "
          "troupe.data.arrays");
    dataset_split out;
    auto& train = out.train;
    train.count = steps * batch;
    train.features = features;
    train.positions = positions;
    train.classes = classes;
    {
      py::gil_scoped_acquire gil;
      train.rows =
          std::make_shared<python_batches>(fn, next_batch, batch, features, positions, classes);
    }
    if (test) {
      out.test = load_arrays(*test, nullptr, n, targets).train;
      out.test.classes = classes;
      if (out.test.features != features)
        throw data_error(test->features.name + " has samples of " +
                         std::to_string(out.test.features) +
                         " values, but the iterable's "
                         "batches have " +
                         std::to_string(features));
    } else {
      out.test.features = features;
      out.test.positions = positions;
      out.test.classes = classes;
    }
    return out;
  }
};

npy_split_arrays split_of(const py::array& x, const py::array& y, const std::string& x_name,
                          const std::string& y_name) {
  return {array_of(x, x_name), array_of(y, y_name)};
}

}  // namespace

void give_data(run_config& config, const py::object& data) {
  if (data.is_none())
    return;
  if (!py::hasattr(data, "_handle"))
    throw user_error("data= takes troupe.data.arrays(...) or troupe.data.iterable(...)");
  const auto& given = data.attr("_handle").cast<const given_data&>();
  auto& d = config.data;
  d.given = given.source;
  d.source = data_source::npy;
  if (given.ordered)
    d.shuffle = false;
  if (given.batch_size > 0)
    d.batch_size = given.batch_size;
  if (!given.has_test && d.validation == 0)
    config.run.evaluate = false;
}

void bind_data(py::module_& m) {
  py::class_<given_data>(m, "GivenData");
  m.def("arrays_source", [](const py::array& x, const py::array& y, const py::object& x_test,
                            const py::object& y_test) {
    auto source = std::make_shared<array_source>();
    source->train = split_of(x, y, "x_train (a NumPy array)", "y_train (a NumPy array)");
    if (!x_test.is_none())
      source->test = split_of(x_test.cast<py::array>(), y_test.cast<py::array>(),
                              "x_test (a NumPy array)", "y_test (a NumPy array)");
    given_data out;
    out.has_test = source->test.has_value();
    out.source = std::move(source);
    return out;
  });
  m.def("iterable_source",
        [](py::object fn, py::object next_batch, std::int64_t batch, std::int64_t features,
           std::int64_t positions, std::int64_t classes, std::int64_t steps,
           const py::object& x_test, const py::object& y_test) {
          auto source = std::make_shared<iterable_source>();
          source->fn = std::move(fn);
          source->next_batch = std::move(next_batch);
          source->batch = batch;
          source->features = features;
          source->positions = positions;
          source->classes = classes;
          source->steps = steps;
          if (!x_test.is_none())
            source->test = split_of(x_test.cast<py::array>(), y_test.cast<py::array>(),
                                    "x_test (a NumPy array)", "y_test (a NumPy array)");
          given_data out;
          out.has_test = source->test.has_value();
          out.ordered = true;
          out.batch_size = batch;
          out.source = std::move(source);
          return out;
        });
}

}  // namespace troupe::python
