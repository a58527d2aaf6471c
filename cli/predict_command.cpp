// predict_command.cpp: `troupe predict CHECKPOINT --config CONFIG.toml --input FILE`: a
// trained model's outputs for inputs of your own (actors/tools/predict.hpp).
#include <cstdio>

#include "actors/tools/predict.hpp"
#include "cli/commands.hpp"
#include "runtime/base/output_file.hpp"
#include "runtime/config/config.hpp"
#include "runtime/plugin/plugin.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code predict_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("config", po::value<std::string>(),
                        "the config the model was trained with (its [model] and [data]); required")(
      "input", po::value<std::string>(),
      "the inputs: a .npy of features (N, ...) (or an .npz or .safetensors file: its features "
      "array) or a CSV table with the config's feature columns (its targets may be absent); for "
      "a model of [data] source = \"images\", a PNG or JPEG image or a folder of them; of "
      "source = \"tokens\", a token file; required")(
      "output,o", po::value<std::string>(),
      "write the outputs here: .npy (float32, (N, output...)) or .csv; default: CSV on stdout")(
      "softmax", "probabilities over the classes instead of logits (a loss of class labels)")(
      "batch", po::value<std::int64_t>()->default_value(1000), "rows a forward pass");
  add_set_option(options);  // on --config's config
  command_line line;
  if (auto stop = parse_command_line(
          args, "predict",
          "Runs the model of CONFIG.toml with the parameters of CHECKPOINT (a checkpoint\n"
          "directory, or a directory of them: its newest complete one) on every row of the\n"
          "input, in batches, on the host, and writes its outputs: logits (a classifier's\n"
          "argmax first in CSV), probabilities with --softmax, or regression values. The\n"
          "input is normalised as the config's [data] says. An image's CSV line starts\n"
          "with its file, and an image folder's classifier names the argmax's class.",
          options, line, "CHECKPOINT"))
    return *stop;
  for (const char* required : {"config", "input"})
    if (!line.values.count(required)) {
      std::fprintf(stderr, "troupe predict: --%s is required (usage: troupe predict CHECKPOINT "
                           "--config CONFIG.toml --input FILE [-o out.npy])\n",
                   required);
      return exit_code::bad_input;
    }
  load_command_line_plugins(line.values);
  const auto config = load_config(line.values["config"].as<std::string>(), set_options(line));
  load_config_plugins(config);
  prediction_request request;
  request.checkpoint = line.config;
  request.input = line.values["input"].as<std::string>();
  if (line.values.count("output")) {
    request.output = line.values["output"].as<std::string>();
    check_output_file(request.output, "the outputs");  // bad input (2) before any work, as elsewhere
  }
  request.softmax = line.values.count("softmax") > 0;
  request.batch = line.values["batch"].as<std::int64_t>();
  const auto summary = predict(config, request, stdout);
  if (!request.output.empty())
    std::printf("%lld rows of %lld outputs from %s (step %lld) written to %s\n",
                static_cast<long long>(summary.rows), static_cast<long long>(summary.width),
                summary.checkpoint.c_str(), static_cast<long long>(summary.step),
                request.output.c_str());
  return exit_code::ok;
}

}  // namespace troupe::cli
