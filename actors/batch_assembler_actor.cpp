// batch_assembler_actor.cpp: batches from row numbers, on the first layer's node.
#include "actors/batch_assembler_actor.hpp"

#include <cstring>

#include "runtime/core/gpu.hpp"

namespace troupe {

std::string batch_assembler_name(int node) { return "loader@node" + std::to_string(node); }

// Note [a batch when the device is idle]
// A batch is gathered ahead (`prefetch` steps), so its job goes to the device's idle lane
// (Note [idle lane] in runtime/core/device.cpp): it runs when the device would otherwise
// wait, and the first layer's forward, which reads it, hurries it if it has not run by
// then (arrive(), runtime/core/transfer.hpp). In the main lane it ran where the trainer's
// credit happened to put it: in a DP2 step of the shipped MLP that was between the
// largest layer's update and its all-gather, which the next forward waits for, on both
// devices (33 us of a 1.2 ms step, traced); from the idle lane it fills a wait for the
// other replica instead. DP2 went from 93.2k to 98.4k samples/s (+4.9%, medians of 5
// alternating 1500-step runs of the same binary with the library before and after); one
// device did not move (72.7k / 72.7k). On a GPU the gather also issues the copy to the
// GPU's queue, which stays in the main lane.
tensor gather_rows(const std::shared_ptr<const dataset_split>& data, const dataset& source,
                   std::vector<std::int64_t> rows, device& on, job_label label) {
  const auto features = source.features;
  auto x = tensor::empty({static_cast<std::int64_t>(rows.size()), features}, dtype::f32, on.id());
  label.bytes = bytes_of(x);
  // On a GPU the rows are gathered into page-locked host memory by its stream's thread and
  // go over in one asynchronous copy, which keeps the host rows until it has run (Note [GPU
  // streams]).
  auto* gpu = on.work().gpu();
  const auto host = gpu != nullptr ? tensor::empty_pinned(x.shape()) : x;
  // `data` keeps the images alive until the job has run.
  auto gather = [data, images = source.images.data(), features, x, host, gpu,
                 picked = std::move(rows)] {
    float* xs = host.f32();
    for (std::size_t i = 0; i < picked.size(); ++i)
      std::memcpy(xs + static_cast<std::int64_t>(i) * features, images + picked[i] * features,
                  static_cast<std::size_t>(features) * sizeof(float));
    if (gpu != nullptr)
      gpu->copy(x.raw(), host.raw(), x.bytes());
  };
  // Note [a batch when the device is idle]
  x.set_ready(gpu != nullptr ? on.work().submit(std::move(gather), label)
                             : on.work().submit_when_idle(std::move(gather), label));
  return x;
}

batch_assembler_actor::batch_assembler_actor(caf::actor_config& config, int node,
                                             std::shared_ptr<const dataset_split> data,
                                             device_set* devices)
    : device_actor(config, batch_assembler_name(node), nullptr),
      data_(std::move(data)),
      devices_(devices) {}

caf::message_handler batch_assembler_actor::handlers() {
  return {[this](batch_rows_msg& message) {
    // The rows come over the network: each must be a sample of this node's data set.
    const auto& source = message.test ? data_->test : data_->train;
    const char* split = message.test ? "test" : "train";
    // And no more of them than the split has: a batch never repeats a sample, and the
    // gather allocates rows x features before it reads one.
    const auto rows = static_cast<std::int64_t>(message.rows.size());
    TROUPE_CHECK(rows > 0 && rows <= source.count,
                 actor_name() << ": a batch of " << rows << " rows, but the " << split
                              << " split has " << source.count << " samples");
    for (auto row : message.rows)
      TROUPE_CHECK(row >= 0 && row < source.count,
                   actor_name() << ": row " << row << " of a batch is not in the " << split
                                << " split (" << source.count << " samples)");
    device_id where;
    TROUPE_CHECK(device_id::parse(message.device, where) && where.node == this_node(),
                 actor_name() << ": a batch for device '" << message.device
                              << "', which is not on this node");
    auto x = gather_rows(data_, source, std::move(message.rows), devices_->at(where),
                         job_for("load", message.tag));
    // Sent on behalf of the loader: the stamp is its send, which the first layer's
    // handling ends, so no handling of our own is recorded.
    send(message.first_layer, activation_msg{message.tag, std::move(x), message.trace});
  }};
}

}  // namespace troupe
