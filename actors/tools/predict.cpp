// predict.cpp: a trained model's outputs for a user's inputs (see predict.hpp).
#include "actors/tools/predict.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "actors/session/prepare.hpp"
#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/atomic_file.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/checkpoint/safetensors_arrays.hpp"
#include "runtime/data/csv.hpp"
#include "runtime/data/images.hpp"
#include "runtime/data/npy.hpp"
#include "runtime/data/npz.hpp"
#include "runtime/data/tokens.hpp"
#include "runtime/graph/host_model.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/model/loss.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         std::equal(suffix.rbegin(), suffix.rend(), text.rbegin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

/// The rows to predict from: a .npy file's (or an .npz's or a safetensors file's features
/// array), read as batches gather them, or a CSV table's, or images, normalised as the
/// model's training data was.
dataset input_rows(const run_config& config, const std::string& path,
                   const checkpoint_manifest& manifest, std::vector<std::string>& files) {
  const auto& d = config.data;
  if (d.source == data_source::images) {  // one image, or a folder of them
    const auto settings = with_image_size(image_settings_of(config), d.path);
    files = images_at(path);
    dataset out;
    out.count = static_cast<std::int64_t>(files.size());
    out.features = settings.channels * settings.height * settings.width;
    out.rows = open_image_rows(files, settings, false);
    return out;
  }
  feature_normalisation normalisation{d.scale, d.mean, d.std};
  if (d.source == data_source::fashion_mnist)  // the IDX source's, for raw pixels (dataset.hpp)
    normalisation = feature_normalisation{{1.0 / 255}, {fashion_mnist_mean}, {fashion_mnist_std}};
  if (d.standardize) {
    if (manifest.feature_mean.empty())
      throw data_error("the config says [data] normalize = \"standard\", but the checkpoint "
                       "records no feature statistics (was it trained with another config?)");
    normalisation = feature_normalisation{{1.0}, manifest.feature_mean, manifest.feature_std};
  }
  if (d.source == data_source::tokens) {  // a token file, read as tiled windows
    token_source tokens;
    tokens.train_path = d.path;
    tokens.vocabulary = d.vocabulary;
    const auto vocabulary = vocabulary_of(tokens);
    auto ids = open_token_file(path, d.token_dtype, vocabulary);
    const auto n = ids->size();
    return token_dataset(std::move(ids), 0, n, d.context, vocabulary, token_windows::tiled,
                         quote_user_path(path));
  }
  const bool npz = ends_with(path, ".npz"), safetensors = ends_with(path, ".safetensors");
  if (ends_with(path, ".npy") || npz || safetensors) {
    // An archive's features array: the config's name for it, or "x".
    const bool named = d.source == data_source::npz || d.source == data_source::safetensors;
    const auto name = named && !d.features.empty() ? d.features : std::string("x");
    const auto array = npz           ? npz_array(path, name)
                       : safetensors ? safetensors_array(path, name)
                                     : npy_file_array(path);
    dataset out;
    out.rows = open_npy_rows(array, normalisation);
    out.count = array.header.shape.empty() ? 0 : array.header.shape.front();
    out.features = out.count > 0 ? array.header.elements / out.count : 0;
    return out;
  }
  csv_columns columns;
  if (d.source == data_source::csv)
    columns = csv_columns{d.target_columns, d.feature_columns, d.delimiter};
  columns.targets_optional = true;
  return read_csv(path, columns, target_kind::values, normalisation);
}

/// The checkpoint's parameters for the config's model, per layer in parameters() order.
std::vector<std::vector<std::vector<float>>> checkpoint_parameters(
    const run_config& config, const std::vector<shape_t>& shapes, const checkpoint_info& found,
    const checkpoint_manifest& manifest) {
  std::vector<model_layer> model;
  for (std::size_t i = 0; i < config.model.layers.size(); ++i) {
    auto params = create_layer(config.model.layers[i])->parameters(shapes[i]);
    if (!params.empty())
      model.push_back(model_layer{static_cast<std::int64_t>(i), config.model.layers[i].type,
                                  std::move(params)});
  }
  const auto start = resume_from(found.path, manifest, model, {});
  std::vector<std::vector<std::vector<float>>> out(config.model.layers.size());
  for (const auto& layer : model)
    for (const auto& param : layer.params)
      out[static_cast<std::size_t>(layer.index)].push_back(
          start.layers.at(layer.index).at(param.name));
  return out;
}

/// Probabilities over each group of `classes` values, in place (stable: max subtracted).
void softmax_rows(float* values, std::int64_t count, std::int64_t classes) {
  for (std::int64_t r = 0; r < count; ++r) {
    float* row = values + r * classes;
    const float max = *std::max_element(row, row + classes);
    double sum = 0;
    for (std::int64_t c = 0; c < classes; ++c)
      sum += std::exp(static_cast<double>(row[c]) - max);
    for (std::int64_t c = 0; c < classes; ++c)
      row[c] = static_cast<float>(std::exp(static_cast<double>(row[c]) - max) / sum);
  }
}

