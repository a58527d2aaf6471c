// batch_assembler_actor.cpp: batches from row numbers, on the first layer's node.
#include "actors/training/batch_assembler_actor.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/core/gpu.hpp"
#include "runtime/core/stream_state.hpp"

namespace troupe {

std::string batch_assembler_name(int node) { return "loader@node" + std::to_string(node); }

// Note [a batch when the device is idle]
// A batch is gathered ahead (`prefetch` steps), so its job goes to the device's idle lane
// (Note [idle lane] in runtime/core/stream.cpp): it runs when the device would otherwise
// wait, and the first layer's forward, which reads it, hurries it if it has not run by
// then (arrive(), runtime/core/transfer.hpp). In the main lane it ran where the trainer's
// credit happened to put it: in a DP2 step of the shipped MLP that was between the
// largest layer's update and its all-gather, which the next forward waits for, on both
// devices (33 us of a 1.2 ms step, traced); from the idle lane it fills a wait for the
// other replica instead. DP2 went from 93.2k to 98.4k samples/s (+4.9%, medians of 5
// alternating 1500-step runs of the same binary with the library before and after); one
// device did not move (72.7k / 72.7k). On a GPU the rows are gathered on another thread
// and only the copy is this job (Note [a GPU's batch gathered off its thread]).
//
// Note [a GPU's batch gathered off its thread]
// A GPU stream's thread issues kernels and handles its actors' messages; while it copies
// rows it issues nothing, and the GPU runs dry once what was issued is done. Gathering
// the large MLP's batch (4096 rows of 784 floats into page-locked memory) took that thread
// 3.1-3.3 ms a step on an H200 (traced). So on a GPU the rows are gathered by host threads
// of their own (streams no device has, for the whole process: up to 4, at most half the
// cores, the rows split between them), and the GPU's job, in its idle lane, only waits for
// them (done by then: they started `prefetch` steps ahead) and issues the copy; the
// forward that reads the batch hurries it. On the H200 (scripts/gpu-check.sh, one run
// each): the TF32 step went from 4.44 to 3.52 ms (GEMM floor 1.51), FP32 from 12.59 to
// 12.18 ms (floor 9.34); with one gather thread the GPU's job still waited 1.3 ms a step for
// it, with four 0.013 ms (the step did not move further: what is left of it is elsewhere).
// Note [images decoded off the devices' threads]
// An image folder's batch is decoded, resized, augmented and normalised where it is gathered
// (runtime/data/images.hpp): on the device's own thread, its kernels would wait for libpng.
// With [data] workers = N (1 by default) the rows are split between N host threads of their
// own, as a GPU's are (the Note above), started `prefetch` batches ahead; the device's job,
// in its idle lane, only waits for them, and rethrows what a worker threw (an image whose
// body does not decode), so the run ends naming the file instead of training on garbage.
// Measured (bench/data_loader.py, 2-core Xeon VM): Fashion-MNIST's 28x28 PNGs with a random
// crop and flip decode at 39k images/s on one worker and 75k on two (torchvision's
// ImageFolder in a DataLoader: 5.0k and 10.4k with 1 and 2 worker processes), and
// config/fashion_cnn.toml (848 samples/s from the IDX files) trains at 0.96x that rate from
// the PNG folder with one worker and 0.97x with two.
namespace {

constexpr std::size_t max_early = 65536;  // rows messages held, of all replicas

/// Host threads that gather rows off the devices' threads: `count` of them (made as first
/// asked for, then kept for the process), or by default (a GPU's batch) up to 4, at most half
/// the cores.
std::vector<stream*> host_gathers(std::size_t count) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<stream>> made;
  if (count == 0) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    count = std::clamp(cores / 2, 1u, 4u);
  }
  std::lock_guard<std::mutex> guard{mutex};
  while (made.size() < count)
    made.push_back(std::make_unique<stream>(device_id{}, -1));
  std::vector<stream*> out;
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(made[i].get());
  return out;
}

}  // namespace

