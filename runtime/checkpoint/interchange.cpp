// interchange.cpp: exporting a checkpoint's parameters for PyTorch, and starting a run from
// a PyTorch state_dict (interchange.hpp).
#include "runtime/checkpoint/interchange.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// The metadata safetensors.torch.save_file writes; PyTorch's loaders expect it.
const std::map<std::string, std::string> torch_metadata{{"format", "pt"}};

// "'a', 'b', 'c'" for at most `limit` names, then "and N more".
std::string quoted_list(const std::vector<std::string>& names, std::size_t limit = 8) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < limit; ++i)
    out += (i > 0 ? ", " : "") + quote_user_text(names[i]);
  if (names.size() > limit)
    out += " and " + std::to_string(names.size() - limit) + " more";
  return out;
}

// Whether `name` ends in one of torch.optim's state names (an optimizer's state_dict, or
// a checkpoint shard, handed to init_from).
bool is_optimizer_state_name(const std::string& name) {
  for (const char* state : {".momentum_buffer", ".exp_avg", ".exp_avg_sq"}) {
    const std::string suffix = state;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return name.find('@') != std::string::npos;  // a piece of a sharded checkpoint tensor
}

// Refuses an output path before any work: a directory, something that is not a regular
// file, a missing parent directory, or a file inside the checkpoint being read (it would
// replace a shard or the manifest).
void check_output_path(const std::string& output, const std::string& checkpoint) {
  std::error_code error;
  if (output.empty())
    throw data_error("troupe export: the output path is empty; give one with -o FILE");
  if (fs::is_directory(output, error))
    throw data_error("cannot write the export to " + quote_user_path(output) +
                     ": it is a directory; name a file, e.g. -o " +
                     quote_user_path((fs::path(output) / "model.safetensors").string()));
  // The export is renamed over its target (atomic_file.hpp): a device or a FIFO there
  // would be replaced by a regular file.
  if (fs::exists(output, error) && !fs::is_regular_file(output, error))
    throw data_error("cannot write the export to " + quote_user_path(output) +
                     ": it is not a regular file (a device, a FIFO or a socket), and the "
                     "export replaces its target; name a regular file");
  auto parent = fs::path(output).parent_path();
  if (parent.empty())
    parent = ".";
  if (!fs::is_directory(parent, error))
    throw data_error("cannot write the export to " + quote_user_path(output) + ": the directory " +
                     quote_user_path(parent.string()) + " does not exist");
  if (fs::equivalent(parent, checkpoint, error))
    throw data_error("cannot write the export to " + quote_user_path(output) +
                     ": it lies in the checkpoint " + quote_user_path(checkpoint) +
                     " being read; write it elsewhere");
}

// The checkpoint `path` names, as --resume takes it; errors speak of the operand given
// (troupe export's, troupe.load's).
checkpoint_info find_checkpoint(const std::string& path) {
  try {
    return resolve_resume_path(path);
  } catch (const data_error& e) {
    std::string message = e.what();
    const std::string resume = "resume path ";
    if (message.compare(0, resume.size(), resume) == 0)
      message = "checkpoint path " + message.substr(resume.size());
    throw data_error("cannot read the checkpoint: " + message);
  }
}

}  // namespace

checkpoint_parameters read_checkpoint_parameters(const std::string& checkpoint) {
  const auto found = find_checkpoint(checkpoint);
  const auto manifest = verify_checkpoint(found.path);
  const auto where =
      "checkpoint " + quote_user_path(found.path) + " (step " + std::to_string(manifest.step) + ")";
  if (manifest.layers.empty())
    throw data_error(where + " lists no layers with parameters in its manifest: nothing to read");
  auto tensors = read_checkpoint_tensors(found.path, manifest);
  checkpoint_parameters out;
  out.checkpoint = found.path;
  out.step = manifest.step;
  for (const auto& layer : manifest.layers) {
    for (const auto& p : layer.params) {
      const auto name = parameter_name(layer.index, p.name);
      const auto it = tensors.find(name);
      if (it == tensors.end())
        throw data_error(where + ": its manifest lists the parameter " + quote_user_path(name) +
                         " " + shape_to_string(p.shape) + " of layer " +
                         std::to_string(layer.index) + " (" + layer.type +
                         "), but no shard holds it");
      if (static_cast<std::int64_t>(it->second.size()) != element_count(p.shape))
        throw data_error(where + ": tensor " + quote_user_path(name) + " has " +
                         std::to_string(it->second.size()) + " values; the manifest's shape " +
                         shape_to_string(p.shape) + " needs " +
                         std::to_string(element_count(p.shape)));
      out.parameters.push_back({name, p.shape, std::move(it->second)});
    }
  }
  return out;
}

