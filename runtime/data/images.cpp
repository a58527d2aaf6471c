// images.cpp: image folders, PNG and JPEG decoding, resizing, augmentation (images.hpp).
#include "runtime/data/images.hpp"

#include <csetjmp>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/base/limits.hpp"
#include "runtime/base/random.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool decodable(const std::string& extension) {
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

/// Extensions of images troupe does not decode (torchvision's IMG_EXTENSIONS and a few more).
bool other_image(const std::string& extension) {
  for (const char* e : {".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".heic",
                        ".avif", ".jxl", ".jp2"})
    if (extension == e)
      return true;
  return false;
}

/// The images under a class folder, in sorted path order (links followed, as ImageFolder).
std::vector<std::string> images_under(const fs::path& folder, std::size_t already) {
  std::vector<std::string> out;
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink,
                                      error), end;
  for (; !error && it != end; it.increment(error)) {
    if (it.depth() > 32)
      throw data_error(quote_user_path(folder.string()) +
                       ": folders nested more than 32 deep (a link "
                       "that loops?)");
    if (!it->is_regular_file(error))
      continue;
    const auto extension = lower(it->path().extension().string());
    if (other_image(extension))
      throw data_error(quote_user_path(it->path().string()) + ": a " + extension.substr(1) +
                       " image; troupe decodes PNG and JPEG (convert it, e.g. with PIL: "
                       "Image.open(f).save(g.png))");
    if (!decodable(extension))
      continue;
    if (already + out.size() >= static_cast<std::size_t>(limits::max_samples))
      throw data_error(quote_user_path(folder.string()) + ": more than " +
                       std::to_string(limits::max_samples) + " images (the limit)");
    out.push_back(it->path().string());
  }
  if (error)
    throw data_error(quote_user_path(folder.string()) + ": cannot list it: " + error.message());
  std::sort(out.begin(), out.end());
  return out;
}

// ---- decoding ----

void check_size(std::int64_t width, std::int64_t height, const std::string& name) {
  if (width < 1 || height < 1 || width > limits::max_image_side || height > limits::max_image_side ||
      width * height > limits::max_image_pixels)
    throw data_error(name + ": an image of " + std::to_string(width) + " x " +
                     std::to_string(height) + " pixels; troupe decodes images of 1 to " +
                     std::to_string(limits::max_image_side) + " pixels a side and at most " +
                     std::to_string(limits::max_image_pixels) + " pixels");
}

/// What the first `size` bytes of an image file say: PNG or JPEG, and a size within the
/// limits where they hold it (a JPEG's frame header may lie past them: then decoding checks).
void image_header(const unsigned char* bytes, std::size_t size, const std::string& name) {
  static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto big_endian = [bytes](std::size_t at, int count) {
    std::int64_t value = 0;
    for (int i = 0; i < count; ++i)
      value = (value << 8) | bytes[at + static_cast<std::size_t>(i)];
    return value;
  };
  if (size >= 8 && std::memcmp(bytes, png_magic, 8) == 0) {
    if (size < 24 || std::memcmp(bytes + 12, "IHDR", 4) != 0)
      throw data_error(name + ": not a valid PNG: its header (IHDR) is missing or truncated");
    check_size(big_endian(16, 4), big_endian(20, 4), name);
    return;
  }
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    // Markers from byte 2: FF, a code, a big-endian length that counts itself.
    for (std::size_t at = 2; at + 4 <= size;) {
      if (bytes[at] != 0xff)
        throw data_error(name + ": a corrupt JPEG: no marker at byte " + std::to_string(at));
      if (bytes[at + 1] == 0xff) {  // a fill byte before a marker
        ++at;
        continue;
      }
      const int code = bytes[at + 1];
      if ((code >= 0xd0 && code <= 0xd7) || code == 0x01) {  // markers without a length
        at += 2;
        continue;
      }
      const bool frame = code >= 0xc0 && code <= 0xcf && code != 0xc4 && code != 0xc8 && code != 0xcc;
      if (frame && at + 9 <= size) {
        check_size(big_endian(at + 7, 2), big_endian(at + 5, 2), name);
        return;
      }
      at += 2 + static_cast<std::size_t>(big_endian(at + 2, 2));
    }
    return;
  }
  throw data_error(name + ": " + (size == 0 ? std::string("an empty file")
                                            : "neither a PNG nor a JPEG (by its first bytes)") +
                   "; troupe decodes PNG and JPEG images");
}

