// trace_command.cpp: `troupe trace summary|timeline FILE`: read a trace written by
// `troupe run --trace` (docs/tracing.md). The analysis and drawing live in
// runtime/trace_summary and runtime/trace_timeline; this file is options and files only.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "troupe/error.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

const char* trace_usage =
    "usage: troupe trace summary FILE [--json]\n"
    "       troupe trace timeline FILE -o schedule.svg|schedule.html [--steps A:B]\n"
    "\n"
    "Reads a trace written by troupe run CONFIG.toml --trace FILE (docs/tracing.md).\n"
    "  summary   where the time went: per actor (compute, message handling, waiting for\n"
    "            the device, idle), per device (utilisation), per pipeline stage (measured\n"
    "            bubble next to (P - 1) / (M + P - 1)), per wire (messages, bytes) and per\n"
    "            training step (compute, communication, waiting, the slowest actor)\n"
    "  timeline  the schedule as a picture: one row per device, forward jobs blue, backward\n"
    "            green, the rest grey, red hatching where a sender ran out of credits;\n"
    "            .svg, or .html (the SVG with a legend and hover details)\n";

// Every write and the close checked (an ofstream reports a failed last flush to no one).
void write_file(const std::string& path, const std::string& text) {
  write_whole_file(path, text, "the timeline");
}

}  // namespace

exit_code trace_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("json", "summary: print JSON (every step) instead of tables")(
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
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), values);
    po::notify(values);
  } catch (const po::error& e) {
    std::fprintf(stderr, "troupe trace: %s\n\n", e.what());
    usage(stderr);
    return exit_code::bad_input;
  }
  if (values.count("help")) {
    usage(stdout);
    return exit_code::ok;
  }
  auto what = values.count("what") ? values["what"].as<std::string>() : std::string{};
  if (what != "summary" && what != "timeline") {
    if (what.empty())
      std::fprintf(stderr, "troupe trace: say summary or timeline\n\n");
    else
      std::fprintf(stderr, "troupe trace: unknown '%s'%s\n\n", what.c_str(),
                   did_you_mean(what, {"summary", "timeline"}).c_str());
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

  if (what == "summary") {
    if (values.count("output") || values.count("steps"))
      throw user_error("troupe trace summary: -o and --steps are timeline options");
    auto summary = summarize_trace(load_trace(path));
    std::fputs((values.count("json") ? format_summary_json(summary) : format_summary_text(summary))
                   .c_str(),
               stdout);
    return exit_code::ok;
  }

  if (values.count("json"))
    throw user_error("troupe trace timeline: --json is a summary option");
  if (!values.count("output"))
    throw user_error("troupe trace timeline: say where to draw it: -o schedule.svg or -o schedule.html");
  auto output = values["output"].as<std::string>();
  const bool html = picture_is_html("troupe trace timeline", output);
  timeline_options timeline;
  timeline.width = values["width"].as<double>();
  if (!(timeline.width >= 400 && timeline.width <= 100000))
    throw user_error("troupe trace timeline: --width should be between 400 and 100000 px");
  if (values.count("steps"))
    parse_step_range(values["steps"].as<std::string>(), timeline);
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
