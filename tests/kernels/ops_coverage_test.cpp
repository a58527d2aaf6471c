// ops_coverage_test.cpp: no op goes untested. The list of ops is the one include/troupe/ops.hpp
// declares (declared_ops() in kernel_test_support.hpp); this file holds that list to the
// dispatch table and to every registration line of every backend, and requires each op to
// have its own CPU test and a CUDA-against-CPU comparison. A new op that lacks either fails
// here by name.
//
// The tests look for `ops::NAME` in the test sources: that is how a kernel test resolves
// the kernel it tests (kernels::lookup<ops::NAME>), so a file that never names the op
// cannot be testing it.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

namespace fs = std::filesystem;

/// The files under `folder` (relative to the source root) whose names end in `suffix`,
/// relative to the root, sorted.
std::vector<std::string> files_in(const std::string& folder, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator{fs::path{TROUPE_SOURCE_DIR} / folder}) {
    const auto name = entry.path().filename().string();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(folder + "/" + name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool names_op(const std::string& text, const std::string& op) {
  return std::regex_search(text, std::regex{"\\bops::" + op + "\\b"});
}

}  // namespace

TEST_CASE(
    "the ops of include/troupe/ops.hpp are exactly those the backends register, each with a "
    "CPU kernel") {
  const auto ops = declared_ops();
  // The parse found the ops (a change of ops.hpp's layout must not empty the list).
  REQUIRE(ops.size() >= 17);
  CHECK(std::count(ops.begin(), ops.end(), "gemm") == 1);
  CHECK(std::count(ops.begin(), ops.end(), "relu_backward") == 1);
  CHECK(std::set<std::string>(ops.begin(), ops.end()).size() == ops.size());
  for (const auto& op : ops) {
    CAPTURE(op);
    CHECK(kernels::has_kernel(op.c_str(), kernels::device_type::cpu));
  }
  // Every registration line of every backend names a declared op (by its struct, whose
  // name is the op's name).
  const std::regex registration{R"(TROUPE_REGISTER_KERNEL\(\s*ops::([a-z0-9_]+)\s*,)"};
  std::size_t registrations = 0;
  for (const auto& folder : {std::string{"kernels/cpu"}, std::string{"kernels/cuda"}})
    for (const auto& file : files_in(folder, folder == "kernels/cpu" ? ".cpp" : ".cu")) {
      const auto text = source_text(file);
      for (std::sregex_iterator it{text.begin(), text.end(), registration}, end; it != end; ++it) {
        const auto op = (*it)[1].str();
        INFO(file << " registers ops::" << op);
        CHECK(std::count(ops.begin(), ops.end(), op) == 1);
        ++registrations;
      }
    }
  CHECK(registrations >= ops.size());
}

TEST_CASE("every op has a test of its CPU kernel and a comparison of its CUDA kernel with it") {
  std::vector<std::pair<std::string, std::string>> cpu_tests;  // file, text
  for (const auto& file : files_in("tests/kernels", "_test.cpp"))
    if (file != "tests/kernels/dispatch_test.cpp" &&
        file != "tests/kernels/cuda_kernels_test.cpp" &&
        file != "tests/kernels/ops_coverage_test.cpp")
      cpu_tests.emplace_back(file, source_text(file));
  const auto cuda_test = source_text("tests/kernels/cuda_kernels_test.cpp");
  for (const auto& op : declared_ops()) {
    CAPTURE(op);
    const bool tested = std::any_of(cpu_tests.begin(), cpu_tests.end(),
                                    [&](const auto& t) { return names_op(t.second, op); });
    INFO("add tests/kernels/" << op << "_test.cpp (or a test naming ops::" << op << ")");
    CHECK(tested);
    if (test::is_cpu_only_op(op))
      continue;
    INFO("add a CUDA-against-CPU case for ops::" << op
                                                 << " to tests/kernels/cuda_kernels_test.cpp");
    CHECK(names_op(cuda_test, op));
  }
}

TEST_CASE("an op declared CPU only has a CPU kernel and no CUDA one, and its layer a CUDA path") {
  const auto ops = declared_ops();
  std::size_t cpu_only = 0;
  for (const char* op : kernels::ops::cpu_only_ops) {
    CAPTURE(op);
    CHECK(std::count(ops.begin(), ops.end(), op) == 1);
    CHECK(kernels::has_kernel(op, kernels::device_type::cpu));
    CHECK_FALSE(kernels::has_kernel(op, kernels::device_type::cuda));
    ++cpu_only;
  }
  CHECK(cpu_only == 7);
  // conv2d's ops: the layer convolves on a CUDA device by im2col and gemm, which have CUDA
  // kernels (the layer's test on the fake GPU runs that path). relu's and max pooling's bf16
  // ops: on a CUDA device those layers take f32 activations (bf16_flow::none), widened by
  // from_bf16, and run their f32 ops.
  std::string cuda_sources;  // read rather than asked: a build may leave CUDA out
  for (const auto& file : files_in("kernels/cuda", ".cu"))
    cuda_sources += source_text(file);
  for (const char* op :
       {"im2col", "im2col_bf16", "col2im", "gemm", "gemm_bf16", "relu_forward", "relu_backward",
        "max_pool2d_forward", "max_pool2d_backward", "from_bf16"}) {
    CAPTURE(op);
    CHECK(std::count(ops.begin(), ops.end(), op) == 1);
    CHECK(cuda_sources.find("TROUPE_REGISTER_KERNEL(ops::" + std::string(op) +
                            ", device_type::cuda") != std::string::npos);
  }
}

TEST_CASE("every function with vector clones has a name no other CPU kernel file uses") {
  // Clang names a clone's resolver without its anonymous namespace: two files' helpers of one
  // name link as one symbol defined twice (kernels/cpu/vectorize.hpp). GCC's build does not
  // see it; CI's clang build does, late. So the names are held unique here.
  const std::regex cloned{R"(TROUPE_VECTOR_CLONES\s+(?:[\w:<>]+\s+)+?(\w+)\s*\()"};
  std::map<std::string, std::string> seen;  // name -> the file that has it
  for (const auto& file : files_in("kernels/cpu", ".cpp")) {
    const auto text = source_text(file);
    for (std::sregex_iterator it{text.begin(), text.end(), cloned}, end; it != end; ++it) {
      const auto name = (*it)[1].str();
      INFO(name << " in " << file);
      const auto [at, fresh] = seen.emplace(name, file);
      CHECK((fresh || at->second == file));
    }
  }
  CHECK(seen.size() >= 20);
}
