// fake_gpu.hpp: a GPU backend (runtime/core/gpu.hpp) in host memory, for testing GPU
// streams, transfers and memory on machines without a GPU.
//
// Its "GPU" is a thread that runs what was issued (kernels, copies, done callbacks) in
// order, and only while its gate is open: a test closes the gate to hold the GPU back and
// sees what the runtime does while the GPU has not yet run a job. Device memory is host
// memory, so a test can read it after the GPU is done. Install it with fake_gpu_scope; with
// kernels = true the cuda kernels are the CPU kernels issued to the fake GPU's thread, so
// that whole training runs on cuda:N can run here, asynchronously as on a GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/replace_kernel.hpp"
#include "runtime/core/gpu.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::testing {

/// The "GPU" of one fake device: runs issued work in order while the gate is open.
class fake_gpu_engine {
 public:
  fake_gpu_engine() : thread_([this] { run(); }) {}
  ~fake_gpu_engine() {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      stopping_ = true;
      open_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  void issue(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      queue_.push_back(std::move(work));
      ++issued_;
    }
    changed_.notify_all();
  }
  void set_open(bool open) {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      open_ = open;
    }
    changed_.notify_all();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock{mutex_};
    changed_.wait(lock, [this] { return ran_ == issued_; });
  }
  std::size_t issued() {
    std::lock_guard<std::mutex> guard{mutex_};
    return issued_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock{mutex_};
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || (open_ && !queue_.empty()); });
      if (queue_.empty())
        return;  // stopping, and everything issued has run
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      work = nullptr;
      lock.lock();
      ++ran_;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::size_t issued_ = 0;
  std::size_t ran_ = 0;
  bool open_ = true;
  bool stopping_ = false;
  std::thread thread_;
};

class fake_gpu_queue final : public gpu::queue {
 public:
  explicit fake_gpu_queue(std::shared_ptr<fake_gpu_engine> engine) : engine_(std::move(engine)) {}
  ~fake_gpu_queue() override { engine_->wait_idle(); }
  void enter_thread() override {}
  kernels::context context() const override { return {engine_.get(), nullptr}; }
  void when_done(std::function<void()> done) override { engine_->issue(std::move(done)); }
  void copy(void* to, const void* from, std::size_t bytes) override {
    engine_->issue([to, from, bytes] { std::memcpy(to, from, bytes); });
  }
  void synchronize() override { engine_->wait_idle(); }

 private:
  std::shared_ptr<fake_gpu_engine> engine_;
};

class fake_gpu_backend final : public gpu::backend {
 public:
  explicit fake_gpu_backend(int devices) : devices_(devices) {
    for (int i = 0; i < devices; ++i)
      engines_.push_back(std::make_shared<fake_gpu_engine>());
  }
  std::string name() const override { return "fake GPU"; }
  int device_count(std::string& why) override {
    if (devices_ == 0)
      why = "the fake has none";
    return devices_;
  }
  std::string describe(int device) override { return "fake " + std::to_string(device); }
  std::unique_ptr<gpu::queue> make_queue(int device, bool tf32) override {
    queues_made_ += 1;
    tf32_queues_ += tf32 ? 1 : 0;
    return std::make_unique<fake_gpu_queue>(engines_.at(static_cast<std::size_t>(device)));
  }
  void* allocate(int, std::size_t bytes) override {
    std::lock_guard<std::mutex> guard{mutex_};
    ++raw_allocations_;
    return ::operator new(bytes);
  }
  void release(int, void* memory) override { ::operator delete(memory); }
  void* allocate_host(std::size_t bytes) override {
    std::lock_guard<std::mutex> guard{mutex_};
    ++host_allocations_;
    return ::operator new(bytes);
  }
  void release_host(void* memory) override { ::operator delete(memory); }
  void copy_now(void* to, const void* from, std::size_t bytes) override {
    std::memcpy(to, from, bytes);
  }
  fake_gpu_engine& engine(int device) { return *engines_.at(static_cast<std::size_t>(device)); }
  /// Queues made, and of them with TF32 GEMMs ([run] tf32).
  int queues_made() const { return queues_made_; }
  int tf32_queues() const { return tf32_queues_; }
  int host_allocations() {
    std::lock_guard<std::mutex> guard{mutex_};
    return host_allocations_;
  }
  int raw_allocations() {
    std::lock_guard<std::mutex> guard{mutex_};
    return raw_allocations_;
  }

