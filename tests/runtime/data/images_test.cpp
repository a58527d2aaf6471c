// images_test.cpp: image folders as a data source: torchvision's ImageFolder layout (classes
// sorted, files sorted and found in sub-folders, other files skipped, a test folder's classes
// matched by name), PNG and JPEG decoding, resizing, the C x H x W floats a batch reads,
// augmentation keyed by (seed, epoch, sample), and every malformed folder or image refused
// naming it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/base/limits.hpp"
#include "runtime/data/images.hpp"
#include "tests/image_files.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

std::vector<unsigned char> pattern(int width, int height, int channels, int seed) {
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width * height * channels));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<unsigned char>((i * 37 + static_cast<std::size_t>(seed) * 101) % 256);
  return pixels;
}

std::vector<float> gather(const dataset& d, std::int64_t row, std::int64_t epoch = -1) {
  std::vector<float> out(static_cast<std::size_t>(d.features));
  d.gather(&row, 0, 1, out.data(), epoch);
  return out;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("an image folder is torchvision's ImageFolder: classes and files sorted, others skipped") {
  const test::temp_directory dir{"troupe-images"};
  const auto px = pattern(4, 4, 1, 0);
  test::write_png(dir / "train/dog/b.png", 4, 4, 1, px);
  test::write_png(dir / "train/dog/a.PNG", 4, 4, 1, px);
  test::write_jpeg(dir / "train/dog/deeper/c.jpg", 4, 4, 1, px);
  test::write_png(dir / "train/cat/z.png", 4, 4, 1, px);
  test::write_png(dir / "train/bird/x.png", 4, 4, 1, px);
  write_bytes(dir / "train/bird/notes.txt", "not an image");
  write_bytes(dir / "train/bird/Thumbs.db", "");
  test::write_png(dir / "train/.cache/hidden.png", 4, 4, 1, px);
  const auto folder = scan_image_folder(dir / "train");
  CHECK(folder.classes == std::vector<std::string>{"bird", "cat", "dog"});
  REQUIRE(folder.files.size() == 5);
  CHECK(folder.files[0] == dir / "train/bird/x.png");
  CHECK(folder.files[2] == dir / "train/dog/a.PNG");  // byte order: 'P' before 'b'
  CHECK(folder.files[4] == dir / "train/dog/deeper/c.jpg");
  CHECK(folder.labels == std::vector<std::int32_t>{0, 1, 2, 2, 2});
  // A test folder takes the training folder's indices by name, even missing a class.
  test::write_png(dir / "test/dog/q.png", 4, 4, 1, px);
  test::write_png(dir / "test/bird/r.png", 4, 4, 1, px);
  const auto test_folder = scan_image_folder(dir / "test", folder.classes);
  CHECK(test_folder.labels == std::vector<std::int32_t>{0, 2});
  test::write_png(dir / "test/cow/s.png", 4, 4, 1, px);
  CHECK_THROWS_WITH_AS(scan_image_folder(dir / "test", folder.classes),
                       doctest::Contains("class folder 'cow' is not a class of the training folder"),
                       data_error);
}

TEST_CASE("a folder without classes, an empty class and an image format troupe does not decode are refused") {
  const test::temp_directory dir{"troupe-images"};
  CHECK_THROWS_WITH_AS(scan_image_folder(dir / "missing"), doctest::Contains("is not a folder"),
                       data_error);
  CHECK_THROWS_WITH_AS(scan_image_folder(dir.string()), doctest::Contains("holds no class folders"),
                       data_error);
  test::write_png(dir / "a/x.png", 2, 2, 1, pattern(2, 2, 1, 0));
  std::filesystem::create_directories(dir / "b/sub");
  write_bytes(dir / "b/readme.md", "#");
  CHECK_THROWS_WITH_AS(scan_image_folder(dir.string()),
                       doctest::Contains("/b': a class folder with no PNG or JPEG images"), data_error);
  // A link back up the tree (followed, as ImageFolder follows them): refused, not walked forever.
  std::filesystem::create_directory_symlink(dir / "b", dir / "b/sub/loop");
  CHECK_THROWS_WITH_AS(scan_image_folder(dir.string()), doctest::Contains("nested more than 32 deep"),
                       data_error);
  std::filesystem::remove(dir / "b/sub/loop");
  write_bytes(dir / "b/sub/y.bmp", "BM");
  CHECK_THROWS_WITH_AS(scan_image_folder(dir.string()),
                       doctest::Contains("y.bmp': a bmp image; troupe decodes PNG and JPEG"),
                       data_error);
}

TEST_CASE("PNG and JPEG decode to gray or RGB, whatever the file's name says") {
  const test::temp_directory dir{"troupe-images"};
  const auto rgb = pattern(5, 3, 3, 1);
  const auto png = decode_image(test::write_png(dir / "rgb.png", 5, 3, 3, rgb), 3);
  CHECK(png.width == 5);
  CHECK(png.height == 3);
  CHECK(png.channels == 3);
  CHECK(png.pixels == rgb);  // lossless
  const auto gray = pattern(5, 3, 1, 2);
  CHECK(decode_image(test::write_png(dir / "gray.png", 5, 3, 1, gray), 1).pixels == gray);
  // Gray to RGB: three equal channels.
  const auto widened = decode_image(dir / "gray.png", 3);
  for (std::size_t i = 0; i < gray.size(); ++i) {
    CHECK(widened.pixels[3 * i] == gray[i]);
    CHECK(widened.pixels[3 * i + 2] == gray[i]);
  }
  // A smooth JPEG at quality 100 comes back within a few levels.
  std::vector<unsigned char> smooth(16 * 16 * 3);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c)
        smooth[static_cast<std::size_t>((y * 16 + x) * 3 + c)] = static_cast<unsigned char>(20 + 6 * x + 4 * y + 20 * c);
  test::write_jpeg(dir / "smooth.jpg", 16, 16, 3, smooth);
  std::filesystem::copy_file(dir / "smooth.jpg", dir / "named-wrong.png");
  for (const char* name : {"smooth.jpg", "named-wrong.png"}) {
    const auto jpeg = decode_image(dir / name, 3);
    REQUIRE(jpeg.pixels.size() == smooth.size());
    int worst = 0;
    for (std::size_t i = 0; i < smooth.size(); ++i)
      worst = std::max(worst, std::abs(int{jpeg.pixels[i]} - int{smooth[i]}));
    CHECK(worst <= 6);
  }
}

