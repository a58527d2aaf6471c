// plot_command.cpp: `troupe plot METRICS.jsonl... -o curves.svg|.html`: training curves of
// one or more runs on shared axes (runtime/plot/curves.hpp); this file is options and
// files only.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/plot/curves.hpp"
#include "troupe/error.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

const char* plot_usage =
    "usage: troupe plot METRICS.jsonl... -o curves.svg|curves.html [--labels A,B,...]\n"
    "                   [--x steps|seconds]\n"
    "\n"
    "Draws training loss, test accuracy and test loss over steps (or over seconds of\n"
    "training, the step lines' \"train_s\") for one or more runs on\n"
    "shared axes, one colour per run, from the JSON-lines metrics files troupe run writes\n"
    "([run] metrics, --metrics). Any program writing the same lines (\"step\" with \"loss\";\n"
    "\"step\" with \"test_accuracy\" and \"test_loss\") can be plotted next to them, e.g. the\n"
    "PyTorch side of bench/cnn_vs_pytorch.py --curves. Runs are labelled by their file names\n"
    "unless --labels names them.\n";

std::vector<std::string> split_labels(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(',', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos)
      return out;
    start = end + 1;
  }
}

}  // namespace

exit_code plot_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("output,o", po::value<std::string>(), "write here; .svg or .html")(
      "labels", po::value<std::string>(), "the runs' names in the legend, comma-separated")(
      "width", po::value<double>()->default_value(900), "picture width in px")(
      "x", po::value<std::string>()->default_value("steps"),
      "what the curves are drawn over: steps, or seconds of training (evaluations left "
      "out), to compare runs that take different times a step")("help,h", "show this help");
  po::options_description hidden;
  hidden.add_options()("files", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("files", -1);
  auto usage = [&](std::FILE* to) {
    std::ostringstream text;
    text << options;
    std::fprintf(to, "%s\n%s", plot_usage, text.str().c_str());
  };
  po::variables_map values;
  if (!parse_options(args, all, positional, values, "plot")) {
    usage(stderr);
    return exit_code::bad_input;
  }
  if (values.count("help")) {
    usage(stdout);
    return exit_code::ok;
  }
  if (!values.count("files")) {
    std::fprintf(stderr, "troupe plot: name one or more metrics files\n\n");
    usage(stderr);
    return exit_code::bad_input;
  }
  const auto files = values["files"].as<std::vector<std::string>>();
  if (files.size() > 64)
    throw user_error("troupe plot: " + std::to_string(files.size()) +
                     " files; at most 64 runs fit one picture");
  if (!values.count("output"))
    throw user_error("troupe plot: say where to draw it: -o curves.svg or -o curves.html");
  const auto output = values["output"].as<std::string>();
  const bool html = picture_is_html("troupe plot", output);
  check_output_file(output, "the curves");  // before the files are read: exit 2, not 1
  const double width = values["width"].as<double>();
  if (!(width >= 300 && width <= 20000))
    throw user_error("troupe plot: --width should be between 300 and 20000 px");
  std::vector<std::string> labels;
  if (values.count("labels")) {
    labels = split_labels(values["labels"].as<std::string>());
    if (labels.size() != files.size())
      throw user_error("troupe plot: --labels names " + std::to_string(labels.size()) +
                       " run(s) for " + std::to_string(files.size()) + " file(s)");
  } else {
    for (const auto& file : files)
      labels.push_back(std::filesystem::path{file}.stem().string());
  }
  const auto x = values["x"].as<std::string>();
  if (x != "steps" && x != "seconds")
    throw user_error("troupe plot: --x " + quote_user_text(x) + ": expected steps or seconds");
  const auto axis = x == "seconds" ? curve_axis::seconds : curve_axis::steps;
  std::vector<run_curves> runs;
  for (std::size_t i = 0; i < files.size(); ++i)
    runs.push_back(read_metrics(files[i], labels[i], axis));
  write_whole_file(
      output, html ? render_curves_html(runs, width, axis) : render_curves_svg(runs, width, axis),
      "the curves");
  std::printf("wrote %s: %zu run(s)\n", output.c_str(), runs.size());
  return exit_code::ok;
}

}  // namespace troupe::cli
