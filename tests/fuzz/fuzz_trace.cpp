// fuzz_trace.cpp: libFuzzer harness for the trace file reader (issue 12): JSON text through
// parse_trace, then what `troupe trace summary`, `explain` and `timeline` do with a trace
// that parsed (the summary and the critical paths in both formats, the default window's
// SVG with the critical path outlined).
//
// A user_error (exit 2 in the CLI) is the right answer to bad input; anything else that
// escapes, a crash, a sanitizer report or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/trace_tools/critical_path.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "troupe/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto trace = troupe::parse_trace(text, "fuzz.json");
    const auto summary = troupe::summarize_trace(trace);
    (void)troupe::format_summary_text(summary);
    (void)troupe::format_summary_json(summary);
    (void)troupe::render_timeline_svg(trace, troupe::timeline_options{});
  } catch (const troupe::user_error&) {
  }
  try {  // separately: a trace without training steps is explain's user_error alone
    const auto trace = troupe::parse_trace(text, "fuzz.json");
    const auto explanation = troupe::explain_trace(trace);
    (void)troupe::format_explanation_text(explanation);
    (void)troupe::format_explanation_json(explanation);
    troupe::timeline_options options;
    options.critical_path = true;
    (void)troupe::render_timeline_svg(trace, options);
  } catch (const troupe::user_error&) {
  }
  return 0;
}
