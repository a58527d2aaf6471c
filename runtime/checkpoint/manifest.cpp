// manifest.cpp: manifest.json to and from checkpoint_manifest (manifest.hpp).
//
// Reading is strict: every field must be present with the right type and range, and an
// unknown field is refused (a manifest is written by troupe, so an unknown field means a
// newer format or damage, and a newer format bumps format_version). Every refusal is a
// data_error "manifest '<file>': field '<path.to.field>' ...". Nothing here touches shards.
#include "runtime/checkpoint/manifest.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/json_input.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/atomic_file.hpp"
#include "troupe/error.hpp"

namespace troupe {

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name != manifest_file_name && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string manifest_to_json(const checkpoint_manifest& manifest) {
  using json = nlohmann::ordered_json;
  json shards = json::array();
  for (const auto& s : manifest.shards)
    shards.push_back(
        {{"file", s.file}, {"bytes", s.bytes}, {"crc32", s.crc32}, {"tensors", s.tensors}});
  json layers = json::array();
  for (const auto& l : manifest.layers) {
    json params = json::array();
    for (const auto& p : l.params)
      params.push_back({{"name", p.name}, {"dtype", to_string(p.dtype)}, {"shape", p.shape}});
    layers.push_back({{"index", l.index}, {"type", l.type}, {"params", std::move(params)}});
  }
  const json out = {{"format_version", manifest.format_version},
                    {"step", manifest.step},
                    {"epoch", manifest.epoch},
                    {"config_hash", manifest.config_hash},
                    {"seed", manifest.seed},
                    {"data_epoch", manifest.data_epoch},
                    {"data_step_in_epoch", manifest.data_step_in_epoch},
                    {"lr_schedule_step", manifest.lr_schedule_step},
                    {"optimizer", manifest.optimizer},
                    {"shards", std::move(shards)},
                    {"layers", std::move(layers)}};
  auto with = out;  // the optional fields, only where they apply
  if (!manifest.feature_mean.empty()) {
    with["feature_mean"] = manifest.feature_mean;
    with["feature_std"] = manifest.feature_std;
  }
  if (!manifest.class_names.empty())
    with["class_names"] = manifest.class_names;
  if (manifest.validation > 0)
    with["validation"] = {{"fraction", manifest.validation}, {"seed", manifest.validation_seed}};
  return with.dump(2) + "\n";
}

namespace {

using json = nlohmann::json;

// The fields of one JSON object of the manifest, read by name and checked; `path` is
// where the object sits ("shards[2]"), for messages.
class object_reader {
 public:
  object_reader(const json& value, std::string path, const std::string& source)
      : value_(value), path_(std::move(path)), source_(source) {
    if (!value_.is_object())
      fail(path_.empty() ? "the manifest" : "field '" + path_ + "'",
           "is " + describe_json_value(value_) + "; expected an object");
  }

  [[noreturn]] void fail(const std::string& what, const std::string& message) const {
    throw data_error("manifest '" + source_ + "': " + what + " " + message);
  }

  std::string field_path(const std::string& name) const {
    return path_.empty() ? name : path_ + "." + name;
  }

  const json& field(const std::string& name) {
    seen_.insert(name);
    const auto found = value_.find(name);
    if (found == value_.end())
      fail("field '" + field_path(name) + "'", "is missing");
    return *found;
  }

  std::uint64_t integer(const std::string& name, std::uint64_t max) {
    const auto& v = field(name);
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max)
      fail("field '" + field_path(name) + "'", "is " + describe_json_value(v) +
                                                   "; expected an integer from 0 to " +
                                                   std::to_string(max));
    return v.get<std::uint64_t>();
  }

  std::int64_t count(const std::string& name) {
    return static_cast<std::int64_t>(integer(name, std::numeric_limits<std::int64_t>::max()));
  }

  std::string string(const std::string& name, bool may_be_empty) {
    const auto& v = field(name);
    if (!v.is_string() || (!may_be_empty && v.get_ref<const std::string&>().empty()))
      fail("field '" + field_path(name) + "'", "is " + describe_json_value(v) + "; expected a " +
                                                   (may_be_empty ? "string" : "non-empty string"));
    return v.get<std::string>();
  }

  /// A finite number.
  double numbers_in(const std::string& name) {
    const auto& v = field(name);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail("field '" + field_path(name) + "'",
           "is " + describe_json_value(v) + "; expected a finite number");
    return v.get<double>();
  }

  /// An array of finite numbers.
  std::vector<std::string> strings(const std::string& name) {
    std::vector<std::string> out;
    for (const auto& v : array(name)) {
      if (!v.is_string() || v.get<std::string>().empty() ||
          v.get<std::string>().size() > limits::max_name_length)
        fail("field '" + field_path(name) + "'",
             "holds " + describe_json_value(v) + "; expected names (strings of 1 to " +
                 std::to_string(limits::max_name_length) + " bytes)");
      out.push_back(v.get<std::string>());
    }
    return out;
  }

