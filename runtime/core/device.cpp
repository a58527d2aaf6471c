// device.cpp: devices (a stream and a kernel context each) and the device set; the streams
// themselves are in stream.cpp, their workers in stream_worker.cpp.
//
// Note [OpenBLAS threads]
// A CPU device is one core, so its GEMMs must not spread over the other cores (OpenBLAS's
// default). The right setting would be per stream thread, but this OpenBLAS (0.3.21,
// Debian 12) has only the process-wide openblas_set_num_threads (set_num_threads_local
// arrived in 0.3.27). So the setting is scoped instead: the first live device_set sets one
// thread and remembers the value it found; the last one to go restores it, unless someone
// changed it meanwhile (then theirs stands). The limitation: while a device_set lives, a
// library user's own BLAS calls on other threads run on one thread too.
#include "troupe/device.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "runtime/core/device_name.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/simulation.hpp"
#include "runtime/core/stream_state.hpp"
#include "troupe/error.hpp"

namespace troupe {

std::string device_id::to_string() const {
  return (node > 0 ? "node" + std::to_string(node) + "/" : std::string{}) +
         kernels::to_string(type) + ":" + std::to_string(index);
}

namespace {
std::atomic<int> the_node{0};
}  // namespace

int this_node() { return the_node.load(std::memory_order_relaxed); }
void set_this_node(int node) { the_node.store(node, std::memory_order_relaxed); }

bool device_id::parse(const std::string& text, device_id& out) {
  auto parsed = parse_device_name(text);  // the one parser (device_name.hpp)
  if (parsed.ok())
    out = parsed.id;
  return parsed.ok();
}

int allowed_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

device::device(device_id id, simulation& world) : id_(id) {
  if (id.type != device_type::cpu)
    throw user_error("device " + id.to_string() +
                     " cannot be simulated: troupe simulate models CPU devices only (its "
                     "wiring can be: --set parallel.devices=[\"cpu:0\", ...] with "
                     "--calibration FILE holding that device's costs)");
  stream_ = std::make_unique<stream>(id, world.backend());
}

device::device(device_id id, int core, const device_options& options) : id_(id) {
  if (id.type == device_type::cuda) {
    gpu::require_device(id.index);  // a user_error naming what the machine has
    auto queue = gpu::require_backend().make_queue(id.index, options.tf32);
    context_ = queue->context();
    stream_ = std::make_unique<stream>(id, make_gpu_backend(std::move(queue)));
    return;
  }
  context_.gemm = options.cpu_gemm;
  stream_ = std::make_unique<stream>(id, core);
}

device::~device() = default;

namespace {

// Note [OpenBLAS threads]: the live device_sets and the thread count they found.
struct blas_threads_scope {
  std::mutex mutex;
  int live = 0;
  int found = 1;
};

blas_threads_scope& the_blas_threads_scope() {
  static blas_threads_scope scope;
  return scope;
}

}  // namespace

namespace {

// Note [OpenBLAS threads]: the first live device_set makes CPU kernels use one thread.
void enter_blas_threads_scope() {
  auto& scope = the_blas_threads_scope();
  std::lock_guard<std::mutex> guard{scope.mutex};
  if (scope.live++ == 0) {
    scope.found = kernels::cpu_kernel_threads();
    kernels::set_cpu_kernel_threads(1);  // each CPU device is one core (Note [CPU streams])
  }
}

}  // namespace

device_set::device_set(const std::vector<device_id>& ids, simulation& world) {
  enter_blas_threads_scope();
  for (const auto& id : ids)
    devices_.push_back(std::make_unique<device>(id, world));
}

device_set::device_set(const std::vector<device_id>& ids, int first_core,
                       const device_options& options) {
  enter_blas_threads_scope();
  for (const auto& id : ids)
    devices_.push_back(std::make_unique<device>(
        id, id.type == device_type::cpu ? first_core + id.index : -1, options));
}

device_set::~device_set() {
  devices_.clear();  // the streams run what is queued first: still one thread per call
  auto& scope = the_blas_threads_scope();
  std::lock_guard<std::mutex> guard{scope.mutex};
  if (--scope.live == 0 && kernels::cpu_kernel_threads() == 1)
    kernels::set_cpu_kernel_threads(scope.found);
}

device& device_set::at(const device_id& id) {
  for (auto& d : devices_)
    if (d->id() == id)
      return *d;
  TROUPE_CHECK(false, "device " << id.to_string() << " is not part of this run");
  throw;  // unreachable
}

void device_set::synchronize() {
  for (auto& d : devices_)
    d->work().synchronize();
}

}  // namespace troupe
