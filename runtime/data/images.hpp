// images.hpp: folders of PNG and JPEG images as a data source ([data] source = "images").
//
// The layout is torchvision's ImageFolder: a folder holds one folder a class, named for the
// class; the classes are the folder names sorted (byte order), a class's index its place in
// that order; a class folder's images are found in it and its sub-folders, in sorted path
// order. Files whose extension is not an image's are skipped (notes, thumbnails' databases),
// as ImageFolder skips them; an image format troupe does not decode (.bmp, .gif, .webp,
// .tif, ...) is refused, naming the file. A test folder's classes are those of the training
// folder, matched by name (not by position, so a test folder missing a class keeps the
// others' indices).
//
// Images are decoded as batches gather them (Debian's libpng and libjpeg-turbo), never held
// whole: decoded to `channels` (1: gray, 3: RGB), resized to `size` (H, W) with a triangle
// filter that averages over the source pixels when shrinking (PIL's bilinear resize, which
// torchvision's Resize uses), optionally augmented (a random crop of the padded image, a
// horizontal flip) drawn from (seed, epoch, sample) so every wiring and a resumed run see the
// same pixels, then normalised per channel ((x * scale - mean) / std, in double) into C x H x W
// floats (torchvision's ToTensor layout). At the image's own size nothing is resampled: a
// PNG of a Fashion-MNIST image gives the IDX source's floats bit for bit.
//
// Every failure is a data_error naming the file: a corrupt or truncated image, a header
// claiming more than limits::max_image_pixels, a zero-sized image, a format that is neither
// PNG nor JPEG, an empty class folder, a folder without class folders.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"

namespace troupe {

/// The images of a folder and their classes.
struct image_folder {
  std::vector<std::string> classes;  // the class folders' names, sorted
  std::vector<std::string> files;    // every image, class by class
  std::vector<std::int32_t> labels;  // each file's class index
};

/// Scans `path` (see the top). With `classes` given (a test folder), its class folders must
/// be among them and take their indices. Throws data_error.
image_folder scan_image_folder(const std::string& path,
                               const std::vector<std::string>& classes = {});

/// An image decoded to 8-bit channels, rows top to bottom.
struct decoded_image {
  std::int64_t height = 0, width = 0, channels = 0;
  std::vector<unsigned char> pixels;  // (height, width, channels)
};

/// Decodes the PNG or JPEG file at `path` (by its first bytes, whatever its name) to
/// `channels` (1 or 3). Throws data_error naming the file.
decoded_image decode_image(const std::string& path, std::int64_t channels);

/// The same from bytes in memory; `name` names them in errors.
decoded_image decode_image(const unsigned char* bytes, std::size_t size, std::int64_t channels,
                           const std::string& name);

/// How images become samples.
struct image_settings {
  std::int64_t channels = 3;            // C
  std::int64_t height = 0, width = 0;   // H, W; 0: the first training image's
  std::vector<double> scale{1.0 / 255}, mean{0.0}, std{1.0};  // one value, or one a channel
  std::int64_t crop_padding = 0;        // > 0: a random H x W crop of the image padded so
  bool flip = false;                    // a horizontal flip with probability 1/2
  std::uint64_t seed = 0;               // the augmentation's key, with the epoch and sample
  std::int64_t workers = 1;             // host threads decoding a batch (dataset::workers)
};

/// `image` resized to `height` x `width` (a triangle filter as PIL's bilinear resize; a copy
/// when the size is the image's own), as floats (height, width, channels).
std::vector<float> resize_image(const decoded_image& image, std::int64_t height,
                                std::int64_t width);

/// The rows of `files` as samples of `settings` (augmented by a batch's epoch when `augment`).
std::shared_ptr<const feature_rows> open_image_rows(std::vector<std::string> files,
                                                    const image_settings& settings, bool augment);

/// The images to predict from: `path` itself (one image file), or every PNG and JPEG under
/// the folder `path`, in sorted path order. Throws data_error: nothing there, no images.
std::vector<std::string> images_at(const std::string& path);

/// `settings` with its size set: as given, or the first image's of the training folder
/// `train_path` (what load_images uses when [data] size is not given).
image_settings with_image_size(image_settings settings, const std::string& train_path);

/// [data] source = "images": the training folder (augmented as `settings` say) and the test
/// folder (not augmented; `test_path` empty: none), with the class names in the split.
dataset_split load_images(const std::string& train_path, const std::string& test_path,
                          image_settings settings);

}  // namespace troupe
