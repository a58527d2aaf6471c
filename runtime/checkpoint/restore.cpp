// restore.cpp: a checkpoint's tensors by name (pieces assembled), and resuming from one.
#include "runtime/checkpoint/restore.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

std::string parameter_name(std::int64_t layer, const std::string& param) {
  return std::to_string(layer) + "." + param;
}

std::vector<std::string> optimizer_state_names(optimizer_type type, double momentum) {
  switch (type) {
    case optimizer_type::sgd:
      return momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                           : std::vector<std::string>{};
    case optimizer_type::adam:
    case optimizer_type::adamw:
      return {"exp_avg", "exp_avg_sq"};
  }
  return {};
}

std::string piece_name(const std::string& name, std::int64_t begin) {
  return name + "@" + std::to_string(begin);
}

std::vector<std::string> outer_state_names(double outer_momentum) {
  std::vector<std::string> names{outer_params_state};
  if (outer_momentum != 0)
    names.push_back("outer_momentum");
  return names;
}

std::string replica_tensor_name(std::int64_t replica, const std::string& name) {
  return replica <= 0 ? name : "replica" + std::to_string(replica) + "/" + name;
}

namespace {

// "2.weight.exp_avg@1024" -> ("2.weight.exp_avg", 1024); a name without '@' -> (name, -1).
std::pair<std::string, std::int64_t> split_piece(const std::string& name) {
  const auto at = name.rfind('@');
  if (at == std::string::npos || at + 1 == name.size())
    return {name, -1};
  std::int64_t begin = 0;
  for (std::size_t i = at + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || begin > (std::int64_t{1} << 50))
      return {name, -1};
    begin = begin * 10 + (name[i] - '0');
  }
  return {name.substr(0, at), begin};
}

struct piece {
  std::int64_t begin;
  std::vector<float> values;
  std::string shard;
};

}  // namespace

std::map<std::string, std::vector<float>> read_checkpoint_tensors(
    const std::string& directory, const checkpoint_manifest& manifest) {
  std::map<std::string, std::vector<float>> whole;
  std::map<std::string, std::vector<piece>> pieces;
  std::map<std::string, std::string> whole_shard;
  // A whole tensor has its parameter's shape (an optimizer state, "2.weight.exp_avg",
  // its parameter's): the same values under another shape would load transposed.
  std::map<std::string, shape_t> shape_of;
  for (const auto& layer : manifest.layers)
    for (const auto& p : layer.params)
      shape_of[parameter_name(layer.index, p.name)] = p.shape;
  auto manifest_shape = [&](std::string name) -> const shape_t* {
    for (;;) {
      if (auto it = shape_of.find(name); it != shape_of.end())
        return &it->second;
      const auto dot = name.rfind('.');
      if (dot == std::string::npos)
        return nullptr;
      name.resize(dot);
    }
  };
  for (const auto& shard : manifest.shards) {
    const auto path = (std::filesystem::path(directory) / shard.file).string();
    const auto file = read_safetensors(path);
    for (const auto& entry : file.entries()) {
      if (entry.dtype != safetensors_dtype::f32)
        throw data_error("checkpoint shard '" + path + "': tensor '" + entry.name + "' is " +
                         to_string(entry.dtype) + "; expected F32");
      auto [name, begin] = split_piece(entry.name);
      if (begin < 0) {
        const auto* expected = manifest_shape(name);
        if (expected != nullptr && entry.shape != *expected)
          throw data_error("checkpoint shard '" + path + "': tensor '" + name + "' has shape " +
                           shape_to_string(entry.shape) + ", but the manifest gives its " +
                           "parameter the shape " + shape_to_string(*expected));
        whole[name] = file.values<float>(entry.name);
        whole_shard[name] = path;
      } else {
        pieces[name].push_back(piece{begin, file.values<float>(entry.name), path});
      }
    }
  }
  for (auto& [name, parts] : pieces) {
    if (whole.count(name))
      throw data_error("checkpoint '" + directory + "': tensor '" + name + "' is whole in '" +
                       whole_shard[name] + "' and in pieces in '" + parts.front().shard + "'");
    std::sort(parts.begin(), parts.end(),
              [](const piece& a, const piece& b) { return a.begin < b.begin; });
    std::vector<float> out;
    for (const auto& p : parts) {
      const auto end = static_cast<std::int64_t>(out.size());
      if (p.begin != end)
        throw data_error("checkpoint '" + directory + "': the pieces of tensor '" + name +
                         "' " + (p.begin < end ? "overlap" : "leave a gap") + " at element " +
                         std::to_string(std::min(p.begin, end)) + " (shard '" + p.shard + "')");
      out.insert(out.end(), p.values.begin(), p.values.end());
    }
    whole[name] = std::move(out);
  }
  return whole;
}

std::vector<checkpoint_layer> describe_model(const std::vector<model_layer>& model) {
  std::vector<checkpoint_layer> out;
  for (const auto& layer : model) {
    checkpoint_layer described;
    described.index = layer.index;
    described.type = layer.type;
    for (const auto& p : layer.params)
      described.params.push_back(checkpoint_param{p.name, safetensors_dtype::f32, p.shape});
    out.push_back(std::move(described));
  }
  return out;
}

namespace {

std::string describe_layers(const std::vector<checkpoint_layer>& layers) {
  // comma_list bounds it (a manifest's names may be anything, its layers thousands).
  std::vector<std::string> items;
  for (const auto& l : layers) {
    auto item = std::to_string(l.index) + " " + l.type.substr(0, limits::max_quoted_length);
    for (const auto& p : l.params)
      item += " " + p.name.substr(0, limits::max_quoted_length) + shape_to_string(p.shape);
    items.push_back(std::move(item));
  }
  return items.empty() ? "none" : comma_list(items);
}

}  // namespace

