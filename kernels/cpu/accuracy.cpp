// accuracy.cpp: the number of rows of logits(rows, classes) whose argmax equals the label,
// on the CPU.
//
// Ties go to the first maximum (as torch.argmax documents). With NaN logits the argmax
// is some in-range index (the loss is NaN then anyway). Rows labelled ignore_index are
// not counted. It counts only; dividing by the rows counted is the caller's business.
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void accuracy(const context&, int rows, int classes, const float* logits,
              const std::int32_t* labels, std::int32_t ignore_index, float* correct) {
  std::int32_t count = 0;
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<std::int64_t>(r) * classes;
    const std::int32_t label = labels[r];
    if (label == ignore_index)
      continue;
    TROUPE_CHECK(label >= 0 && label < classes,
                 "label " << label << " of row " << r << " is outside [0, " << classes
                          << ")");
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (row[c] > row[best])
        best = c;
    }
    count += best == label ? 1 : 0;
  }
  *correct = static_cast<float>(count);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::accuracy, device_type::cpu, accuracy);

}  // namespace troupe::kernels::cpu