decoded_image decode_png(const unsigned char* bytes, std::size_t size, std::int64_t channels,
                         const std::string& name) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes, size))
    throw data_error(name + ": not a valid PNG: " + image.message);
  struct freed {
    png_image* image;
    ~freed() { png_image_free(image); }
  } free_it{&image};
  decoded_image out;
  out.width = image.width;
  out.height = image.height;
  out.channels = channels;
  check_size(out.width, out.height, name);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  // Transparency is composited onto black (no background given).
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr))
    throw data_error(name + ": a corrupt PNG: " + image.message);
  return out;
}

struct jpeg_failure {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_jpeg_error(j_common_ptr info) {
  auto* failure = reinterpret_cast<jpeg_failure*>(info->err);
  (*info->err->format_message)(info, failure->message);
  std::longjmp(failure->jump, 1);
}

void ignore_jpeg_message(j_common_ptr) {}

/// libjpeg reports errors by longjmp: nothing in this frame has a destructor to skip (the
/// image and its size check live in the caller's frame). Returns false with `message` set.
bool decode_jpeg_into(const unsigned char* bytes, std::size_t size, std::int64_t channels,
                      decoded_image* out, char* message, bool* too_large) {
  jpeg_decompress_struct info;
  jpeg_failure failure;
  info.err = jpeg_std_error(&failure.manager);
  failure.manager.error_exit = on_jpeg_error;
  failure.manager.output_message = ignore_jpeg_message;
  if (setjmp(failure.jump)) {
    std::memcpy(message, failure.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  const std::int64_t width = info.image_width, height = info.image_height;
  if (width < 1 || height < 1 || width > limits::max_image_side ||
      height > limits::max_image_side || width * height > limits::max_image_pixels) {
    out->width = width;
    out->height = height;
    *too_large = true;
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_start_decompress(&info);
  out->width = info.output_width;
  out->height = info.output_height;
  out->channels = channels;
  out->pixels.resize(static_cast<std::size_t>(out->width * out->height * channels));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out->pixels.data() + info.output_scanline * out->width * channels;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

decoded_image decode_jpeg(const unsigned char* bytes, std::size_t size, std::int64_t channels,
                          const std::string& name) {
  decoded_image out;
  char message[JMSG_LENGTH_MAX] = {};
  bool too_large = false;
  if (!decode_jpeg_into(bytes, size, channels, &out, message, &too_large)) {
    if (too_large)
      check_size(out.width, out.height, name);
    throw data_error(name + ": a corrupt or unsupported JPEG: " + message);
  }
  return out;
}

// ---- resizing: separable, a triangle filter widened by the scale when shrinking ----

struct axis_filter {
  std::vector<std::int64_t> first;  // (out) the first source pixel of each output pixel
  std::vector<std::int64_t> taps;   // (out) how many follow it
  std::vector<double> weights;      // (out, max_taps)
  std::int64_t max_taps = 0;
};

axis_filter filter_for(std::int64_t in, std::int64_t out) {
  axis_filter f;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = std::max(scale, 1.0);  // the triangle's half-width, in source pixels
  f.max_taps = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  f.first.resize(static_cast<std::size_t>(out));
  f.taps.resize(static_cast<std::size_t>(out));
  f.weights.assign(static_cast<std::size_t>(out * f.max_taps), 0.0);
  for (std::int64_t x = 0; x < out; ++x) {
    const double centre = (static_cast<double>(x) + 0.5) * scale;
    const auto lo = std::max<std::int64_t>(0, static_cast<std::int64_t>(centre - support + 0.5));
    const auto hi = std::min<std::int64_t>(in, static_cast<std::int64_t>(centre + support + 0.5));
    double* w = f.weights.data() + x * f.max_taps;
    double total = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      const double t = std::abs((static_cast<double>(i) + 0.5 - centre) / support);
      w[i - lo] = std::max(0.0, 1.0 - t);
      total += w[i - lo];
    }
    for (std::int64_t i = lo; i < hi; ++i)
      w[i - lo] = total > 0 ? w[i - lo] / total : 0.0;
    f.first[static_cast<std::size_t>(x)] = lo;
    f.taps[static_cast<std::size_t>(x)] = hi - lo;
  }
  return f;
}

/// Per channel: `values` of one value or one a channel, else data_error.
std::vector<double> per_channel(const std::vector<double>& values, std::int64_t channels,
                                const char* key) {
  if (values.size() == 1)
    return std::vector<double>(static_cast<std::size_t>(channels), values.front());
  if (static_cast<std::int64_t>(values.size()) != channels)
    throw data_error(std::string("[data] ") + key + ": " + std::to_string(values.size()) +
                     " values for images of " + std::to_string(channels) +
                     " channel(s); give one value, or one a channel");
  return values;
}

/// The images of one split as samples (images.hpp): decoded, resized, augmented and
/// normalised as a batch gathers them.
class image_rows final : public feature_rows {
 public:
  image_rows(std::vector<std::string> files, const image_settings& settings, bool augment)
      : files_(std::move(files)), s_(settings), augment_(augment) {
    scale_ = per_channel(s_.scale, s_.channels, "scale");
    mean_ = per_channel(s_.mean, s_.channels, "mean");
    std_ = per_channel(s_.std, s_.channels, "std");
  }

  void gather(const std::int64_t* picked, std::size_t first, std::size_t last,
              float* out) const override {
    read(picked, first, last, out, -1);
  }

  void gather_in_epoch(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
                       std::int64_t epoch) const override {
    read(picked, first, last, out, augment_ ? epoch : -1);
  }

 private:
  /// Rows picked[first .. last), augmented as epoch `epoch` says when it is not negative.
  void read(const std::int64_t* picked, std::size_t first, std::size_t last, float* out,
            std::int64_t epoch) const {
    const auto h = s_.height, w = s_.width, c = s_.channels;
    for (std::size_t i = first; i < last; ++i, out += c * h * w) {
      const auto row = picked[i];
      const auto& file = files_[static_cast<std::size_t>(row)];
      const auto pixels = resize_image(decode_image(file, c), h, w);  // (H, W, C)
      std::int64_t top = s_.crop_padding, left = s_.crop_padding;  // no shift
      bool flip = false;
      if (epoch >= 0) {
        keyed_random random{s_.seed, 0x1a6e5eedull + static_cast<std::uint64_t>(epoch),
                            static_cast<std::uint64_t>(row)};
        if (s_.crop_padding > 0) {
          top = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(2 * s_.crop_padding + 1)));
          left = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(2 * s_.crop_padding + 1)));
        }
        flip = s_.flip && random.uniform() < 0.5;
      }
      // Output (y, x) reads the padded image at (y + top, x + left): the source pixel
      // (y + top - p, x + left - p), or the padding's 0 outside it.
      for (std::int64_t k = 0; k < c; ++k)
        for (std::int64_t y = 0; y < h; ++y)
          for (std::int64_t x = 0; x < w; ++x) {
            const auto sy = y + top - s_.crop_padding;
            const auto sx = (flip ? w - 1 - x : x) + left - s_.crop_padding;
            const double v = sy < 0 || sy >= h || sx < 0 || sx >= w
                                 ? 0.0
                                 : pixels[static_cast<std::size_t>((sy * w + sx) * c + k)];
            const auto ku = static_cast<std::size_t>(k);
            out[(k * h + y) * w + x] = static_cast<float>((v * scale_[ku] - mean_[ku]) / std_[ku]);
          }
    }
  }

