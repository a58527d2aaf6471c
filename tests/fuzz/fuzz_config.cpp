// fuzz_config.cpp: libFuzzer harness for the config loader (issue 12): TOML text through
// parse_config to a validated topology, the way `troupe plan` takes it (plan, schedule and
// the formatted graph included), with the data's sizes but none of its samples.
//
// A user_error (exit 2 in the CLI) is the right answer to bad input; anything else that
// escapes (another exception, a crash, a sanitizer report, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/session/session.hpp"
#include "runtime/config/config.hpp"
#include "runtime/graph/topology.hpp"
#include "troupe/error.hpp"

namespace {

// The sizes a run would read from its data: the synthetic source's own, else Fashion-MNIST's.
std::shared_ptr<const troupe::dataset_split> sizes_only(const troupe::run_config& config) {
  auto data = std::make_shared<troupe::dataset_split>();
  const auto& d = config.data;
  const bool synthetic = d.source == troupe::data_source::synthetic;
  data->train.count = synthetic ? d.synthetic_train : 60000;
  data->test.count = synthetic ? d.synthetic_test : 10000;
  data->train.features = data->test.features = synthetic ? d.synthetic_features : 784;
  data->train.classes = data->test.classes = synthetic ? d.synthetic_classes : 10;
  return data;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto config = troupe::parse_config(text, "fuzz.toml", "/nonexistent");
    config.run.plugins.clear();  // loading shared objects is not what is fuzzed here
    auto prepared = troupe::prepare_session(config, sizes_only(config));
    (void)troupe::format_table(prepared.graph);
    (void)troupe::format_explicit(prepared.graph, config);
  } catch (const troupe::user_error&) {
  }
  return 0;
}
