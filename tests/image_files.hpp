// image_files.hpp: writing PNG and JPEG files in tests (libpng's and libjpeg's writers), and
// image folders of them in torchvision's ImageFolder layout.
//
// Header-only and test-only: the image source's tests and the CLI's.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <jpeglib.h>
#include <png.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace troupe::test {

/// Writes `pixels` (height, width, channels: 1 gray, 3 RGB) as a PNG; returns the path.
inline std::string write_png(const std::string& path, int width, int height, int channels,
                             const std::vector<unsigned char>& pixels) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr) != 0);
  return path;
}

/// Writes `pixels` (height, width, channels) as a baseline JPEG of `quality`; returns the path.
inline std::string write_jpeg(const std::string& path, int width, int height, int channels,
                              const std::vector<unsigned char>& pixels, int quality = 100) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::FILE* out = std::fopen(path.c_str(), "wb");
  REQUIRE(out != nullptr);
  jpeg_compress_struct info;
  jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, out);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = channels;
  info.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    auto* row = const_cast<unsigned char*>(pixels.data()) +
                static_cast<std::size_t>(info.next_scanline) * static_cast<std::size_t>(width * channels);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::fclose(out);
  return path;
}

}  // namespace troupe::test