namespace {

/// Local SGD's replicas' own copies ("replica<r>/<layer>.<name>", Note [checkpoint
/// names]) into start.layers[layer] as "replica<r>/<name>", each checked against its
/// tensor's size; taken out of `tensors`.
void take_replica_copies(const std::string& where, const std::vector<model_layer>& model,
                         const std::vector<std::string>& state_names,
                         std::map<std::string, std::vector<float>>& tensors, run_start& start) {
  struct place {
    std::int64_t layer, size;
    std::string local;  // the name within the layer
  };
  std::map<std::string, place> known;  // by checkpoint name
  for (const auto& layer : model)
    for (const auto& p : layer.params) {
      std::vector<std::string> names{p.name};
      for (const auto& state : state_names)
        names.push_back(p.name + "." + state);
      for (const auto& local : names)
        known[parameter_name(layer.index, local)] = {layer.index, element_count(p.shape), local};
    }
  for (auto it = tensors.begin(); it != tensors.end();) {
    const auto& name = it->first;
    const auto slash = name.find('/');
    if (name.rfind("replica", 0) != 0 || slash == std::string::npos) {
      ++it;
      continue;
    }
    auto found = known.find(name.substr(slash + 1));  // "2.weight.exp_avg"
    if (found == known.end())
      throw data_error(where + " holds a replica's tensor '" + name +
                       "' that names no parameter or state of the config's model");
    const auto& p = found->second;
    if (static_cast<std::int64_t>(it->second.size()) != p.size)
      throw data_error(where + ": tensor '" + name + "' has " + std::to_string(it->second.size()) +
                       " values; expected " + std::to_string(p.size));
    start.layers[p.layer][name.substr(0, slash + 1) + p.local] = std::move(it->second);
    it = tensors.erase(it);
  }
}

}  // namespace

run_start resume_from(const std::string& directory, const checkpoint_manifest& manifest,
                      const std::vector<model_layer>& model,
                      const std::vector<std::string>& state_names,
                      const std::vector<std::string>& optional_states) {
  const auto where = "checkpoint '" + directory + "' (step " + std::to_string(manifest.step) + ")";
  // The model first: layer by layer, what differs.
  const auto expected = describe_model(model);
  const auto hint = std::string{"; the checkpoint holds "} + describe_layers(manifest.layers) +
                    ", the config's model " + describe_layers(expected);
  if (manifest.layers.size() != expected.size())
    throw data_error(where + " does not fit the model: it has " +
                     std::to_string(manifest.layers.size()) +
                     " layer(s) with parameters, the config's model " +
                     std::to_string(expected.size()) + hint);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& have = manifest.layers[i];
    const auto& want = expected[i];
    auto differs = [&](const std::string& what) {
      throw data_error(where + " does not fit the model: layer " + std::to_string(want.index) +
                       " " + what + hint);
    };
    if (have.index != want.index || have.type != want.type)
      differs("is a " + want.type + " in the config but layer " + std::to_string(have.index) +
              " is a " + quote_user_text(have.type) + " in the checkpoint");
    if (have.params.size() != want.params.size())
      differs("has " + std::to_string(want.params.size()) + " parameter(s), the checkpoint's " +
              std::to_string(have.params.size()));
    for (std::size_t p = 0; p < want.params.size(); ++p) {
      if (have.params[p].name != want.params[p].name)
        differs("parameter " + std::to_string(p) + " is '" + want.params[p].name +
                "', the checkpoint's '" + have.params[p].name + "'");
      if (have.params[p].dtype != safetensors_dtype::f32)
        differs("parameter '" + want.params[p].name + "' is F32, the checkpoint's " +
                to_string(have.params[p].dtype));
      if (have.params[p].shape != want.params[p].shape)
        differs("parameter '" + want.params[p].name + "' has shape " +
                shape_to_string(want.params[p].shape) + ", the checkpoint's " +
                shape_to_string(have.params[p].shape));
    }
  }
  // Then the tensors themselves: every parameter and the state this optimizer keeps.
  auto tensors = read_checkpoint_tensors(directory, manifest);
  run_start start;
  start.step = manifest.step;
  auto known_states = state_names;
  known_states.insert(known_states.end(), optional_states.begin(), optional_states.end());
  take_replica_copies(where, model, known_states, tensors, start);
  for (const auto& layer : model) {
    auto& out = start.layers[layer.index];
    for (const auto& p : layer.params) {
      std::vector<std::string> names{p.name};
      for (const auto& state : state_names)
        names.push_back(p.name + "." + state);
      for (const auto& state : optional_states)
        if (tensors.count(parameter_name(layer.index, p.name + "." + state)) != 0)
          names.push_back(p.name + "." + state);
      for (const auto& local : names) {
        const auto name = parameter_name(layer.index, local);
        auto found = tensors.find(name);
        if (found == tensors.end())
          throw data_error(where + " holds no tensor '" + name + "'" +
                           (local == p.name ? std::string{}
                                            : " (it was written by the " + manifest.optimizer +
                                                  " optimizer; the config's keeps this state)"));
        if (static_cast<std::int64_t>(found->second.size()) != element_count(p.shape))
          throw data_error(where + ": tensor '" + name + "' has " +
                           std::to_string(found->second.size()) + " values; expected " +
                           std::to_string(element_count(p.shape)) + " for shape " +
                           shape_to_string(p.shape));
        out[local] = std::move(found->second);
      }
    }
  }
  return start;
}

}  // namespace troupe