  std::vector<std::string> files_;
  image_settings s_;
  bool augment_;
  std::vector<double> scale_, mean_, std_;  // (C) each
};

/// Reads the first bytes of each file and checks what a header says: PNG or JPEG, a size
/// within the limits. The body is decoded (and any damage in it found) as batches read it.
void check_headers(const std::vector<std::string>& files) {
  std::vector<char> head(64 << 10);
  for (const auto& file : files) {
    std::FILE* in = std::fopen(file.c_str(), "rb");
    if (in == nullptr)
      throw data_error(quote_user_path(file) + ": cannot open: " + std::strerror(errno));
    const auto got = std::fread(head.data(), 1, head.size(), in);
    std::fclose(in);
    const auto* bytes = reinterpret_cast<const unsigned char*>(head.data());
    image_header(bytes, got, quote_user_path(file));
  }
}

}  // namespace

std::vector<float> resize_image(const decoded_image& image, std::int64_t height, std::int64_t width) {
  const auto c = image.channels;
  std::vector<float> out(static_cast<std::size_t>(height * width * c));
  if (height == image.height && width == image.width) {
    std::copy(image.pixels.begin(), image.pixels.end(), out.begin());
    return out;
  }
  // Rows first (source height x output width), then columns.
  const auto across = filter_for(image.width, width);
  std::vector<double> middle(static_cast<std::size_t>(image.height * width * c));
  for (std::int64_t y = 0; y < image.height; ++y)
    for (std::int64_t x = 0; x < width; ++x) {
      const double* w = across.weights.data() + x * across.max_taps;
      const auto lo = across.first[static_cast<std::size_t>(x)];
      for (std::int64_t k = 0; k < c; ++k) {
        double sum = 0;
        for (std::int64_t t = 0; t < across.taps[static_cast<std::size_t>(x)]; ++t)
          sum += w[t] * image.pixels[static_cast<std::size_t>((y * image.width + lo + t) * c + k)];
        middle[static_cast<std::size_t>((y * width + x) * c + k)] = sum;
      }
    }
  const auto down = filter_for(image.height, height);
  for (std::int64_t y = 0; y < height; ++y) {
    const double* w = down.weights.data() + y * down.max_taps;
    const auto lo = down.first[static_cast<std::size_t>(y)];
    for (std::int64_t x = 0; x < width; ++x)
      for (std::int64_t k = 0; k < c; ++k) {
        double sum = 0;
        for (std::int64_t t = 0; t < down.taps[static_cast<std::size_t>(y)]; ++t)
          sum += w[t] * middle[static_cast<std::size_t>(((lo + t) * width + x) * c + k)];
        out[static_cast<std::size_t>((y * width + x) * c + k)] = static_cast<float>(sum);
      }
  }
  return out;
}

