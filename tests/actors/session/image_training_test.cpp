// image_training_test.cpp: training from an image folder end to end. Fashion-MNIST's images
// written as PNG files train exactly as the same images from a .npy (whose floats are the IDX
// source's, npy_test.cpp): the same pixels, the same batches, the same parameters, bit for
// bit, whatever the number of decoding workers; and with augmentation on, two replicas
// compute what one device does.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/data/dataset.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/image_files.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

constexpr const char* fashion = "/usr/share/datasets/fashion-mnist";

/// The first `count` images of a Fashion-MNIST split as a PNG folder (a folder a label,
/// files named by index) and as .npy files holding them in the folder's order.
void write_split(const test::temp_directory& dir, const std::string& prefix, const std::string& name,
                 std::size_t count) {
  const auto images = read_idx_images(std::string(fashion) + "/" + prefix + "-images-idx3-ubyte.gz");
  const auto labels = read_idx_labels(std::string(fashion) + "/" + prefix + "-labels-idx1-ubyte.gz");
  const std::size_t size = 28 * 28;
  test::bytes x, y;
  for (int label = 0; label < 10; ++label)
    for (std::size_t i = 0; i < count; ++i) {
      if (labels[i] != label)
        continue;
      const std::vector<unsigned char> pixels(images.pixels.begin() + static_cast<std::ptrdiff_t>(i * size),
                                              images.pixels.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
      char file[32];
      std::snprintf(file, sizeof(file), "%05zu.png", i);
      test::write_png(dir / (name + "/" + std::to_string(label) + "/" + file), 28, 28, 1, pixels);
      x.insert(x.end(), pixels.begin(), pixels.end());
      y.push_back(static_cast<unsigned char>(label));
    }
  const auto n = std::to_string(y.size());
  test::write_test_file(dir / (name + "_x.npy"), test::npy_file("|u1", "(" + n + ", 784)", x));
  test::write_test_file(dir / (name + "_y.npy"), test::npy_file("|u1", "(" + n + ",)", y));
}

std::string model_and_run(const std::string& parallel) {
  return "[run]\nseed = 3\nsteps = 20\n"
         "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 32\n[[model.layers]]\n"
         "type = \"relu\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
         "[optimizer]\ntype = \"adam\"\nlr = 0.01\n" + parallel;
}

session_result train_images(const test::temp_directory& dir, const std::string& data,
                            const std::string& parallel = "") {
  auto config = parse_config("[data]\n" + data + "batch_size = 32\nmean = 0.2860\nstd = 0.3530\n" +
                                 model_and_run(parallel),
                             "images.toml", dir.string());
  auto options = test::quiet_options();
  options.keep_parameters = true;
  return test::run_ok(config, options);
}

}  // namespace

TEST_CASE("Fashion-MNIST as PNG folders trains bit for bit as the same images from .npy") {
  if (!std::filesystem::exists(std::string(fashion) + "/train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: Debian's dataset-fashion-mnist is not installed");
    return;
  }
  const test::temp_directory dir{"troupe-image-training"};
  write_split(dir, "train", "train", 640);
  write_split(dir, "t10k", "test", 200);
  const auto npy = train_images(dir,
                                "source = \"npy\"\nfeatures = \"train_x.npy\"\ntargets = "
                                "\"train_y.npy\"\ntest_features = \"test_x.npy\"\ntest_targets = "
                                "\"test_y.npy\"\nscale = 0.00392156862745098\n");
  for (const std::string workers : {"0", "1", "2"}) {
    CAPTURE(workers);
    const auto png = train_images(dir,
                                  "source = \"images\"\npath = \"train\"\ntest_path = \"test\"\n"
                                  "channels = 1\nworkers = " +
                                      workers + "\n");
    for (const auto& d : compare_parameters(npy.parameters, png.parameters))
      CHECK(d.relative == 0);
    CHECK(png.outcome.test_loss == npy.outcome.test_loss);
    CHECK(png.outcome.test_accuracy == npy.outcome.test_accuracy);
  }
  // Augmented (random crops and flips keyed by seed, epoch and sample): two replicas, each
  // decoding its own rows, compute one device's steps.
  const std::string augmented = "source = \"images\"\npath = \"train\"\ntest_path = \"test\"\n"
                                "channels = 1\ncrop_padding = 2\nflip = true\n";
  const auto single = train_images(dir, augmented);
  const auto dp2 =
      train_images(dir, augmented, "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n");
  double difference = 0;
  for (const auto& d : compare_parameters(single.parameters, dp2.parameters))
    difference = std::max(difference, d.relative);
  CHECK(difference <= 1e-5);
  // And it is not the unaugmented run.
  double moved = 0;
  for (const auto& d : compare_parameters(single.parameters, npy.parameters))
    moved = std::max(moved, d.relative);
  CHECK(moved > 1e-3);
}
