// bindings.hpp: the pieces of the Python module's C extension (troupe._troupe), one concern
// a file: the config and errors (config_binding.cpp), a run on a thread of its own
// (run_binding.cpp), data handed over from Python (data_binding.cpp), and the tools over
// configs, checkpoints and traces (tools_binding.cpp). The Python package (python/troupe/)
// wraps them in the documented API; nothing here is called by users directly.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "runtime/config/config.hpp"

namespace troupe::python {

namespace py = pybind11;

/// A config as the Python side holds it: the TOML text, the name errors give it, the
/// directory its relative paths are read from, and the keys set since (section.key=value).
struct config_source {
  std::string text;
  std::string name;
  std::string directory;
  std::vector<std::string> overrides;

  /// Parsed and checked, with the config's plugins loaded; throws config_error.
  run_config parse() const;
};

/// The exception classes C++ errors are translated to (troupe.InputError and the two under
/// it), made once by the module with the others (troupe.Error, RunError, WatchdogError).
struct error_classes {
  py::object input, config, data;
};
const error_classes& errors();

void bind_errors(py::module_& m);
void bind_config(py::module_& m);
void bind_data(py::module_& m);
void bind_run(py::module_& m);
void bind_tools(py::module_& m);

/// The data a Python object hands over (troupe.data.arrays / iterable's handle), set into
/// `config` ([data] given); None leaves the config's own source.
void give_data(run_config& config, const py::object& data);

}  // namespace troupe::python