decoded_image decode_image(const unsigned char* bytes, std::size_t size, std::int64_t channels,
                           const std::string& name) {
  TROUPE_CHECK(channels == 1 || channels == 3, "decode_image: " << channels << " channels");
  image_header(bytes, size, name);  // PNG or JPEG, or a data_error
  if (bytes[0] == 0x89)
    return decode_png(bytes, size, channels, name);
  return decode_jpeg(bytes, size, channels, name);
}

decoded_image decode_image(const std::string& path, std::int64_t channels) {
  const auto bytes = read_file_capped(path, limits::max_image_file_bytes, "image file");
  return decode_image(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), channels,
                      quote_user_path(path));
}

image_folder scan_image_folder(const std::string& path, const std::vector<std::string>& classes) {
  std::error_code error;
  if (!fs::is_directory(path, error))
    throw data_error(quote_user_path(path) +
                     " is not a folder (an image folder holds a folder a class)");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(path, error))
    if (entry.is_directory(error) && entry.path().filename().string().front() != '.')
      names.push_back(entry.path().filename().string());
  if (error)
    throw data_error(quote_user_path(path) + ": cannot list it: " + error.message());
  std::sort(names.begin(), names.end());
  if (names.empty())
    throw data_error(quote_user_path(path) +
                     " holds no class folders; an image folder holds a folder "
                     "a class, each holding that class's images (torchvision's "
                     "ImageFolder layout)");
  image_folder out;
  out.classes = classes.empty() ? names : classes;
  std::map<std::string, std::int32_t> index;
  for (std::size_t i = 0; i < out.classes.size(); ++i)
    index[out.classes[i]] = static_cast<std::int32_t>(i);
  for (const auto& name : names) {
    const auto found = index.find(name);
    if (found == index.end())
      throw data_error(quote_user_path(path) + ": class folder " + quote_user_path(name) +
                       " is not a class of the training folder (" + std::to_string(classes.size()) +
                       " classes, " + quote_user_path(classes.front()) + " first)");
    const auto files = images_under(fs::path(path) / name, out.files.size());
    if (files.empty())
      throw data_error(quote_user_path((fs::path(path) / name).string()) +
                       ": a class folder with no PNG or JPEG images");
    out.files.insert(out.files.end(), files.begin(), files.end());
    out.labels.insert(out.labels.end(), files.size(), found->second);
  }
  return out;
}

}  // namespace troupe

