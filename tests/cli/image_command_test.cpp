// image_command_test.cpp: an image folder through the commands: `troupe run` trains a
// classifier on one and records its classes in the checkpoint, `troupe eval` prints them,
// `troupe predict` names each image's file and class; a folder or an image that is not
// what it should be ends a run with exit 2, naming it.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/run_troupe.hpp"
#include "tests/image_files.hpp"
#include "tests/temp_files.hpp"

namespace {

/// 6 x 6 RGB images of three classes told apart by which channel is bright, with noise.
void write_colours(const troupe::test::temp_directory& dir, const std::string& split, int count) {
  const char* names[] = {"blue", "green", "red"};
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < count; ++i) {
      std::vector<unsigned char> pixels(6 * 6 * 3);
      for (std::size_t p = 0; p < pixels.size(); ++p) {
        const int channel = static_cast<int>(p % 3);
        const int bright = channel == 2 - k ? 200 : 40;  // blue: channel 2, red: channel 0
        pixels[p] = static_cast<unsigned char>(bright + static_cast<int>((p * 7 + i * 13) % 30));
      }
      const auto file = dir / (split + "/" + names[k] + "/" + std::to_string(i) + ".png");
      if (i % 2 == 0)
        troupe::test::write_png(file, 6, 6, 3, pixels);
      else  // JPEGs too, whatever their name
        troupe::test::write_jpeg(file, 6, 6, 3, pixels, 95);
    }
}

std::string image_config_text(const std::string& checkpoints, const std::string& extra = "") {
  return "[run]\nsteps = 40\nseed = 1\ncheckpoint = \"" + checkpoints + "\"\n"
         "[data]\nsource = \"images\"\npath = \"train\"\ntest_path = \"test\"\nsize = [4, 4]\n"
         "batch_size = 12\nworkers = 2\nflip = true\n" + extra +
         "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 3\n"
         "[optimizer]\ntype = \"adam\"\nlr = 0.05\n";
}

}  // namespace

TEST_CASE("troupe run, eval and predict on an image folder name its classes") {
  troupe::test::temp_directory dir{"troupe-images-cli"};
  write_colours(dir, "train", 12);
  write_colours(dir, "test", 4);
  const auto config = dir / "colours.toml";
  std::ofstream{config} << image_config_text(dir / "ckpt");
  auto result = troupe::testing::run_troupe("run " + config + " --metrics '' -q");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("accuracy 100.00%") != std::string::npos);
  result = troupe::testing::run_troupe("eval " + config + " --checkpoint " + (dir / "ckpt"));
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("classes: 0 = 'blue', 1 = 'green', 2 = 'red'") != std::string::npos);
  result = troupe::testing::run_troupe("eval " + config + " --checkpoint " + (dir / "ckpt") + " --json");
  CHECK(result.output.find("\"classes\":[\"blue\",\"green\",\"red\"]") != std::string::npos);
  // One image, and a folder: each line its file, the argmax and its class's name.
  result = troupe::testing::run_troupe("predict " + (dir / "ckpt") + " --config " + config +
                                       " --input " + (dir / "test/red/2.png") + " --softmax");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("file,class,class_name,p_0,p_1,p_2\n") != std::string::npos);
  CHECK(result.output.find("test/red/2.png,2,red,") != std::string::npos);
  result = troupe::testing::run_troupe("predict " + (dir / "ckpt") + " --config " + config +
                                       " --input " + (dir / "test") + " -o " + (dir / "out.csv"));
  CHECK(result.exit_code == 0);
  std::ifstream out(dir / "out.csv");
  std::string line;
  int lines = 0, right = 0;
  std::getline(out, line);  // the header
  while (std::getline(out, line)) {
    ++lines;
    for (const std::string name : {"blue", "green", "red"})
      right += line.find("/test/" + name + "/") != std::string::npos &&
               line.find("," + name + ",") != std::string::npos;
  }
  CHECK(lines == 12);
  CHECK(right == 12);
  // Another set of classes renumbers them: refused.
  std::filesystem::rename(dir / "train/red", dir / "train/zred");
  std::filesystem::rename(dir / "test/red", dir / "test/zred");
  result = troupe::testing::run_troupe("eval " + config + " --checkpoint " + (dir / "ckpt"));
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("was trained on the classes 0 = 'blue', 1 = 'green', 2 = 'red', and "
                           "[data] path has 0 = 'blue', 1 = 'green', 2 = 'zred'") != std::string::npos);
}

TEST_CASE("a run on a bad image folder ends with exit 2, naming the folder or the image") {
  troupe::test::temp_directory dir{"troupe-images-bad"};
  write_colours(dir, "train", 4);
  write_colours(dir, "test", 2);
  const auto config = dir / "colours.toml";
  std::ofstream{config} << image_config_text(dir / "ckpt");
  auto run = [&] {
    auto result = troupe::testing::run_troupe("run " + config + " --steps 2 --metrics '' -q");
    INFO(result.output);
    CHECK(result.exit_code == 2);
    return result.output;
  };
  std::filesystem::create_directories(dir / "train/empty");
  CHECK(run().find("train/empty': a class folder with no PNG or JPEG images") != std::string::npos);
  std::filesystem::remove(dir / "train/empty");
  std::ofstream(dir / "train/red/x.png") << "not a picture";
  CHECK(run().find("train/red/x.png': neither a PNG nor a JPEG") != std::string::npos);
  std::filesystem::remove(dir / "train/red/x.png");
  // A header that reads and a body that does not: found as a batch decodes it, on a
  // worker's thread, and still exit 2 naming the file.
  {
    std::ifstream in(dir / "train/red/0.png", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "train/red/0.png", std::ios::binary) << bytes.substr(0, 40);
  }
  const auto cut = run();
  CHECK(cut.find("train/red/0.png': not a valid PNG") != std::string::npos);
  CHECK(cut.find("cpu:0") != std::string::npos);  // the device whose batch it was
  write_colours(dir, "train", 4);
  std::ofstream(dir / "test/red/x.gif") << "GIF89a";
  CHECK(run().find("x.gif': a gif image; troupe decodes PNG and JPEG") != std::string::npos);
  std::filesystem::remove(dir / "test/red/x.gif");
  std::ofstream{config} << image_config_text(dir / "ckpt", "channels = 2\n");
  CHECK(run().find("[data] channels: expected 1 (gray) or 3 (RGB), found 2") != std::string::npos);
  std::ofstream{config} << image_config_text(dir / "ckpt", "mean = [0.5, 0.5]\n");
  CHECK(run().find("[data] mean: 2 values for images of 3 channel(s)") != std::string::npos);
  auto huge = image_config_text(dir / "ckpt");
  huge.replace(huge.find("size = [4, 4]"), 13, "size = [2048, 2048]");
  std::ofstream{config} << huge;
  CHECK(run().find("values a sample, more than the limit") != std::string::npos);
}
