// gloo_allreduce.cpp: the worker thread of one gloo context (see the header).
#include "runtime/collective/gloo_allreduce.hpp"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <sstream>

#include "troupe/check.hpp"

namespace troupe {

// Note [gloo order]
// gloo matches the messages of a collective by the context, the order in which each rank
// issues collectives on it, and a tag: every rank must issue the same collectives on a
// context in the same order. Here a context serves exactly one averager actor per rank
// (one layer's averager of each replica), and its worker runs that actor's jobs one at a
// time, in submission order. An averager submits a step's all-reduce when that step's
// gradients arrive, and the layer sends them in step order (one message per step, over
// one wire; CAF keeps the order of messages between two actors), so every rank issues
// step k's all-reduce after step k - 1's. (In synchronous training there is even at most
// one in flight: step k + 1's gradients need the parameters that step k's sums make.)
// The tag is the step and the size mixed
// (gloo_tag in the averager): if an order did differ, or replicas disagreed on a layer's
// size, the ranks would wait for tags nobody sends and fail at the timeout, naming the
// averager, instead of summing the wrong buffers together.

std::string unique_gloo_prefix() {
  static std::atomic<std::uint64_t> runs{0};
  return "troupe." + std::to_string(::getpid()) + "." + std::to_string(runs.fetch_add(1)) + "/";
}

namespace {

// gloo's view of the run's store (runtime/collective/store.hpp): gloo waits without a
// timeout of its own in get(), so every call takes the context's.
class gloo_store_view final : public gloo::rendezvous::Store {
 public:
  gloo_store_view(collective_store& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  collective_store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

struct detail::gloo_worker_state {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<gloo_allreduce_job> queue;  // guarded by mutex
  bool stopping = false;                 // guarded by mutex
};

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string seconds_text(std::chrono::milliseconds timeout) {
  std::ostringstream out;
  out << static_cast<double>(timeout.count()) / 1000.0 << " s";
  return out.str();
}

/// The gloo device and context of one rank (only its worker thread touches them).
struct connection {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::string error;  // not empty: connecting failed, and every job fails with this
};

gloo_allreduce_outcome reduce(connection& to, gloo_allreduce_job& job, int size,
                              std::chrono::milliseconds timeout) {
  gloo_allreduce_outcome outcome;
  try {
    if (job.prepare)
      job.prepare();
    outcome.start_ns = steady_ns();
    if (size > 1 && job.elements > 0) {
      gloo::AllreduceOptions options{to.context};
      options.setInput(job.data, job.elements);
      options.setOutput(job.data, job.elements);
      // The ring algorithm: a reduce-scatter then an all-gather, so each element's sum is
      // computed once, by one rank, and every rank ends with the same bits.
      options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      void (*sum)(void*, const void*, const void*, std::size_t) = &gloo::sum<float>;
      options.setReduceFunction(sum);
      options.setTag(job.tag);
      options.setTimeout(timeout);
      gloo::allreduce(options);
    }
    outcome.end_ns = steady_ns();
    outcome.ok = true;
  } catch (const std::exception& e) {
    outcome.error = e.what();
  } catch (...) {
    outcome.error = "unknown exception";
  }
  return outcome;
}

/// The worker's thread: connect, then run jobs in order until stopped.
void run(std::shared_ptr<detail::gloo_worker_state> shared, gloo_rendezvous rendezvous,
         std::string key);

}  // namespace

gloo_allreduce_worker::gloo_allreduce_worker(const gloo_rendezvous& rendezvous, std::string key,
                                             int rank, int size, std::chrono::milliseconds timeout)
    : state_(std::make_shared<detail::gloo_worker_state>()) {
  TROUPE_CHECK(rendezvous.store != nullptr, "a gloo context '" << key << "' without a store");
  TROUPE_CHECK(size >= 1 && rank >= 0 && rank < size, "gloo rank " << rank << " of " << size);
  TROUPE_CHECK(timeout.count() > 0, "a gloo timeout of " << timeout.count() << " ms");
  state_->rank = rank;
  state_->size = size;
  state_->timeout = timeout;
  thread_ = std::thread(run, state_, rendezvous, std::move(key));
}

gloo_allreduce_worker::~gloo_allreduce_worker() {
  stop();
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // it holds the state, and ends after the callback that got us here
  else
    thread_.join();
}

int gloo_allreduce_worker::rank() const { return state_->rank; }
int gloo_allreduce_worker::size() const { return state_->size; }

void gloo_allreduce_worker::submit(gloo_allreduce_job job) {
  {
    std::lock_guard<std::mutex> guard{state_->mutex};
    if (state_->stopping)
      return;
    state_->queue.push_back(std::move(job));
  }
  state_->wake.notify_all();
}

void gloo_allreduce_worker::stop() {
  std::deque<gloo_allreduce_job> dropped;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> guard{state_->mutex};
    state_->stopping = true;
    dropped.swap(state_->queue);
  }
  state_->wake.notify_all();
}

namespace {

void run(std::shared_ptr<detail::gloo_worker_state> shared, gloo_rendezvous rendezvous,
         std::string key) {
  auto& s = *shared;
  connection to;
  const std::string where = "gloo context '" + rendezvous.prefix + key + "' (rank " +
                            std::to_string(s.rank) + " of " + std::to_string(s.size) + ")";
  if (s.size > 1) {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = rendezvous.hostname;
      to.device = gloo::transport::tcp::CreateDevice(attr);
      auto prefixed = make_prefix_store(rendezvous.prefix + key + "/", rendezvous.store);
      gloo_store_view store{*prefixed, s.timeout};
      to.context = std::make_shared<gloo::rendezvous::Context>(s.rank, s.size);
      to.context->setTimeout(s.timeout);
      to.context->connectFullMesh(store, to.device);
    } catch (const std::exception& e) {
      to.context.reset();
      to.error = where + ": could not connect to its " + std::to_string(s.size - 1) +
                 " peer(s) through " + rendezvous.hostname + " within " + seconds_text(s.timeout) +
                 " (did every replica start?): " + e.what();
    }
  }
  for (;;) {
    gloo_allreduce_job job;
    {
      std::unique_lock<std::mutex> lock{s.mutex};
      s.wake.wait(lock, [&] { return s.stopping || !s.queue.empty(); });
      if (s.stopping)
        break;
      job = std::move(s.queue.front());
      s.queue.pop_front();
    }
    gloo_allreduce_outcome outcome;
    if (!to.error.empty()) {
      outcome.error = to.error;
    } else {
      outcome = reduce(to, job, s.size, s.timeout);
      if (!outcome.ok)
        outcome.error = where + ": all-reduce of " + std::to_string(job.elements) +
                        " floats (tag " + std::to_string(job.tag) + ") failed within " +
                        seconds_text(s.timeout) + " (is a peer gone?): " + outcome.error;
    }
    if (job.done)
      job.done(outcome);
  }
  // The context goes before its device (it holds pairs the device's loop serves).
  to.context.reset();
  to.device.reset();
}

}  // namespace

}  // namespace troupe