/// The CSV header: an image's file, a classifier's argmax (and its class name) and one column
/// a class, or the targets' names.
std::string csv_header(const run_config& config, const loss_spec& spec, std::int64_t width,
                       bool softmax, bool files, bool class_names) {
  std::string line = files ? "file," : "";
  const bool classes = spec.targets == target_kind::class_ids;
  const auto& named = config.data.target_columns;
  const bool use_names = !classes && config.data.source == data_source::csv &&
                         static_cast<std::int64_t>(named.size()) == width;
  if (classes)
    line += class_names ? "class,class_name" : "class";
  for (std::int64_t k = 0; k < width; ++k) {
    line += line.empty() || line.back() == ',' ? "" : ",";
    if (use_names)
      line += named[static_cast<std::size_t>(k)];
    else
      line += (classes ? (softmax ? "p_" : "logit_") : "y_") + std::to_string(k);
  }
  return line + "\n";
}

/// A CSV field: as it is, or quoted (RFC 4180) when it holds a comma, a quote or a line end.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos)
    return text;
  std::string out = "\"";
  for (char c : text)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

/// A batch of outputs as CSV lines: an image's file (`files`, from the batch's first), a
/// classifier's argmax (and its name from `class_names`) first.
std::string csv_lines(const float* values, std::int64_t count, std::int64_t width, bool classes,
                      const std::string* files, const std::vector<std::string>& class_names) {
  std::string text;
  char number[32];
  for (std::int64_t r = 0; r < count; ++r) {
    const float* row = values + r * width;
    std::string line = files ? csv_field(files[r]) + "," : "";
    if (classes) {
      const auto best = std::max_element(row, row + width) - row;
      line += std::to_string(best);
      if (!class_names.empty())
        line += "," + csv_field(best < static_cast<std::ptrdiff_t>(class_names.size())
                                    ? class_names[static_cast<std::size_t>(best)]
                                    : std::string());
    }
    for (std::int64_t k = 0; k < width; ++k) {
      std::snprintf(number, sizeof number, "%.9g", static_cast<double>(row[k]));
      line += (line.empty() || line.back() == ',' ? "" : ",") + std::string(number);
    }
    text += line + "\n";
  }
  return text;
}

}  // namespace

prediction_summary predict(const run_config& config, const prediction_request& request,
                           std::FILE* stream) {
  if (config.is_explicit())
    throw user_error("troupe predict reads the model from [[model.layers]]; give the shorthand "
                     "config the explicit one was ejected from");
  if (request.batch < 1 || request.batch > limits::max_samples)
    throw user_error("troupe predict: --batch must be in [1, " +
                     std::to_string(limits::max_samples) + "]");
  const auto spec = loss_spec_of(config.model);
  const bool classes = spec.targets == target_kind::class_ids;
  if (request.softmax && !classes)
    throw user_error("troupe predict: --softmax needs a loss of class labels; [model] loss = \"" +
                     config.model.loss + "\" compares float targets");
  const auto found = resolve_resume_path(request.checkpoint);
  const auto manifest = verify_checkpoint(found.path);
  std::vector<std::string> files;  // an image source's inputs, by row
  const auto input = input_rows(config, request.input, manifest, files);
  const auto& class_names = manifest.class_names;
  const auto shapes = layer_shapes(config, input.features);
  const host_model model{config.model.layers, resolve_inputs(config.model), shapes,
                         checkpoint_parameters(config, shapes, found, manifest)};
  const auto& out_shape = shapes.back();
  const auto width = element_count(out_shape);
  const auto classes_a_row = out_shape.empty() ? 1 : out_shape.back();

  // Runs the model batch by batch, handing each batch's outputs to `sink`.
  auto run = [&](const std::function<void(const float*, std::int64_t, std::int64_t)>& sink) {
    std::vector<std::int64_t> picked(static_cast<std::size_t>(request.batch));
    for (std::int64_t first = 0; first < input.count; first += request.batch) {
      const auto count = std::min(request.batch, input.count - first);
      std::iota(picked.begin(), picked.begin() + count, first);
      auto x = tensor::empty({count, input.features});
      input.gather(picked.data(), 0, static_cast<std::size_t>(count), x.f32());
      auto y = model.forward(x);
      if (request.softmax)
        softmax_rows(y.f32(), count * width / classes_a_row, classes_a_row);
      sink(y.f32(), first, count);
    }
  };
  const bool npy = ends_with(request.output, ".npy");
  auto write_to = [&](const std::function<void(const void*, std::size_t)>& write) {
    if (npy) {
      shape_t shape{input.count};
      shape.insert(shape.end(), out_shape.begin(), out_shape.end());
      const auto header = npy_float_header(shape);
      write(header.data(), header.size());
      run([&](const float* values, std::int64_t, std::int64_t count) {
        write(values, static_cast<std::size_t>(count * width) * sizeof(float));
      });
      return;
    }
    const auto header =
        csv_header(config, spec, width, request.softmax, !files.empty(), !class_names.empty());
    write(header.data(), header.size());
    run([&](const float* values, std::int64_t first, std::int64_t count) {
      const auto* names = files.empty() ? nullptr : files.data() + first;
      const auto text = csv_lines(values, count, width, classes, names, class_names);
      write(text.data(), text.size());
    });
  };
  if (request.output.empty())
    write_to([&](const void* data, std::size_t size) { std::fwrite(data, 1, size, stream); });
  else
    write_file_atomically(request.output, [&](atomic_file_writer& file) {
      write_to([&](const void* data, std::size_t size) { file.write(data, size); });
    });
  return prediction_summary{found.path, found.step, input.count, width};
}

}  // namespace troupe
