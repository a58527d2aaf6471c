// array_sources_test.cpp: the same arrays from a .npy pair, an .npz (stored and deflated)
// and a safetensors file train the same parameters, bit for bit, and predict reads each.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

TEST_CASE("the same arrays from .npy, .npz and safetensors train the same parameters") {
  const test::temp_directory dir{"troupe-array-sources"};
  const auto made = testing::run_shell(
      "cd " + dir.string() + " && /usr/bin/python3 -c '"
      "import numpy as np\n"
      "r = np.random.RandomState(0)\n"
      "x = r.randn(96, 6).astype(np.float32)\n"
      "y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)\n"
      "np.save(\"x.npy\", x)\nnp.save(\"y.npy\", y)\n"
      "np.savez(\"stored.npz\", x=x, y=y)\n"
      "np.savez_compressed(\"deflated.npz\", inputs=x, classes=y)\n"
      "open(\"x.raw\", \"wb\").write(x.tobytes())\nopen(\"y.raw\", \"wb\").write(y.tobytes())\n' 2>&1");
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  // The safetensors file from the same bytes.
  std::vector<float> x(96 * 6);
  std::vector<std::int64_t> y(96);
  std::ifstream(dir / "x.raw", std::ios::binary).read(reinterpret_cast<char*>(x.data()), 96 * 6 * 4);
  std::ifstream(dir / "y.raw", std::ios::binary).read(reinterpret_cast<char*>(y.data()), 96 * 8);
  write_safetensors(dir / "d.safetensors", {{"x", safetensors_dtype::f32, {96, 6}, x.data()},
                                            {"y", safetensors_dtype::i64, {96}, y.data()}});
  auto train = [&](const std::string& data) {
    auto config = parse_config("[run]\nsteps = 12\nseed = 2\n[data]\n" + data +
                                   "batch_size = 16\nvalidation = 0.25\n[model]\n[[model.layers]]\n"
                                   "type = \"linear\"\nout = 2\n[optimizer]\nlr = 0.1\n",
                               "a.toml", dir.string());
    auto options = test::quiet_options();
    options.keep_parameters = true;
    return test::run_ok(config, options);
  };
  const auto npy = train("source = \"npy\"\nfeatures = \"x.npy\"\ntargets = \"y.npy\"\n");
  for (const std::string data :
       {"source = \"npz\"\npath = \"stored.npz\"\n",
        "source = \"npz\"\npath = \"deflated.npz\"\nfeatures = \"inputs\"\ntargets = \"classes\"\n",
        "source = \"safetensors\"\npath = \"d.safetensors\"\n"}) {
    CAPTURE(data);
    const auto other = train(data);
    for (const auto& d : compare_parameters(npy.parameters, other.parameters))
      CHECK(d.relative == 0);
    CHECK(other.outcome.test_loss == npy.outcome.test_loss);
  }
}
