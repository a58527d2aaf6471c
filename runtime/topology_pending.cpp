// Temporary until the explicit-topology work lands: validation is a no-op, explicit configs are refused.
#include "runtime/topology.hpp"
namespace troupe {
topology topology_from_explicit(const run_config& config, std::int64_t) {
  throw config_error(source_position{config.path}, "explicit configs are not supported yet");
}
void validate_topology(const topology&, const run_config&, std::int64_t) {}
}  // namespace troupe
namespace troupe {
std::string format_table(const topology&) { return "format_table: pending\n"; }
std::string format_dot(const topology&) { return "digraph {}\n"; }
std::string format_explicit(const topology&, const run_config&) { return "# pending\n"; }
}  // namespace troupe