TEST_CASE("a corrupt, truncated, empty, foreign or oversized image is refused naming the file") {
  const test::temp_directory dir{"troupe-images"};
  const auto path = test::write_png(dir / "good.png", 16, 16, 3, pattern(16, 16, 3, 3));
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_bytes(dir / "cut.png", bytes.substr(0, bytes.size() / 2));
  CHECK_THROWS_WITH_AS(decode_image(dir / "cut.png", 3),
                       doctest::Contains("cut.png': a corrupt PNG"), data_error);
  auto flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x5a);
  write_bytes(dir / "flipped.png", flipped);
  CHECK_THROWS_AS(decode_image(dir / "flipped.png", 3), data_error);
  write_bytes(dir / "empty.png", "");
  CHECK_THROWS_WITH_AS(decode_image(dir / "empty.png", 1), doctest::Contains("an empty file"),
                       data_error);
  write_bytes(dir / "gif.png", "GIF89a....");
  CHECK_THROWS_WITH_AS(decode_image(dir / "gif.png", 1),
                       doctest::Contains("neither a PNG nor a JPEG (by its first bytes)"), data_error);
  // A header that claims 100000 x 100000 pixels: refused before anything is decoded.
  auto huge = bytes;
  const unsigned char side[4] = {0x00, 0x01, 0x86, 0xa0};  // 100000, big-endian
  huge.replace(16, 4, reinterpret_cast<const char*>(side), 4);
  huge.replace(20, 4, reinterpret_cast<const char*>(side), 4);
  write_bytes(dir / "huge.png", huge);
  CHECK_THROWS_WITH_AS(decode_image(dir / "huge.png", 3),
                       doctest::Contains("an image of 100000 x 100000 pixels; troupe decodes images of 1 to 32768"),
                       data_error);
  auto zero = bytes;
  zero.replace(16, 4, std::string(4, '\0'));
  write_bytes(dir / "zero.png", zero);
  CHECK_THROWS_WITH_AS(decode_image(dir / "zero.png", 3), doctest::Contains("an image of 0 x 16"),
                       data_error);
  // JPEG: cut short, and a frame header claiming 65535 x 65535.
  const auto jpeg_path = test::write_jpeg(dir / "good.jpg", 16, 16, 3, pattern(16, 16, 3, 4), 90);
  std::ifstream jin(jpeg_path, std::ios::binary);
  const std::string jpeg((std::istreambuf_iterator<char>(jin)), std::istreambuf_iterator<char>());
  write_bytes(dir / "cut.jpg", jpeg.substr(0, jpeg.size() / 3));
  CHECK_THROWS_WITH_AS(decode_image(dir / "cut.jpg", 3),
                       doctest::Contains("cut.jpg': a corrupt or unsupported JPEG"), data_error);
  // Fill bytes before a marker are JPEG: read past, not refused.
  auto filled = jpeg;
  filled.insert(filled.find("\xff\xc0"), "\xff\xff\xff");
  write_bytes(dir / "filled.jpg", filled);
  CHECK(decode_image(dir / "filled.jpg", 3).width == 16);
  auto big = jpeg;
  const auto frame = big.find("\xff\xc0");
  REQUIRE(frame != std::string::npos);
  big[frame + 5] = big[frame + 6] = big[frame + 7] = big[frame + 8] = '\xff';
  write_bytes(dir / "big.jpg", big);
  CHECK_THROWS_WITH_AS(decode_image(dir / "big.jpg", 3),
                       doctest::Contains("an image of 65535 x 65535 pixels"), data_error);
}

