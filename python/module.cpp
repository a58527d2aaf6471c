// module.cpp: troupe._troupe, the C extension under `import troupe` (python/troupe/).
#include "python/bindings.hpp"

PYBIND11_MODULE(_troupe, m) {
  m.doc() = "troupe's runtime, for the troupe package (import troupe; not this module)";
  troupe::python::bind_errors(m);
  troupe::python::bind_config(m);
  troupe::python::bind_data(m);
  troupe::python::bind_run(m);
  troupe::python::bind_tools(m);
}
