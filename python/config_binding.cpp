// config_binding.cpp: troupe's errors as Python exception classes, and configs checked by
// the same reader as a file (troupe.Config in python/troupe/__init__.py holds the text).
#include <filesystem>

#include <pybind11/stl.h>

#include "python/bindings.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/plugin/plugin.hpp"
#include "troupe/error.hpp"

namespace troupe::python {

namespace {

error_classes* classes = nullptr;  // made once, never freed: they live as long as Python

py::object make_class(py::module_& m, const char* name, const py::object& base, int exit_code,
                      const char* doc) {
  auto* made =
      PyErr_NewExceptionWithDoc((std::string("troupe.") + name).c_str(), doc, base.ptr(), nullptr);
  if (made == nullptr)
    throw py::error_already_set();
  auto out = py::reinterpret_steal<py::object>(made);
  out.attr("exit_code") = exit_code;
  m.attr(name) = out;
  return out;
}

}  // namespace

const error_classes& errors() { return *classes; }

run_config config_source::parse() const {
  auto config = parse_config(text, name, directory, overrides);
  load_config_plugins(config);
  return config;
}

void bind_errors(py::module_& m) {
  classes = new error_classes;
  auto& e = *classes;
  const auto base = py::reinterpret_borrow<py::object>(PyExc_Exception);
  const auto error =
      make_class(m, "Error", base, 1, "Any error troupe reports; exit_code is the CLI's.");
  e.input = make_class(m, "InputError", error, 2,
                       "Bad input: a file, a path, an argument (exit code 2).");
  e.config = make_class(m, "ConfigError", e.input, 2,
                        "A config that does not check: the message names the key (file:line:col), "
                        "what was expected and what was found.");
  e.data = make_class(m, "DataError", e.input, 2,
                      "Data that cannot be read or does not fit the model: the message names "
                      "the file or array and where.");
  const auto run =
      make_class(m, "RunError", error, 1,
                 "A run that failed: an actor's error, a check, a lost node (exit code 1).");
  make_class(m, "WatchdogError", run, 3,
             "A run the watchdog stopped: nothing moved for [run] watchdog seconds.");
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown)
        std::rethrow_exception(thrown);
    } catch (const config_error& error) {
      PyErr_SetString(errors().config.ptr(), error.what());
    } catch (const data_error& error) {
      PyErr_SetString(errors().data.ptr(), error.what());
    } catch (const user_error& error) {
      PyErr_SetString(errors().input.ptr(), error.what());
    }
  });
}

void bind_config(py::module_& m) {
  m.def("read_config_file", [](const std::string& path) {
    return read_file_capped(path, limits::max_config_bytes, "config file");
  });
  m.def("config_directory", [](const std::string& path) {
    const auto parent = std::filesystem::path(path).parent_path().string();
    return parent.empty() ? std::string(".") : parent;
  });
  m.def(
      "check_config",
      [](const std::string& text, const std::string& name, const std::string& directory,
         const std::vector<std::string>& overrides) {
        (void)config_source{text, name, directory, overrides}.parse();
      },
      "Parses and checks a config as troupe run does; raises ConfigError.");
  m.def("config_text", &config_text, "The config's TOML with the keys set since applied.");
}

}  // namespace troupe::python
