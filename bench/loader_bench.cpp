// loader_bench.cpp: how fast troupe's data sources hand out a batch's rows, for
// bench/data_loader.py (which runs PyTorch's DataLoader beside it).
//
//   troupe_loader_bench npy FILE.npy [--batch B] [--seconds S]
//       rows/s gathered at random from the .npy mapped, read with pread, and from a copy in
//       memory (the mapped rows copied into one vector first: the in-memory source's gather)
//   troupe_loader_bench images FOLDER [--workers N] [--channels C] [--crop P] [--flip]
//                      [--batch B] [--seconds S]
//       images/s decoded (and augmented) from an image folder by N host threads splitting
//       each batch, as the loader's workers do (gather_rows in batch_assembler_actor.cpp)
//
// Each prints one line of JSON. Not part of ctest.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/random.hpp"
#include "runtime/data/images.hpp"
#include "runtime/data/npy.hpp"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string mode, path;
  std::int64_t batch = 128, workers = 1, channels = 1, crop = 0;
  bool flip = false;
  double seconds = 3;
};

options parse(int argc, char** argv) {
  options o;
  o.mode = argc > 1 ? argv[1] : "";
  o.path = argc > 2 ? argv[2] : "";
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (arg == "--batch") o.batch = std::stoll(next());
    else if (arg == "--workers") o.workers = std::stoll(next());
    else if (arg == "--channels") o.channels = std::stoll(next());
    else if (arg == "--crop") o.crop = std::stoll(next());
    else if (arg == "--flip") o.flip = true;
    else if (arg == "--seconds") o.seconds = std::stod(next());
  }
  return o;
}

/// Rows a second that `gather(picked, out)` hands out, over random batches for `seconds`.
template <class Gather>
double rows_per_second(std::int64_t count, std::int64_t batch, double seconds, Gather gather) {
  keyed_random random{7};
  std::vector<std::int64_t> picked(static_cast<std::size_t>(batch));
  std::int64_t rows = 0;
  const auto start = clock_type::now();
  double elapsed = 0;
  for (std::int64_t epoch = 0; elapsed < seconds; ++epoch) {
    for (auto& row : picked)
      row = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(count)));
    gather(picked, epoch);
    rows += batch;
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  }
  return static_cast<double>(rows) / elapsed;
}

int bench_npy(const options& o) {
  const auto header = read_npy_header(o.path);
  const auto count = header.shape.front();
  const auto features = header.elements / count;
  std::vector<float> out(static_cast<std::size_t>(o.batch * features));
  auto from = [&](const feature_rows& rows) {
    return rows_per_second(count, o.batch, o.seconds, [&](const auto& picked, std::int64_t) {
      rows.gather(picked.data(), 0, picked.size(), out.data());
    });
  };
  const auto mapped = open_npy_rows(o.path, {}, file_access::mapped);
  const auto read = open_npy_rows(o.path, {}, file_access::read);
  // The whole file in memory, as the in-memory sources hold it (dataset::images).
  dataset memory;
  memory.count = count;
  memory.features = features;
  memory.images.resize(static_cast<std::size_t>(count * features));
  std::vector<std::int64_t> all(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    all[static_cast<std::size_t>(i)] = i;
  mapped->gather(all.data(), 0, all.size(), memory.images.data());
  const auto in_memory = rows_per_second(count, o.batch, o.seconds, [&](const auto& picked, std::int64_t) {
    memory.gather(picked.data(), 0, picked.size(), out.data());
  });
  std::printf("{\"rows\": %lld, \"features\": %lld, \"mapped\": %.0f, \"read\": %.0f, "
              "\"memory\": %.0f}\n",
              static_cast<long long>(count), static_cast<long long>(features), from(*mapped),
              from(*read), in_memory);
  return 0;
}

int bench_images(const options& o) {
  image_settings s;
  s.channels = o.channels;
  s.crop_padding = o.crop;
  s.flip = o.flip;
  s.workers = o.workers;
  const auto split = load_images(o.path, "", s);
  const auto& train = split.train;
  std::vector<float> out(static_cast<std::size_t>(o.batch * train.features));
  const auto workers = static_cast<std::size_t>(std::max<std::int64_t>(1, o.workers));
  const auto rate = rows_per_second(train.count, o.batch, o.seconds, [&](const auto& picked, std::int64_t epoch) {
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < workers; ++k) {
      const auto first = picked.size() * k / workers, last = picked.size() * (k + 1) / workers;
      threads.emplace_back([&, first, last] {
        train.gather(picked.data(), first, last,
                     out.data() + static_cast<std::int64_t>(first) * train.features, epoch);
      });
    }
    for (auto& t : threads)
      t.join();
  });
  std::printf("{\"images\": %lld, \"workers\": %lld, \"images_per_s\": %.0f}\n",
              static_cast<long long>(train.count), static_cast<long long>(o.workers), rate);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto o = parse(argc, argv);
  try {
    if (o.mode == "npy")
      return bench_npy(o);
    if (o.mode == "images")
      return bench_images(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe_loader_bench: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr, "usage: troupe_loader_bench npy FILE.npy | images FOLDER [options]\n");
  return 2;
}