exported_weights export_weights(const std::string& checkpoint, const std::string& output,
                                dtype type) {
  TROUPE_CHECK(type == dtype::f32 || type == dtype::bf16,
               "export_weights writes f32 or bf16, not " << to_string(type));
  check_output_path(output, find_checkpoint(checkpoint).path);
  const auto read = read_checkpoint_parameters(checkpoint);
  exported_weights out;
  out.checkpoint = read.checkpoint;
  out.step = read.step;
  std::vector<safetensors_tensor_ref> refs;
  // bf16: each fp32 master rounded to nearest, ties to even (ops::to_bf16, as PyTorch's
  // .to(torch.bfloat16)).
  std::vector<std::vector<std::uint16_t>> rounded;
  const auto round = kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu);
  for (const auto& p : read.parameters) {
    if (type == dtype::bf16) {
      rounded.emplace_back(p.values.size());
      round(kernels::context{}, static_cast<std::int64_t>(p.values.size()), p.values.data(),
            rounded.back().data());
      refs.push_back({p.name, safetensors_dtype::bf16, p.shape, rounded.back().data()});
    } else {
      refs.push_back({p.name, safetensors_dtype::f32, p.shape, p.values.data()});
    }
    out.tensors.push_back(p.name);
    out.values += element_count(p.shape);
  }
  try {
    out.file = write_safetensors(output, refs, torch_metadata);
  } catch (const data_error&) {
    throw;
  } catch (const user_error& e) {  // exit 2: the user chose the path
    throw data_error(std::string{"cannot write the export: "} + e.what());
  }
  return out;
}

run_start weights_from(const std::string& path, const std::vector<model_layer>& model) {
  const std::string what = "[model] init_from: ";
  const std::string expects =
      " (init_from reads a safetensors file of F32 tensors named as the equivalent "
      "torch.nn.Sequential's state_dict, e.g. written by safetensors.torch.save_file or "
      "troupe export)";
  std::error_code error;
  if (!fs::exists(path, error))
    throw data_error(what + "the weights file " + quote_user_path(path) + " does not exist" +
                     expects);
  safetensors_file file;
  try {
    file = read_safetensors(path);
  } catch (const data_error& e) {
    throw data_error(what + e.what() + expects);
  }

  // Names first: which parameters are missing and which tensors are not the model's.
  std::vector<std::string> missing, extra;
  std::set<std::string> wanted;
  std::string listing;  // "0.weight (256, 784), 0.bias (256), ..."
  for (const auto& layer : model)
    for (const auto& p : layer.params) {
      const auto name = parameter_name(layer.index, p.name);
      wanted.insert(name);
      listing += (listing.empty() ? "" : ", ") + name + " " + shape_to_string(p.shape);
      if (file.find(name) == nullptr)
        missing.push_back("" + quote_user_path(name) + " " + shape_to_string(p.shape) +
                          " F32 (layer " + std::to_string(layer.index) + ", " + layer.type + ")");
    }
  bool state_among_extra = false;
  for (const auto& entry : file.entries())
    if (!wanted.count(entry.name)) {
      extra.push_back(entry.name);
      state_among_extra = state_among_extra || is_optimizer_state_name(entry.name);
    }
  std::sort(extra.begin(), extra.end());
  if (!missing.empty() || !extra.empty()) {
    std::string message =
        what + "the weights file " + quote_user_path(path) + " does not fit the model:";
    if (!missing.empty()) {
      message += " it has no tensor";
      for (std::size_t i = 0; i < missing.size() && i < 8; ++i)
        message += (i > 0 ? ", " : " ") + missing[i];
      if (missing.size() > 8)
        message += " and " + std::to_string(missing.size() - 8) + " more";
      message += extra.empty() ? ";" : ", and";
    }
    if (!extra.empty())
      message += " it has " + std::to_string(extra.size()) +
                 " tensor(s) the model does not: " + quoted_list(extra) + ";";
    if (missing.size() < wanted.size() || wanted.empty())  // else the list above was all
      message += " the model's parameters are " + (listing.empty() ? "none" : listing);
    else
      message += " none of the model's parameters is there";
    if (state_among_extra)
      message +=
          "; optimizer state is not read: a run from weights starts its optimizer "
          "afresh (to continue a troupe run with its state, use --resume)";
    else if (!missing.empty() && !extra.empty())
      message +=
          "; a model written as named submodules (self.fc1 = ...) saves 'fc1.weight': "
          "rename its keys to the Sequential's positions";
    throw data_error(message);
  }

  run_start start;
  start.step = 0;
  for (const auto& layer : model) {
    auto& out = start.layers[layer.index];
    for (const auto& p : layer.params) {
      const auto name = parameter_name(layer.index, p.name);
      const auto& entry = *file.find(name);
      const auto where = what + "the weights file " + quote_user_path(path) + ": tensor " +
                         quote_user_path(name) + " ";
      if (entry.dtype != safetensors_dtype::f32 && entry.dtype != safetensors_dtype::bf16)
        throw data_error(where + "is " + to_string(entry.dtype) +
                         "; expected F32 or BF16 (in PyTorch: {k: v.float() for k, v in "
                         "model.state_dict().items()})");
      if (entry.shape != p.shape) {
        const bool transposed = entry.shape.size() == 2 && p.shape.size() == 2 &&
                                entry.shape[0] == p.shape[1] && entry.shape[1] == p.shape[0];
        throw data_error(where + "has shape " + shape_to_string(entry.shape) + "; layer " +
                         std::to_string(layer.index) + " (" + quote_user_path(layer.type) +
                         ") needs " + shape_to_string(p.shape) +
                         (transposed ? " (transposed: a linear weight is (out, in), as "
                                       "torch.nn.Linear's)"
                                     : ""));
      }
      out[p.name] = file.floats(name);  // BF16 widened exactly
    }
  }
  return start;
}

}  // namespace troupe