tensor gather_rows(const std::shared_ptr<const dataset_split>& data, const dataset& source,
                   std::vector<std::int64_t> rows, device& on, job_label label,
                   std::int64_t epoch) {
  const auto features = source.features;
  auto x = tensor::empty({static_cast<std::int64_t>(rows.size()), features}, dtype::f32, on.id());
  label.bytes = bytes_of(x);
  // On a GPU the rows are gathered into page-locked host memory and go over in one
  // asynchronous copy, which keeps the host rows until it has run (Note [GPU streams]).
  auto* gpu = gpu_queue_of(on.work());
  const auto host = gpu != nullptr ? tensor::empty_pinned(x.shape()) : x;
  // Rows [first, last) of the batch; `data` keeps the features alive until the job has run.
  const auto picked = std::make_shared<const std::vector<std::int64_t>>(std::move(rows));
  auto gather = [data, &source, features, host, picked, epoch](std::size_t first, std::size_t last) {
    source.gather(picked->data(), first, last,
                  host.f32() + static_cast<std::int64_t>(first) * features, epoch);
  };
  const auto count = picked->size();
  if (gpu == nullptr && source.workers == 0) {
    // Note [a batch when the device is idle]
    x.set_ready(on.work().submit_when_idle([gather, count] { gather(0, count); }, label));
    return x;
  }
  // Note [a GPU's batch gathered off its thread]; an image folder's decoding likewise, on
  // [data] workers threads (Note [images decoded off the devices' threads]).
  const auto gatherers = host_gathers(static_cast<std::size_t>(source.workers));
  // A worker's failure (an image that does not decode) is the device job's: that stream's
  // error handler ends the run naming it, where the worker's would be lost.
  auto failures = std::make_shared<std::vector<std::exception_ptr>>(gatherers.size());
  std::vector<event> gathered;
  for (std::size_t k = 0; k < gatherers.size(); ++k) {
    const auto first = count * k / gatherers.size(), last = count * (k + 1) / gatherers.size();
    if (first < last)
      gathered.push_back(gatherers[k]->submit(
          [gather, first, last, failures, k] {
            try {
              gather(first, last);
            } catch (...) {
              (*failures)[k] = std::current_exception();
            }
          },
          label));
  }
  x.set_ready(on.work().submit_when_idle(
      [gathered = std::move(gathered), failures, gpu, x, host] {
        for (const auto& e : gathered)
          e.wait();
        for (const auto& failure : *failures)
          if (failure)
            std::rethrow_exception(failure);
        if (gpu != nullptr)
          gpu->copy(x.raw(), host.raw(), x.bytes());
      },
      label));
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
    check(message);  // before it is held too
    auto& order = replicas_[message.tag.replica];
    TROUPE_CHECK(message.sequence >= order.next && order.early.count(message.sequence) == 0,
                 actor_name() << ": the rows of replica " << message.tag.replica << " numbered "
                              << message.sequence << " came twice");
    if (message.sequence > order.next) {
      TROUPE_CHECK(early_ < max_early,
                   actor_name() << ": " << early_ << " batches wait for earlier rows; replica "
                                << message.tag.replica << "'s wait for the rows numbered "
                                << order.next << ", which never came");
      order.early.emplace(message.sequence, std::move(message));
      ++early_;
      return;
    }
    assemble(message);
    ++order.next;
    for (auto it = order.early.begin(); it != order.early.end() && it->first == order.next;
         it = order.early.erase(it), ++order.next, --early_)
      assemble(it->second);
  }};
}

std::string batch_assembler_actor::waiting_for() const {
  std::string s;
  for (const auto& [replica, order] : replicas_)
    if (!order.early.empty())
      s += "; " + std::to_string(order.early.size()) + " batch(es) of replica " +
           std::to_string(replica) + " wait for the rows numbered " + std::to_string(order.next);
  return s;
}

void batch_assembler_actor::check(const batch_rows_msg& message) const {
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
  // Its devices are this node's (in a simulated run, every node's: it stands for one).
  device_id where;
  TROUPE_CHECK(
      device_id::parse(message.device, where) &&
          std::any_of(devices_->all().begin(), devices_->all().end(),
                      [&](const auto& d) { return d->id() == where; }),
      actor_name() << ": a batch for device '" << message.device << "', which is not on this node");
}

// Note [rows in order]
// The rows of a replica's batches are gathered in the order the loader sent them: jobs
// on one stream run in order, and an evaluation's batch must not be overtaken by the next
// step's (its forward would see the newer parameters). Through CAF they came in that
// order; now they may also be left in shared memory (Note [messages through shared
// memory] in runtime/net/shared_memory.cpp), and a message sent through CAF before the
// link was made, or when shared memory had no room, can arrive after one left there
// later. So each carries the loader's count for its replica, and the assembler holds one
// that came early until those before it came. A message passes another only while that
// one crosses (milliseconds), so few wait at a time; more than max_early waiting, checked
// like any batch, ends the run (rows that never come would hold them forever).
void batch_assembler_actor::assemble(batch_rows_msg& message) {
  const auto& source = message.test ? data_->test : data_->train;
  device_id where;
  device_id::parse(message.device, where);  // check() held
  auto x = gather_rows(data_, source, std::move(message.rows), devices_->at(where),
                       job_for(job_kind::load, message.tag), gather_epoch(message.tag));
  // Sent on behalf of the loader: the stamp is its send, which the first layer's
  // handling ends, so no handling of our own is recorded. To a layer of its own node.
  const node_send_scope sending{node_send::within_node};
  send(message.first_layer, activation_msg{message.tag, std::move(x), message.trace});
}

}  // namespace troupe
