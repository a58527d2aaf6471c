// job_span.hpp: the trace span of a job a stream ran (stream_worker.cpp's workers and the
// simulation's streams record it the same way). Internal to runtime/core.
#pragma once

#include <cstdint>

#include "troupe/device.hpp"

namespace troupe {

/// Records a job of `label` on the stream track `track` that started at `start_ns` and
/// took `duration_ns`, submitted at `submitted_ns` (0: not known), when tracing.
void record_job_span(std::uint32_t track, const job_label& label, std::int64_t submitted_ns,
                     std::int64_t start_ns, std::int64_t duration_ns);

}  // namespace troupe
