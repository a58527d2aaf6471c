// eval_command.cpp: `troupe eval CONFIG.toml --checkpoint DIR`: a trained model's loss and
// metrics on a split of its data, without training it again.
//
// The checkpoint's parameters are evaluated by the config's own wiring, as a run evaluates
// after an epoch (the session with session_purpose::evaluate: the loader sends the split's
// batches, the loss actors report, nothing is trained, no checkpoint or metrics file is
// written). A checkpoint resumes on any wiring, so the config may wire it otherwise than the
// run that wrote it did.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "actors/session/prepare.hpp"
#include "actors/session/session.hpp"
#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

namespace {

/// What `troupe eval` prints: one line, or one JSON object.
void print_evaluation(const run_outcome& outcome, const std::string& checkpoint,
                      const std::string& split, bool json) {
  // An image folder's class names, by index, as the checkpoint recorded them.
  const auto classes = read_manifest(checkpoint + "/" + manifest_file_name).class_names;
  if (json) {
    nlohmann::json out = {{"checkpoint", checkpoint},
                          {"step", outcome.steps},
                          {"split", split},
                          {"samples", outcome.test_samples},
                          {"loss", outcome.test_loss}};
    for (const auto& [name, value] : outcome.test_metrics)
      out[name] = value;
    if (!classes.empty())
      out["classes"] = classes;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("%s (step %lld) on the %s split: loss %.4f", checkpoint.c_str(),
              static_cast<long long>(outcome.steps), split.c_str(), outcome.test_loss);
  for (const auto& [name, value] : outcome.test_metrics)
    if (name == "accuracy")
      std::printf(", accuracy %.2f%%", 100.0 * value);
    else
      std::printf(", %s %.4f", name.c_str(), value);
  std::printf(" (%lld samples)\n", static_cast<long long>(outcome.test_samples));
  if (!classes.empty())
    std::printf("classes: %s\n", describe_classes(classes).c_str());
}

}  // namespace

exit_code eval_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()(
      "checkpoint", po::value<std::string>(),
      "the checkpoint to evaluate: a checkpoint directory, or a directory of them (its newest "
      "complete one); required")("split", po::value<std::string>()->default_value("test"),
                                 "the split to evaluate: test, validation ([data] validation) or train")(
      "json", "print one JSON object (checkpoint, step, split, samples, loss, each metric, and an "
      "image folder's class names by index)")(
      "watchdog", po::value<double>(),
      "stop an evaluation that has made no progress for this many seconds (overrides [run] "
      "watchdog; 0 = off)");
  command_line line;
  if (auto stop = parse_command_line(
          args, "eval",
          "Evaluates the parameters of a checkpoint on a split of CONFIG.toml's data: the\n"
          "loss and the loss's metrics (accuracy; a regression's RMSE and MAE), computed by\n"
          "the config's wiring, which need not be the one that trained it. Nothing is\n"
          "trained or written. Exit 0 with the result on stdout.",
          options, line))
    return *stop;
  if (!line.values.count("checkpoint")) {
    std::fprintf(stderr, "troupe eval: --checkpoint DIR is required (the checkpoint to evaluate)\n");
    return exit_code::bad_input;
  }
  const auto split = line.values["split"].as<std::string>();
  if (split != "test" && split != "validation" && split != "train") {
    std::fprintf(stderr, "troupe eval: --split must be test, validation or train, not %s\n",
                 quote_user_text(split).c_str());
    return exit_code::bad_input;
  }
  auto config = load_config_and_plugins(line);
  config.run.trace.clear();
  session_options session;
  session.purpose = session_purpose::evaluate;
  session.evaluation = split == "train"        ? evaluated_split::train
                       : split == "validation" ? evaluated_split::validation
                                               : evaluated_split::test;
  session.resume = line.values["checkpoint"].as<std::string>();
  session.quiet = true;
  session.metrics_path = "";
  session.sample_length = 0;
  if (line.values.count("watchdog"))
    session.watchdog = line.values["watchdog"].as<double>();
  const auto checkpoint = resolve_resume_path(session.resume).path;
  auto result = run_session(config, session);
  if (result.outcome.exit_code != exit_code::ok) {
    std::fprintf(stderr, "troupe eval: %s\n", result.outcome.failure.c_str());
    return result.outcome.exit_code;
  }
  print_evaluation(result.outcome, checkpoint, split, line.values.count("json") > 0);
  return exit_code::ok;
}

}  // namespace troupe::cli
