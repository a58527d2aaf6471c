// trace_command.cpp: `troupe trace summary|explain|timeline FILE`: read a trace written by
// `troupe run --trace` (docs/reference/trace-format.md). The analysis and drawing live in
// runtime/trace_summary and runtime/trace_timeline; this file is options and files only.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/trace_tools/critical_path.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "troupe/error.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

const char* trace_usage =
    "usage: troupe trace summary FILE [--json]\n"
    "       troupe trace explain FILE [--step N] [--slowest K] [--json]\n"
    "       troupe trace timeline FILE -o schedule.svg|schedule.html [--steps A:B]\n"
    "                             [--critical-path]\n"
    "\n"
    "Reads a trace written by troupe run CONFIG.toml --trace FILE (its format:\n"
    "docs/reference/trace-format.md; what each command shows: docs/guide/traces.md).\n"
    "  summary   where the time went: per actor (compute, message handling, waiting for\n"
    "            the device, idle), per device (utilisation), per pipeline stage (measured\n"
    "            bubble next to (P - 1) / (M + P - 1)), per wire (messages, bytes) and per\n"
    "            training step (compute, communication, waiting, the slowest actor)\n"
    "  explain   why each step took its time: its critical path, the chain of jobs,\n"
    "            messages and waits (for a device, a credit, a tensor) whose times add up\n"
    "            to the step's, and the share of all steps' paths each actor, device and\n"
    "            wire sits on; the slowest steps first\n"
    "  timeline  the schedule as a picture: one row per device, forward jobs blue, backward\n"
    "            green, split weight gradients purple, the rest grey, red hatching where a\n"
    "            sender ran out of credits;\n"
    "            .svg, or .html (the SVG with a legend and hover details); with\n"
    "            --critical-path, the jobs on each step's critical path outlined\n";

// Every write and the close checked (an ofstream reports a failed last flush to no one).
void write_file(const std::string& path, const std::string& text) {
  write_whole_file(path, text, "the timeline");
}

}  // namespace

exit_code trace_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("json", "summary, explain: print JSON (every step) instead of tables")(
      "step", po::value<std::int64_t>(), "explain: only this training step")(
      "slowest", po::value<std::int64_t>()->default_value(3),
      "explain: how many of the slowest steps to show with their paths")(
      "critical-path", "timeline: outline the jobs on each step's critical path")(
      "output,o", po::value<std::string>(), "timeline: write here; .svg or .html")(
      "steps", po::value<std::string>(),
      "timeline: the training steps to show, A:B (default 1:3 when the run has them, else all)")(
      "width", po::value<double>()->default_value(1600), "timeline: picture width in px")(
      "help,h", "show this help");
  po::options_description hidden;
  hidden.add_options()("what", po::value<std::string>())("file", po::value<std::string>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("what", 1).add("file", 1);
  auto usage = [&](std::FILE* to) {
    std::ostringstream text;
    text << options;
    std::fprintf(to, "%s\n%s", trace_usage, text.str().c_str());
  };
  po::variables_map values;
  if (!parse_options(args, all, positional, values, "trace")) {
    usage(stderr);
    return exit_code::bad_input;
  }
  if (values.count("help")) {
    usage(stdout);
    return exit_code::ok;
  }
  auto what = values.count("what") ? values["what"].as<std::string>() : std::string{};
  if (what != "summary" && what != "explain" && what != "timeline") {
    if (what.empty())
      std::fprintf(stderr, "troupe trace: say summary, explain or timeline\n\n");
    else
      std::fprintf(stderr, "troupe trace: unknown %s%s\n\n", quote_user_text(what).c_str(),
                   did_you_mean(what, {"summary", "explain", "timeline"}).c_str());
    usage(stderr);
    return exit_code::bad_input;
  }
  if (!values.count("file")) {
    std::fprintf(stderr, "troupe trace %s: missing FILE (a trace from troupe run --trace)\n\n",
                 what.c_str());
    usage(stderr);
    return exit_code::bad_input;
  }
  auto path = values["file"].as<std::string>();

  auto refuse = [&](std::initializer_list<const char*> names, const char* whose) {
    for (const auto* name : names)
      if (values.count(name) && !values[name].defaulted())
        throw user_error("troupe trace " + what + ": --" + name + " is " + whose + " option");
  };
  if (what != "timeline")
    refuse({"output", "steps", "critical-path", "width"}, "a timeline");
  if (what != "explain")
    refuse({"step", "slowest"}, "an explain");
  if (what == "explain") {
    std::int64_t only = -1;
    if (values.count("step")) {
      only = values["step"].as<std::int64_t>();
      if (only < 0)
        throw user_error("troupe trace explain: --step should be a step number (0 or more)");
    }
    const auto slowest = values["slowest"].as<std::int64_t>();
    if (slowest < 1)
      throw user_error("troupe trace explain: --slowest should be 1 or more");
    auto explanation = explain_trace(load_trace(path), only);
    std::fputs((values.count("json")
                    ? format_explanation_json(explanation)
                    : format_explanation_text(explanation, static_cast<std::size_t>(slowest)))
                   .c_str(),
               stdout);
    return exit_code::ok;
  }
  if (what == "summary") {
    auto summary = summarize_trace(load_trace(path));
    std::fputs((values.count("json") ? format_summary_json(summary) : format_summary_text(summary))
                   .c_str(),
               stdout);
    return exit_code::ok;
  }

  if (values.count("json"))
    throw user_error("troupe trace timeline: --json is a summary and explain option");
  if (!values.count("output"))
    throw user_error("troupe trace timeline: say where to draw it: -o schedule.svg or -o schedule.html");
  auto output = values["output"].as<std::string>();
  const bool html = picture_is_html("troupe trace timeline", output);
  check_output_file(output, "the timeline");  // before the trace is read: exit 2, not 1
  timeline_options timeline;
  timeline.width = values["width"].as<double>();
  if (!(timeline.width >= 400 && timeline.width <= 100000))
    throw user_error("troupe trace timeline: --width should be between 400 and 100000 px");
  if (values.count("steps"))
    parse_step_range(values["steps"].as<std::string>(), timeline);
  timeline.critical_path = values.count("critical-path") > 0;
  auto trace = load_trace(path);
  auto window = choose_window(trace, timeline);
  write_file(output, html ? render_timeline_html(trace, timeline) : render_timeline_svg(trace, timeline));
  if (window.first_step >= 0)
    std::printf("wrote %s: steps %lld to %lld, %.3f ms\n", output.c_str(),
                static_cast<long long>(window.first_step), static_cast<long long>(window.last_step),
                (window.end_us - window.start_us) / 1000);
  else
    std::printf("wrote %s: the whole trace, %.3f ms\n", output.c_str(),
                (window.end_us - window.start_us) / 1000);
  return exit_code::ok;
}

}  // namespace troupe::cli
