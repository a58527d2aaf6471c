// tools_binding.cpp: troupe's tools over a config, a checkpoint or a trace, for Python: plan,
// verify, calibrate and simulate, a checkpoint's parameters, predict, and a trace's summary
// and critical path. Each is the CLI command's own function; what it returns is data (JSON
// text where the CLI has a JSON form, read by python/troupe/).
#include <cmath>
#include <cstdio>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "actors/session/session.hpp"
#include "actors/tools/calibrate.hpp"
#include "actors/tools/predict.hpp"
#include "actors/tools/simulate.hpp"
#include "actors/tools/verify.hpp"
#include "python/bindings.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/interchange.hpp"
#include "runtime/graph/kinds.hpp"
#include "runtime/trace_tools/critical_path.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/trace_file.hpp"

namespace troupe::python {

namespace {

py::dict plan_of(const config_source& source, const py::object& data) {
  auto config = source.parse();
  give_data(config, data);
  const auto prepared = prepare_session(config);
  const auto& graph = prepared.graph;
  py::list actors, wires, devices;
  for (const auto& a : graph.actors)
    actors.append(py::dict(py::arg("name") = a.name, py::arg("kind") = a.kind_name(),
                           py::arg("device") = a.device.to_string(), py::arg("replica") = a.replica,
                           py::arg("stage") = a.stage, py::arg("layer") = a.layer));
  for (const auto& w : graph.wires)
    wires.append(py::dict(py::arg("source") = w.from, py::arg("target") = w.to,
                          py::arg("kind") = to_string(w.kind), py::arg("capacity") = w.capacity));
  for (const auto& d : graph.devices)
    devices.append(d.to_string());
  py::list fused;
  for (const auto& g : prepared.fusion)
    fused.append(py::dict(py::arg("name") = g.name(), py::arg("members") = g.members));
  return py::dict(py::arg("actors") = actors, py::arg("wires") = wires, py::arg("fused") = fused,
                  py::arg("devices") = devices, py::arg("replicas") = graph.replicas,
                  py::arg("stages") = graph.stages, py::arg("microbatches") = graph.microbatches,
                  py::arg("schedule") = to_string(graph.schedule),
                  py::arg("table") = format_table(graph) + format_fusion(prepared.fusion), py::arg("dot") = format_dot(graph),
                  py::arg("explicit") = format_explicit(graph, config));
}

py::dict verify_of(const config_source& source, const py::object& data, std::int64_t steps,
                   const py::object& given_tolerance) {
  if (steps < 1 || steps > limits::max_steps)
    throw user_error("verify: steps must be in [1, " + std::to_string(limits::max_steps) +
                     "], got " + std::to_string(steps));
  auto config = source.parse();
  give_data(config, data);
  const double tolerance =
      given_tolerance.is_none() ? default_tolerance(config) : given_tolerance.cast<double>();
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    throw user_error("verify: tolerance must be a finite number >= 0");
  verify_result result;
  {
    py::gil_scoped_release released;
    result = verify_against_single_device(config, steps, tolerance);
  }
  py::list differences;
  for (const auto& d : result.differences)
    differences.append(py::dict(py::arg("layer") = d.layer, py::arg("parameter") = d.parameter,
                                py::arg("type") = d.layer_type, py::arg("name") = d.name,
                                py::arg("relative") = d.relative));
  return py::dict(py::arg("passed") = result.passed, py::arg("worst") = result.worst,
                  py::arg("steps") = steps, py::arg("tolerance") = tolerance,
                  py::arg("differences") = differences);
}

/// A checkpoint's parameters, {name: array}, and its step.
py::tuple load_checkpoint(const std::string& checkpoint) {
  const auto read = read_checkpoint_parameters(checkpoint);
  py::dict out;
  for (const auto& p : read.parameters) {
    py::array_t<float> array(std::vector<py::ssize_t>(p.shape.begin(), p.shape.end()));
    std::copy(p.values.begin(), p.values.end(), array.mutable_data());
    out[py::str(p.name)] = array;
  }
  return py::make_tuple(out, read.step, read.checkpoint);
}

}  // namespace

void bind_tools(py::module_& m) {
  m.def("plan", &plan_of);
  m.def("verify", &verify_of);
  py::class_<calibration>(m, "Calibration")
      .def("to_json", [](const calibration& c) { return format_calibration_json(c); })
      .def("__str__", [](const calibration& c) { return format_calibration_text(c); });
  m.def("calibrate", [](const config_source& source, std::int64_t repeats) {
    auto config = source.parse();
    py::gil_scoped_release released;
    return calibrate(config, source.name, repeats);
  });
  m.def("parse_calibration", &parse_calibration_json);
  m.def("simulate",
        [](const config_source& source, const calibration& costs, std::int64_t steps, int cores) {
          auto config = source.parse();
          simulate_options options;
          options.steps = steps;
          options.cores = cores;
          py::gil_scoped_release released;
          const auto p = simulate_run(config, costs, options);
          return std::make_pair(format_prediction_json(p), p.trace_json);
        });
  m.def("load_checkpoint", &load_checkpoint);
  m.def("predict",
        [](const config_source& source, const py::object& data, const std::string& checkpoint,
           const std::string& input, const std::string& output, bool softmax, std::int64_t batch) {
          auto config = source.parse();
          give_data(config, data);
          prediction_request request{checkpoint, input, output, softmax, batch};
          py::gil_scoped_release released;
          const auto summary = predict(config, request, stdout);
          return std::make_pair(summary.step, summary.rows);
        });
  m.def("trace_summary", [](const std::string& path) {
    const auto summary = summarize_trace(load_trace(path));
    return std::make_pair(format_summary_json(summary), format_summary_text(summary));
  });
  m.def("trace_explain", [](const std::string& path, std::int64_t step) {
    const auto explanation = explain_trace(load_trace(path), step);
    return std::make_pair(format_explanation_json(explanation),
                          format_explanation_text(explanation, 3));
  });
}

}  // namespace troupe::python
