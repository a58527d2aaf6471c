// data_binding.cpp: data handed over from Python (troupe.data.arrays and troupe.data.iterable,
// python/troupe/data.py) as given sources (runtime/data/given.hpp).
//
// Arrays are read in place: their memory is held (a reference to the NumPy array, dropped
// with the GIL) and read as a .npy file's would be, through the same checks, conversions and
// normalisation. An iterable's batches are fetched by a thread of their own, a few ahead of
// training, under the GIL, in the iterable's order (Note [batches from Python] in
// python_batches.cpp).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/bindings.hpp"
#include "python/python_batches.hpp"
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
  if (given.ordered) {
    d.shuffle = false;
    // The batches are the iterable's own: nothing to hold out or to standardise over.
    if (d.validation > 0)
      throw config_error(d.validation_where,
                         "[data] validation holds out rows of the data set, but "
                         "troupe.data.iterable's batches come as they are: pass "
                         "test=(x_test, y_test) to evaluate on");
    if (d.standardize)
      throw config_error(d.where,
                         "[data] normalize = \"standard\" standardises a data set's "
                         "rows, but troupe.data.iterable's batches come as they are: "
                         "normalise them in the iterable");
  }
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
