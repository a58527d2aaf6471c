// export_command.cpp: `troupe export CHECKPOINT -o model.safetensors`: a checkpoint's
// parameters as one safetensors file that PyTorch loads (runtime/checkpoint/interchange.hpp).
// It reads no config: the checkpoint's manifest says what the model's parameters are.
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/interchange.hpp"

namespace po = boost::program_options;

namespace troupe::cli {

exit_code export_command(const std::vector<std::string>& args) {
  po::options_description options("options");
  options.add_options()("output,o", po::value<std::string>(),
                        "the safetensors file to write (required; replaced atomically)")(
      "dtype", po::value<std::string>()->default_value("fp32"),
      "fp32 (the masters as they are) or bf16 (each rounded to bfloat16: half the bytes)")(
      "quiet,q", "print nothing on success");
  command_line line;
  if (auto stop = parse_command_line(
          args, "export",
          "Writes the parameters of CHECKPOINT (a checkpoint directory, or a directory of\n"
          "them, meaning its newest complete one) to one safetensors file, named as the\n"
          "equivalent torch.nn.Sequential's state_dict (\"0.weight\" (out, in), \"0.bias\",\n"
          "\"2.weight\", ...), without optimizer state. The checkpoint is verified first.\n"
          "In PyTorch: model.load_state_dict(safetensors.torch.load_file(FILE)); the same\n"
          "file starts a troupe run with [model] init_from = FILE. --dtype bf16 writes\n"
          "each parameter rounded to bfloat16 (BF16), which init_from also reads.",
          options, line, "CHECKPOINT"))
    return *stop;
  if (!line.values.count("output")) {
    std::fprintf(stderr,
                 "troupe export: missing -o FILE, the safetensors file to write\n"
                 "(usage: troupe export CHECKPOINT -o model.safetensors)\n");
    return exit_code::bad_input;
  }
  const auto output = line.values["output"].as<std::string>();
  const auto type_name = line.values["dtype"].as<std::string>();
  if (type_name != "fp32" && type_name != "bf16") {
    std::fprintf(stderr, "troupe export: --dtype must be fp32 or bf16, got %s\n",
                 quote_user_text(type_name).c_str());
    return exit_code::bad_input;
  }
  const auto exported =
      export_weights(line.config, output, type_name == "bf16" ? dtype::bf16 : dtype::f32);
  if (!line.values.count("quiet"))
    std::printf("exported %zu tensors (%lld parameters) of %s (step %lld) to %s (%llu bytes)\n",
                exported.tensors.size(), static_cast<long long>(exported.values),
                exported.checkpoint.c_str(), static_cast<long long>(exported.step), output.c_str(),
                static_cast<unsigned long long>(exported.file.bytes));
  return exit_code::ok;
}

}  // namespace troupe::cli