namespace troupe {

std::shared_ptr<const feature_rows> open_image_rows(std::vector<std::string> files,
                                                    const image_settings& settings, bool augment) {
  TROUPE_CHECK(settings.height >= 1 && settings.width >= 1, "image size");
  return std::make_shared<image_rows>(std::move(files), settings, augment);
}

std::vector<std::string> images_at(const std::string& path) {
  std::error_code error;
  if (fs::is_regular_file(path, error)) {
    check_headers({path});
    return {path};
  }
  if (!fs::is_directory(path, error))
    throw data_error(quote_user_path(path) + " is neither an image file nor a folder of them");
  auto files = images_under(path, 0);
  if (files.empty())
    throw data_error(quote_user_path(path) + ": a folder with no PNG or JPEG images");
  check_headers(files);
  return files;
}

image_settings with_image_size(image_settings settings, const std::string& train_path) {
  if (settings.height == 0) {
    const auto first = decode_image(scan_image_folder(train_path).files.front(), settings.channels);
    settings.height = first.height;
    settings.width = first.width;
  }
  return settings;
}

dataset_split load_images(const std::string& train_path, const std::string& test_path,
                          image_settings settings) {
  const auto train = scan_image_folder(train_path);
  image_folder test;
  if (!test_path.empty())
    test = scan_image_folder(test_path, train.classes);
  check_headers(train.files);
  check_headers(test.files);
  if (settings.height == 0) {  // the first image's size, to which the others are resized
    const auto first = decode_image(train.files.front(), settings.channels);
    settings.height = first.height;
    settings.width = first.width;
  }
  if (train.classes.size() < 2)
    throw data_error(quote_user_path(train_path) + " holds one class folder (" +
                     quote_user_path(train.classes.front()) +
                     "); a classifier needs two classes at least");
  auto split_of = [&](const image_folder& folder, bool augment) {
    dataset d;
    d.count = static_cast<std::int64_t>(folder.files.size());
    d.features = settings.channels * settings.height * settings.width;
    d.classes = static_cast<std::int64_t>(train.classes.size());
    d.labels = folder.labels;
    d.workers = settings.workers;
    d.rows = open_image_rows(folder.files, settings, augment);
    return d;
  };
  dataset_split split;
  split.train = split_of(train, true);
  split.test = split_of(test, false);
  split.class_names = train.classes;
  return split;
}

}  // namespace troupe
