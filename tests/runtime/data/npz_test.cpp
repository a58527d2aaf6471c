// npz_test.cpp: arrays inside archives: NumPy's .npz (np.savez's stored entries read in
// place, np.savez_compressed's inflated once) and safetensors tensors, read as .npy arrays
// are; and every damaged archive refused naming it. The .npz files are NumPy's own, written
// by Debian's python3-numpy.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/checkpoint/safetensors_arrays.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/npz.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

/// Runs a NumPy script with `dir` as its working directory.
void numpy(const test::temp_directory& dir, const std::string& script) {
  const auto result = testing::run_shell("cd " + dir.string() + " && /usr/bin/python3 -c '" +
                                         "import numpy as np, zipfile\n" + script + "' 2>&1");
  INFO(result.output);
  REQUIRE_MESSAGE(result.exit_code == 0, "needs Debian's python3-numpy (scripts/install-deps.sh)");
}

std::vector<float> all_rows(const dataset& d) {
  std::vector<std::int64_t> picked(static_cast<std::size_t>(d.count));
  for (std::int64_t i = 0; i < d.count; ++i)
    picked[static_cast<std::size_t>(i)] = i;
  std::vector<float> out(static_cast<std::size_t>(d.count * d.features));
  d.gather(picked.data(), 0, picked.size(), out.data());
  return out;
}

using troupe::test::read_all;

}  // namespace

TEST_CASE("np.savez and np.savez_compressed archives read as the arrays they hold") {
  const test::temp_directory dir{"troupe-npz"};
  numpy(dir, "x = (np.arange(240) % 251).astype(np.uint8).reshape(20, 3, 4)\n"
             "y = np.arange(20) % 3\n"
             "np.savez(\"stored.npz\", x=x, y=y)\n"
             "np.savez_compressed(\"deflated.npz\", features=x, labels=y.astype(np.int32))\n"
             "np.save(\"x.npy\", x)\nnp.save(\"y.npy\", y)\n");
  const auto reference = load_npy(dir / "x.npy", dir / "y.npy", "", "", {});
  const npy_split_arrays stored{npz_array(dir / "stored.npz", "x"), npz_array(dir / "stored.npz", "y")};
  CHECK(stored.features.base > 0);  // read in place, after the entry's local header
  CHECK(stored.features.header.shape == std::vector<std::int64_t>{20, 3, 4});
  const npy_split_arrays deflated{npz_array(dir / "deflated.npz", "features"),
                                  npz_array(dir / "deflated.npz", "labels")};
  CHECK(npz_names(dir / "deflated.npz") == std::vector<std::string>{"features", "labels"});
  for (const auto* arrays : {&stored, &deflated}) {
    const auto split = load_arrays(*arrays, nullptr, {}, target_kind::class_ids);
    CHECK(split.train.count == 20);
    CHECK(split.train.features == 12);
    CHECK(split.train.classes == 3);
    CHECK(split.train.labels == reference.train.labels);
    CHECK(all_rows(split.train) == all_rows(reference.train));
  }
}

TEST_CASE("a missing array, a damaged or foreign archive and another compression are refused") {
  const test::temp_directory dir{"troupe-npz"};
  numpy(dir, "x = np.arange(4000, dtype=np.float32).reshape(1000, 4)\n"
             "np.savez_compressed(\"d.npz\", x=x, y=np.zeros(1000, np.int64))\n"
             "with zipfile.ZipFile(\"bz.npz\", \"w\", zipfile.ZIP_BZIP2) as z:\n"
             "    z.writestr(\"x.npy\", open(\"d.npz\", \"rb\").read())\n");
  CHECK_THROWS_WITH_AS(npz_array(dir / "d.npz", "features"),
                       doctest::Contains("no array 'features' (entry 'features.npy'); it holds 'x', 'y'"),
                       data_error);
  CHECK_THROWS_WITH_AS(npz_array(dir / "bz.npz", "x"),
                       doctest::Contains("is compressed with method 12; troupe reads stored entries"),
                       data_error);
  const auto bytes = read_all(dir / "d.npz");
  // A byte of the compressed data changed: zlib or the CRC-32 finds it.
  auto damaged = bytes;
  damaged[200] = static_cast<char>(damaged[200] ^ 0x41);
  std::ofstream(dir / "damaged.npz", std::ios::binary) << damaged;
  CHECK_THROWS_WITH_AS(npz_array(dir / "damaged.npz", "x"), doctest::Contains("entry 'x.npy': "),
                       data_error);
  std::ofstream(dir / "cut.npz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  CHECK_THROWS_WITH_AS(npz_array(dir / "cut.npz", "x"),
                       doctest::Contains("not a zip archive (an .npz is one): no end-of-directory record"),
                       data_error);
  std::ofstream(dir / "text.npz") << "hello";
  CHECK_THROWS_WITH_AS(npz_array(dir / "text.npz", "x"), doctest::Contains("too short"), data_error);
}