  std::vector<double> numbers(const std::string& name) {
    std::vector<double> out;
    for (const auto& v : array(name)) {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        fail("field '" + field_path(name) + "'",
             "holds " + describe_json_value(v) + "; expected finite numbers");
      out.push_back(v.get<double>());
    }
    return out;
  }

  const json& array(const std::string& name) {
    const auto& v = field(name);
    if (!v.is_array())
      fail("field '" + field_path(name) + "'",
           "is " + describe_json_value(v) + "; expected an array");
    return v;
  }

  // Refuses any field not read so far.
  void refuse_other_fields() const {
    for (const auto& item : value_.items())
      if (!seen_.count(item.key()))
        fail("field " + quote_user_text(field_path(item.key())),
             "is not one troupe writes (format_version " +
                 std::to_string(checkpoint_format_version) + "); is the manifest damaged?");
  }

 private:
  const json& value_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

std::string element_path(const std::string& path, std::size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

shape_t read_shape(object_reader& reader, const std::string& name) {
  const auto& shape = reader.array(name);
  const auto path = reader.field_path(name);
  if (shape.size() > safetensors_max_rank)
    reader.fail("field '" + path + "'", "has " + std::to_string(shape.size()) +
                                            " dimensions; expected at most " +
                                            std::to_string(safetensors_max_rank));
  shape_t out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (!shape[i].is_number_unsigned() ||
        shape[i].get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      reader.fail("field '" + element_path(path, i) + "'",
                  "is " + describe_json_value(shape[i]) + "; expected a non-negative integer");
    out.push_back(shape[i].get<std::int64_t>());
  }
  // One tensor's values at most (a product past 64 bits read as "needs 0" values).
  std::int64_t values = 1;
  for (auto d : out) {
    if (d != 0 && values > limits::max_tensor_elements / d) {
      reader.fail("field '" + path + "'",
                  "is " + shape_to_string(out) + ", more than the limit of " +
                      std::to_string(limits::max_tensor_elements) + " values in one tensor");
    }
    values *= d;
  }
  return out;
}

checkpoint_shard read_shard(const json& value, const std::string& path, const std::string& source,
                            std::map<std::string, std::string>& shard_of_tensor) {
  object_reader reader{value, path, source};
  checkpoint_shard shard;
  shard.file = reader.string("file", false);
  if (!is_plain_file_name(shard.file))
    reader.fail("field '" + path + ".file'",
                "is " + quote_user_text(shard.file) +
                    "; expected a plain file name in the checkpoint's directory (no '/', "
                    "not '.' or '..', not manifest.json)");
  shard.bytes = reader.integer("bytes", std::numeric_limits<std::uint64_t>::max());
  shard.crc32 = static_cast<std::uint32_t>(reader.integer("crc32", 0xFFFFFFFFu));
  const auto& tensors = reader.array("tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto where = "field '" + element_path(path + ".tensors", i) + "'";
    if (!tensors[i].is_string() || tensors[i].get_ref<const std::string&>().empty())
      reader.fail(where, "is " + describe_json_value(tensors[i]) +
                             "; expected a tensor name (a non-empty string)");
    const auto name = tensors[i].get<std::string>();
    const auto [it, fresh] = shard_of_tensor.emplace(name, shard.file);
    if (!fresh)
      reader.fail(where, "names the tensor " + quote_user_text(name) + ", which shard " +
                             quote_user_text(it->second) +
                             " holds too; expected each tensor "
                             "in one shard");
    shard.tensors.push_back(name);
  }
  reader.refuse_other_fields();
  return shard;
}

checkpoint_layer read_layer(const json& value, const std::string& path, const std::string& source) {
  object_reader reader{value, path, source};
  checkpoint_layer layer;
  layer.index = reader.count("index");
  layer.type = reader.string("type", false);
  const auto& params = reader.array("params");
  std::set<std::string> names;
  for (std::size_t i = 0; i < params.size(); ++i) {
    object_reader param_reader{params[i], element_path(path + ".params", i), source};
    checkpoint_param param;
    param.name = param_reader.string("name", false);
    if (!names.insert(param.name).second)
      param_reader.fail("field '" + param_reader.field_path("name") + "'",
                        "repeats the parameter " + quote_user_text(param.name) +
                            "; expected each parameter of a layer once");
    const auto type = param_reader.string("dtype", false);
    const auto known = safetensors_dtype_named(type);
    if (!known)
      param_reader.fail("field '" + param_reader.field_path("dtype") + "'",
                        "is " + quote_user_text(type) + "; expected F32, F64, I32 or I64");
    param.dtype = *known;
    param.shape = read_shape(param_reader, "shape");
    param_reader.refuse_other_fields();
    layer.params.push_back(std::move(param));
  }
  reader.refuse_other_fields();
  return layer;
}

}  // namespace

checkpoint_manifest manifest_from_json(const std::string& text, const std::string& source) {
  const auto parsed =
      parse_untrusted_json(text.data(), text.data() + text.size(), "manifest '" + source + "'");
  object_reader reader{parsed, "", source};
  checkpoint_manifest m;
  // The version first: a newer manifest may differ in any other field.
  const auto& version = reader.field("format_version");
  if (!version.is_number_integer())
    reader.fail("field 'format_version'",
                "is " + describe_json_value(version) + "; expected an integer");
  const bool positive = version.is_number_unsigned() && version.get<std::uint64_t>() >= 1;
  if (positive && version.get<std::uint64_t>() > checkpoint_format_version)
    reader.fail("field 'format_version'",
                "is " + version.dump() + ": the checkpoint was written by a newer troupe; " +
                    "this troupe reads format_version " +
                    std::to_string(checkpoint_format_version) +
                    " (resume with the troupe that wrote it, or a newer one)");
  if (!positive)
    reader.fail("field 'format_version'", "is " + version.dump() + "; expected " +
                                              std::to_string(checkpoint_format_version) +
                                              " (no troupe wrote it)");
  m.format_version = static_cast<int>(version.get<std::uint64_t>());
  m.step = reader.count("step");
  m.epoch = reader.count("epoch");
  m.config_hash = reader.string("config_hash", true);
  m.seed = reader.integer("seed", std::numeric_limits<std::uint64_t>::max());
  m.data_epoch = reader.count("data_epoch");
  m.data_step_in_epoch = reader.count("data_step_in_epoch");
  m.lr_schedule_step = reader.count("lr_schedule_step");
  m.optimizer = reader.string("optimizer", true);
  if (parsed.contains("validation")) {
    object_reader held{reader.field("validation"), "validation", source};
    const auto fraction = held.numbers_in("fraction");
    if (!(fraction > 0 && fraction < 1))
      held.fail("field 'validation.fraction'", "is " + std::to_string(fraction) +
                                                   "; expected a number in (0, 1)");
    m.validation = fraction;
    m.validation_seed = held.integer("seed", std::numeric_limits<std::uint64_t>::max());
    held.refuse_other_fields();
  }
  if (parsed.contains("class_names"))
    m.class_names = reader.strings("class_names");
  if (parsed.contains("feature_mean") || parsed.contains("feature_std")) {
    m.feature_mean = reader.numbers("feature_mean");
    m.feature_std = reader.numbers("feature_std");
    if (m.feature_mean.size() != m.feature_std.size())
      reader.fail("field 'feature_std'", "has " + std::to_string(m.feature_std.size()) +
                                             " values, and feature_mean " +
                                             std::to_string(m.feature_mean.size()));
  }

  const auto& shards = reader.array("shards");
  std::map<std::string, std::string> shard_of_tensor;
  std::set<std::string> files;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    m.shards.push_back(read_shard(shards[i], element_path("shards", i), source, shard_of_tensor));
    if (!files.insert(m.shards.back().file).second)
      reader.fail("field '" + element_path("shards", i) + ".file'",
                  "repeats the file " + quote_user_text(m.shards.back().file) +
                      "; expected each shard file once");
  }
  const auto& layers = reader.array("layers");
  std::set<std::int64_t> indices;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    m.layers.push_back(read_layer(layers[i], element_path("layers", i), source));
    if (!indices.insert(m.layers.back().index).second)
      reader.fail("field '" + element_path("layers", i) + ".index'",
                  "repeats the layer index " + std::to_string(m.layers.back().index) +
                      "; expected each layer once");
  }
  reader.refuse_other_fields();
  return m;
}

void write_manifest(const std::string& path, const checkpoint_manifest& manifest) {
  write_file_atomically(path, manifest_to_json(manifest));
}

checkpoint_manifest read_manifest(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status))
    throw data_error("manifest '" + path + "' does not exist");
  if (!std::filesystem::is_regular_file(status))
    throw data_error("manifest '" + path + "' is not a regular file");
  const auto size = std::filesystem::file_size(path, error);
  if (!error && size > manifest_max_bytes)
    throw data_error("manifest '" + path + "' is " + std::to_string(size) +
                     " bytes; expected at most " + std::to_string(manifest_max_bytes) +
                     " (is it a manifest?)");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw data_error("manifest '" + path + "' cannot be opened for reading (check permissions)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw data_error("manifest '" + path + "' cannot be read: I/O error");
  return manifest_from_json(text.str(), path);
}

}  // namespace troupe