TEST_CASE("resizing keeps a constant, reproduces a ramp inside, and averages when shrinking") {
  decoded_image image;
  image.width = 8;
  image.height = 2;
  image.channels = 1;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 8; ++x)
      image.pixels.push_back(static_cast<unsigned char>(10 * x));
  // 8 -> 4 across: output x's centre is source position 2x + 1, the ramp's 10 (2x + 1) - 5;
  // the triangle is symmetric and normalised, so a linear ramp comes out exact inside.
  const auto half = resize_image(image, 2, 4);
  CHECK(half[1] == doctest::Approx(25.0));
  CHECK(half[2] == doctest::Approx(45.0));
  CHECK(half[5] == doctest::Approx(25.0));  // the second row alike
  // At the image's own size: the pixels, exactly.
  const auto same = resize_image(image, 2, 8);
  CHECK(same[7] == 70.0f);
  // A constant stays constant, up and down.
  decoded_image flat;
  flat.width = 3;
  flat.height = 5;
  flat.channels = 3;
  flat.pixels.assign(45, 200);
  for (auto [h, w] : {std::pair{10, 7}, std::pair{2, 1}, std::pair{1, 1}})
    for (float v : resize_image(flat, h, w))
      CHECK(v == doctest::Approx(200.0f));
}

TEST_CASE("a batch reads C x H x W floats normalised per channel, augmented only by its epoch") {
  const test::temp_directory dir{"troupe-images"};
  const auto a = pattern(4, 3, 3, 5), b = pattern(4, 3, 3, 6);
  test::write_png(dir / "train/a/0.png", 4, 3, 3, a);
  test::write_png(dir / "train/b/1.png", 4, 3, 3, b);
  test::write_png(dir / "test/b/2.png", 4, 3, 3, b);
  image_settings s;
  s.channels = 3;
  s.mean = {0.5, 0.25, 0.0};
  s.std = {0.5, 1.0, 2.0};
  s.workers = 2;
  auto split = load_images(dir / "train", dir / "test", s);
  CHECK(split.class_names == std::vector<std::string>{"a", "b"});
  CHECK(split.train.count == 2);
  CHECK(split.train.features == 3 * 3 * 4);  // the first image's size
  CHECK(split.train.workers == 2);
  CHECK(split.test.labels == std::vector<std::int32_t>{1});
  const auto x = gather(split.train, 1);
  // Channel c of pixel (y, x) at c * H * W + y * W + x, as (v / 255 - mean_c) / std_c.
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int xx = 0; xx < 4; ++xx) {
        const double v = b[static_cast<std::size_t>((y * 4 + xx) * 3 + c)];
        CHECK(x[static_cast<std::size_t>((c * 3 + y) * 4 + xx)] ==
              static_cast<float>((v * (1.0 / 255) - s.mean[c]) / s.std[c]));
      }
  // No augmentation asked for: an epoch changes nothing.
  CHECK(gather(split.train, 1, 3) == x);
  // Flips and crops: keyed by (seed, epoch, sample), never in an evaluation's read.
  s.flip = true;
  s.crop_padding = 1;
  s.seed = 9;
  split = load_images(dir / "train", dir / "test", s);
  CHECK(gather(split.train, 1) == x);  // no epoch: as stored
  CHECK(gather(split.test, 0, 5) == x);  // the test split never augments
  int changed = 0;
  for (std::int64_t epoch = 0; epoch < 8; ++epoch) {
    const auto augmented = gather(split.train, 1, epoch);
    CHECK(augmented == gather(split.train, 1, epoch));  // the same pixels every time
    changed += augmented != x;
  }
  // Each epoch keeps the image with probability 1/2 x 1/9; all eight doing so is ~1e-10.
  CHECK(changed > 0);
  // With padding 1, some epoch shifts the image: a border value is the padding's 0.
  bool padded = false;
  const auto zero = static_cast<float>((0.0 - s.mean[0]) / s.std[0]);
  for (std::int64_t epoch = 0; epoch < 16 && !padded; ++epoch) {
    const auto augmented = gather(split.train, 1, epoch);
    for (int y = 0; y < 3; ++y)
      padded = padded || augmented[static_cast<std::size_t>(y * 4)] == zero ||
               augmented[static_cast<std::size_t>(y * 4 + 3)] == zero;
  }
  CHECK(padded);
}