TEST_CASE("a safetensors file's tensors read as arrays, named or refused with the names it has") {
  const test::temp_directory dir{"troupe-safetensors-data"};
  std::vector<float> x(12);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = 0.5f * static_cast<float>(i);
  std::vector<std::int64_t> y{0, 1, 1, 0, 2, 1};
  write_safetensors(dir / "d.safetensors",
                    {{"features", safetensors_dtype::f32, {6, 2}, x.data()},
                     {"labels", safetensors_dtype::i64, {6}, y.data()}});
  const npy_split_arrays arrays{safetensors_array(dir / "d.safetensors", "features"),
                                safetensors_array(dir / "d.safetensors", "labels")};
  const auto split = load_arrays(arrays, nullptr, {}, target_kind::class_ids);
  CHECK(split.train.count == 6);
  CHECK(split.train.classes == 3);
  CHECK(split.train.labels == std::vector<std::int32_t>{0, 1, 1, 0, 2, 1});
  CHECK(all_rows(split.train) == x);
  CHECK_THROWS_WITH_AS(safetensors_array(dir / "d.safetensors", "x"),
                       doctest::Contains("'features'"), data_error);
  // BF16 (what `troupe export --dtype bf16` writes) is weights, not data: refused by name.
  const std::vector<std::uint16_t> halves(4, 0x3F80);
  write_safetensors(dir / "w.safetensors", {{"w", safetensors_dtype::bf16, {4}, halves.data()}});
  CHECK_THROWS_WITH_AS(safetensors_array(dir / "w.safetensors", "w"),
                       doctest::Contains("tensor 'w' is BF16; data is read as F32"), data_error);
  // Float features as class labels: refused naming the tensor.
  const npy_split_arrays swapped{arrays.features, arrays.features};
  CHECK_THROWS_WITH_AS(load_arrays(swapped, nullptr, {}, target_kind::class_ids),
                       doctest::Contains("tensor 'features': byte "), data_error);
}

TEST_CASE("[data] source = \"npz\" and \"safetensors\" name their arrays, and refuse what is missing") {
  const test::temp_directory dir{"troupe-npz-config"};
  const std::string model = "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 2\n";
  for (const char* source : {"npz", "safetensors"}) {
    CAPTURE(source);
    const std::string head = std::string("[data]\nsource = \"") + source + "\"\n";
    CHECK_THROWS_WITH_AS(parse_config(head + model, "a.toml", dir.string()),
                         doctest::Contains("needs path (a file holding the arrays features and "
                                           "targets name"),
                         config_error);
    std::ofstream(dir / "train.bin") << "x";
    CHECK_THROWS_WITH_AS(parse_config(head + "path = \"train.bin\"\n" + model, "a.toml", dir.string()),
                         doctest::Contains("needs test_path"), config_error);
    const auto config = parse_config(head + "path = \"train.bin\"\nvalidation = 0.2\n"
                                            "features = \"pixels\"\n" + model,
                                     "a.toml", dir.string());
    CHECK(config.data.features == "pixels");  // a name, not a file next to the config
    CHECK_THROWS_WITH_AS(parse_config(head + "path = \"train.bin\"\nvalidation = 0.2\n"
                                             "targets = \"\"\n" + model, "a.toml", dir.string()),
                         doctest::Contains("expected an array's name, found an empty string"),
                         config_error);
  }
}
