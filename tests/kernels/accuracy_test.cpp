// accuracy_test.cpp: the CPU accuracy count against a naive argmax, ties, ignored rows and
// the label range check.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("accuracy counts the rows whose argmax equals the label") {
  auto accuracy = kernels::lookup<kernels::ops::accuracy>(kernels::device_type::cpu);
  const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {1000, 10}};
  std::uint32_t seed = 500;
  for (const auto& shape : shapes) {
    const int rows = shape[0], classes = shape[1];
    CAPTURE(rows);
    CAPTURE(classes);
    const auto logits = test::random_floats(static_cast<std::size_t>(rows) * classes, ++seed);
    const auto labels = test::random_labels(rows, classes, ++seed);
    std::int32_t want = 0;
    for (int r = 0; r < rows; ++r) {
      int best = 0;
      for (int c = 1; c < classes; ++c)
        if (logits[r * classes + c] > logits[r * classes + best])
          best = c;
      want += best == labels[r] ? 1 : 0;
    }
    float correct = -1;
    accuracy(test::cpu_context(), rows, classes, logits.data(), labels.data(), kernels::no_ignore_index, &correct);
    CHECK(correct == want);
  }
}

TEST_CASE("accuracy breaks ties toward the first maximum, as torch.argmax") {
  auto accuracy = kernels::lookup<kernels::ops::accuracy>(kernels::device_type::cpu);
  const std::vector<float> logits{1, 3, 3, 0,   // tie between 1 and 2: argmax 1
                                  5, 5, 5, 5,   // all equal: argmax 0
                                  0, 0, 0, 1};  // plain: argmax 3
  float correct = -1;
  const std::vector<std::int32_t> first{1, 0, 3};
  accuracy(test::cpu_context(), 3, 4, logits.data(), first.data(), kernels::no_ignore_index, &correct);
  CHECK(correct == 3);
  const std::vector<std::int32_t> later{2, 3, 3};
  accuracy(test::cpu_context(), 3, 4, logits.data(), later.data(), kernels::no_ignore_index, &correct);
  CHECK(correct == 1);
}

TEST_CASE("accuracy rejects a label that is not a class index") {
  auto accuracy = kernels::lookup<kernels::ops::accuracy>(kernels::device_type::cpu);
  const std::vector<float> logits(4, 0.0f);
  const std::vector<std::int32_t> labels{0, 2};
  float correct = 0;
  CHECK_THROWS_AS(accuracy(test::cpu_context(), 2, 2, logits.data(), labels.data(), kernels::no_ignore_index, &correct),
                  check_failure);
}

TEST_CASE("accuracy leaves out the rows labelled ignore_index, whatever their logits") {
  auto accuracy = kernels::lookup<kernels::ops::accuracy>(kernels::device_type::cpu);
  const std::vector<float> logits{0, 1,   // argmax 1
                                  1, 0,   // argmax 0
                                  0, 1};  // argmax 1
  // -100 (torch's default) is no class index: counted, it would be refused (the test above).
  const std::vector<std::int32_t> labels{1, -100, 0};
  float correct = -1;
  accuracy(test::cpu_context(), 3, 2, logits.data(), labels.data(), -100, &correct);
  CHECK(correct == 1);  // row 0 right, row 2 wrong, row 1 not counted
  const std::vector<std::int32_t> ignore_one{1, 0, 1};
  accuracy(test::cpu_context(), 3, 2, logits.data(), ignore_one.data(), 1, &correct);
  CHECK(correct == 1);  // only row 1 (label 0, argmax 0) is counted
}