 private:
  int devices_;
  std::mutex mutex_;
  int raw_allocations_ = 0;
  int host_allocations_ = 0;
  std::atomic<int> queues_made_{0};
  std::atomic<int> tf32_queues_{0};
  std::vector<std::shared_ptr<fake_gpu_engine>> engines_;
};

/// A cuda kernel of the fake GPU: issues the CPU kernel of `Op`, with the arguments as
/// they are now (pointers to device memory, sizes), to the engine of the context's queue.
template <class Op, class Function = typename Op::function>
struct fake_gpu_kernel;
template <class Op, class... Args>
struct fake_gpu_kernel<Op, void (*)(const kernels::context&, Args...)> {
  static void call(const kernels::context& context, Args... args) {
    auto* engine = static_cast<fake_gpu_engine*>(context.stream);
    TROUPE_CHECK(engine != nullptr, Op::name << " on the fake GPU without its queue's context");
    engine->issue([cpu = kernels::lookup<Op>(kernels::device_type::cpu),
                   values = std::make_tuple(std::decay_t<Args>(args)...)] {
      std::apply([cpu](const auto&... a) { cpu(kernels::context{}, a...); }, values);
    });
  }
};

/// Every op of include/troupe/ops.hpp as a fake GPU kernel for a scope.
class fake_gpu_kernels {
 public:
  fake_gpu_kernels() {
    namespace o = kernels::ops;
    swap<o::gemm, o::bias_add, o::bias_grad, o::relu_forward, o::relu_backward, o::gelu_forward,
         o::gelu_backward, o::tanh_forward, o::tanh_backward, o::im2col, o::col2im,
         o::max_pool2d_forward, o::max_pool2d_backward, o::avg_pool2d_forward,
         o::avg_pool2d_backward, o::layer_norm_forward, o::layer_norm_backward,
         o::causal_softmax_forward, o::causal_softmax_backward, o::dropout, o::embedding_forward,
         o::embedding_backward, o::softmax_xent, o::accuracy, o::mse_loss, o::l1_loss,
         o::huber_loss, o::bce_with_logits, o::sgd_update, o::adam_update, o::axpy, o::scale,
         o::fill, o::copy, o::gemm_bf16, o::to_bf16, o::from_bf16, o::add_to_bf16, o::im2col_bf16,
         o::add>();
  }
  ~fake_gpu_kernels() {
    for (auto it = restore_.rbegin(); it != restore_.rend(); ++it)
      (*it)();
  }
  fake_gpu_kernels(const fake_gpu_kernels&) = delete;
  fake_gpu_kernels& operator=(const fake_gpu_kernels&) = delete;
  /// How many ops it replaced.
  std::size_t size() const { return restore_.size(); }

 private:
  template <class... Ops>
  void swap() {
    (swap_one<Ops>(), ...);
  }
  template <class Op>
  void swap_one() {
    auto previous = kernels::replace<Op>(kernels::device_type::cuda, &fake_gpu_kernel<Op>::call);
    restore_.push_back([previous] { kernels::replace<Op>(kernels::device_type::cuda, previous); });
  }
  std::vector<std::function<void()>> restore_;
};

/// Installs a fake backend with `devices` GPUs for a scope; puts the previous one back.
class fake_gpu_scope {
 public:
  explicit fake_gpu_scope(int devices)
      : fake_(std::make_shared<fake_gpu_backend>(devices)),
        previous_(gpu::install_backend(fake_)) {}
  ~fake_gpu_scope() { gpu::install_backend(previous_); }
  fake_gpu_scope(const fake_gpu_scope&) = delete;
  fake_gpu_scope& operator=(const fake_gpu_scope&) = delete;
  fake_gpu_backend& operator*() { return *fake_; }
  fake_gpu_backend* operator->() { return fake_.get(); }

 private:
  std::shared_ptr<fake_gpu_backend> fake_;
  std::shared_ptr<gpu::backend> previous_;
};

}  // namespace troupe::testing
