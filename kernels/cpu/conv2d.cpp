// conv2d.cpp: 2-D convolution on the CPU through oneDNN's direct convolution primitives
// (forward, input gradient, weight gradient), in f32 or with bf16 operands.
//
// Note [direct convolution]
// troupe's conv2d layer unfolds each sample with im2col and multiplies (a GEMM per sample).
// oneDNN's direct convolution instead runs its own kernels over a blocked layout (channels in
// groups of 16, nChw16c): on one core of the AMD EPYC (Zen 4) VM, 2026-12-07, the second
// convolution of config/fashion_cnn.toml (32 -> 64 channels, 14 x 14, batch 64) took 4.5 ms
// for its three passes in bf16, reorders between troupe's NCHW and the blocked layout
// included, against 8.4 ms by im2col and oneDNN's bf16 matmul; in f32 7.9 ms against 11.8 by
// im2col and oneDNN's f32 matmul. With oneDNN limited to AVX2 (DNNL_MAX_CPU_ISA=AVX2) the
// f32 direct convolution was slower than im2col and OpenBLAS (14.4 against 11.8 ms), so the
// layer takes this path in f32 only where the device's f32 products are oneDNN's ([run]
// cpu_gemm, kernels::cpu_gemm_is_onednn), and in bf16 always (bf16 needs AVX512-BF16 or AMX,
// runtime/config/precision.cpp). The first convolution (1 -> 32 channels, 28 x 28) was
// slower this way (bf16 forward 757 against 641 us, f32 942 against 679, `troupe calibrate`):
// its products are small and its reorders of 6.4 MB outputs are not, and the blocked layout
// pads channels to a multiple of 16 (an image of 3 channels is 16 in its buffer). So the
// layer takes it only where the input's and the output's channels are multiples of 16;
// other shapes keep im2col.
//
// troupe's tensors stay NCHW: each call reorders its inputs into the layouts the primitive
// chose and its outputs back, through this thread's scratch buffers (Note [a convolution's
// scratch]). The primitive's outputs are f32; an output asked in bf16 (a bf16 run's
// activations, Note [bf16 activations] in actors/training/layer_actor.cpp) is rounded by that
// same reorder back, so it costs no pass of its own; the primitives are kept per thread and call
// shape, like kernels/cpu/onednn_matmul.cpp's. The scratch is not made of troupe tensors, so a
// device's peak memory does not count it: 6.4 MB for the conv net's second convolution at batch 64
// (each slot as large as the largest operand that used it). One thread on one
// core: oneDNN is asked for one OpenMP thread, as for its matmul.
//
// Not here: argument checks beyond the window's (kernels/window2d.hpp), empty batches (no
// work, outputs untouched except the overwritten or scaled gradients).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "kernels/cpu/onednn_matmul.hpp"
#include "kernels/window2d.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

using data_type = dnnl::memory::data_type;
using format = dnnl::memory::format_tag;

// Everything of a call but its pointers and beta.
struct conv_shape {
  conv_operands operands;
  conv_operands output;  // y's dtype (forward) or dx's (backward data); f32 for the weights'
  bool bias;
  int batch, out;
  window2d window;

  bool operator==(const conv_shape& other) const {
    return std::memcmp(this, &other, sizeof(conv_shape)) == 0;
  }
};

struct conv_shape_hash {
  std::size_t operator()(const conv_shape& s) const {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<std::uint64_t>(s.operands) | static_cast<std::uint64_t>(s.bias) << 8 |
        static_cast<std::uint64_t>(s.output) << 16);
    for (int v :
         {s.batch, s.out, s.window.channels, s.window.height, s.window.width, s.window.kernel_h,
          s.window.kernel_w, s.window.stride_h, s.window.stride_w, s.window.pad_h, s.window.pad_w})
      mix(static_cast<std::uint32_t>(v));
    return static_cast<std::size_t>(h);
  }
};

conv_shape shape_of(conv_operands operands, conv_operands output, bool bias, int batch,
                    const window2d& window, int out) {
  conv_shape s;
  std::memset(&s, 0, sizeof s);  // padding too: operator== compares bytes
  s.operands = operands;
  s.output = output;
  s.bias = bias;
  s.batch = batch;
  s.out = out;
  s.window = window;
  return s;
}

// Note [a convolution's scratch]
// The blocked copies of a call's operands live only while the call runs (it waits for its
// stream), so a thread keeps one set of buffers for all its convolutions, three slots each as
// large as the largest call has needed, not a set per call shape: a conv net's evaluation at
// batch 1000 would otherwise keep 63 MB of blocked x and y for its second convolution on
// top of the training shapes'. Past 16 MiB in all they are given back after the call.
class scratch {
 public:
  static constexpr int slots = 3;
  static constexpr std::size_t kept = std::size_t{16} << 20;

  void* at(int slot, std::size_t bytes) {
    auto& block = blocks_[slot];
    if (block.bytes < bytes) {
      block.data.reset();
      block.data.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      TROUPE_CHECK(block.data != nullptr,
                   "conv2d: no memory for " << bytes << " bytes of a blocked operand");
      block.bytes = bytes;
    }
    return block.data.get();
  }
  // After a call: gives the buffers back when they hold more than `kept` bytes.
  void trim() {
    std::size_t held = 0;
    for (const auto& block : blocks_)
      held += block.bytes;
    if (held > kept)
      for (auto& block : blocks_)
        block = {};
  }

 private:
  struct freed {
    void operator()(void* p) const { std::free(p); }
  };
  struct block {
    std::unique_ptr<void, freed> data;
    std::size_t bytes = 0;
  };
  block blocks_[slots];
};

// A tensor in troupe's layout and the same in the primitive's: `ours` takes the caller's
// pointer at each call, `theirs` a scratch slot, or is `ours` itself where the layouts agree.
struct operand {
  dnnl::memory ours, theirs;
  bool reordered = false;
  int slot = 0;
  dnnl::reorder to_theirs, to_ours;  // as the operand's direction needs

  operand() = default;
  operand(const dnnl::engine& engine, const dnnl::memory::desc& our_layout,
          const dnnl::memory::desc& their_layout, bool input, int slot)
      : ours(our_layout, engine, DNNL_MEMORY_NONE),
        reordered(our_layout != their_layout),
        slot(slot) {
    theirs = reordered ? dnnl::memory(their_layout, engine, DNNL_MEMORY_NONE) : ours;
    if (reordered && input)
      to_theirs = dnnl::reorder(ours, theirs);
    if (reordered && !input)
      to_ours = dnnl::reorder(theirs, ours);
  }

  // Points ours at `data` and theirs at its scratch slot and, for an input, brings it into
  // the primitive's layout.
  void take_input(dnnl::stream& stream, scratch& buffers, const void* data) {
    ours.set_data_handle(const_cast<void*>(data));
    if (!reordered)
      return;
    theirs.set_data_handle(buffers.at(slot, theirs.get_desc().get_size()));
    to_theirs.execute(stream, ours, theirs);
  }
  // Points ours at `data` and theirs at its slot (for an output: where the primitive writes).
  void take_output(scratch& buffers, void* data) {
    ours.set_data_handle(data);
    if (reordered)
      theirs.set_data_handle(buffers.at(slot, theirs.get_desc().get_size()));
  }
  void give_output(dnnl::stream& stream) {
    if (reordered)
      to_ours.execute(stream, theirs, ours);
  }
};

struct forward_pass {
  dnnl::convolution_forward primitive;
  operand x, w, y;
  dnnl::memory bias;
};

struct backward_data_pass {
  dnnl::convolution_backward_data primitive;
  operand dy, w, dx;
};

struct backward_weights_pass {
  dnnl::convolution_backward_weights primitive;
  operand x, dy;
  dnnl::memory dw, db;           // oneDNN's: the gradients of this call alone
  dnnl::memory dw_ours;          // the caller's dw (O, C, KH, KW)
  dnnl::reorder dw_set, dw_add;  // dw_ours = dw, dw_ours += dw
};

// The sizes of one convolution as oneDNN takes them, and its primitive descriptions.
struct prepared_conv {
  dnnl::memory::dims x, w, y, bias, strides, padding_l, padding_r;
  data_type operand_type;
  data_type output_type;  // of y or dx in our layout (the primitive's own stay f32)
  dnnl::convolution_forward::primitive_desc forward_description;
  std::unique_ptr<forward_pass> forward;
  std::unique_ptr<backward_data_pass> backward_data;
  std::unique_ptr<backward_weights_pass> backward_weights;
};

// Our layouts: NCHW images, OIHW weights, in the given type.
dnnl::memory::desc images(const dnnl::memory::dims& dims, data_type type) {
  return {dims, type, format::nchw};
}
dnnl::memory::desc weights(const dnnl::memory::dims& dims, data_type type) {
  return {dims, type, format::oihw};
}
dnnl::memory::desc chosen(const dnnl::memory::dims& dims, data_type type) {
  return {dims, type, format::any};
}

// Note [oneDNN on one thread] and Note [oneDNN's own cache] in onednn_matmul.cpp hold here too.
struct thread_cache {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<conv_shape, std::unique_ptr<prepared_conv>, conv_shape_hash> prepared;
  scratch buffers;  // Note [a convolution's scratch]
};

// A thread sees a few shapes (a layer's per batch size); one that cycles through many starts
// over rather than keep every shape's primitives.
constexpr std::size_t max_prepared_shapes = 32;

dnnl::convolution_forward::desc forward_desc(const prepared_conv& c, bool bias) {
  const auto x = chosen(c.x, c.operand_type), w = chosen(c.w, c.operand_type);
  const auto y = chosen(c.y, data_type::f32);
  if (bias)
    return {dnnl::prop_kind::forward_training,
            dnnl::algorithm::convolution_direct,
            x,
            w,
            dnnl::memory::desc(c.bias, data_type::f32, format::x),
            y,
            c.strides,
            c.padding_l,
            c.padding_r};
  return {dnnl::prop_kind::forward_training,
          dnnl::algorithm::convolution_direct,
          x,
          w,
          y,
          c.strides,
          c.padding_l,
          c.padding_r};
}

prepared_conv& prepare(thread_cache& cache, const conv_shape& key) {
  auto found = cache.prepared.find(key);
  if (found != cache.prepared.end())
    return *found->second;
  if (cache.prepared.size() >= max_prepared_shapes)
    cache.prepared.clear();
  const window2d& win = key.window;
  auto c = std::make_unique<prepared_conv>();
  c->x = {key.batch, win.channels, win.height, win.width};
  c->w = {key.out, win.channels, win.kernel_h, win.kernel_w};
  c->y = {key.batch, key.out, win.out_h(), win.out_w()};
  c->bias = {key.out};
  c->strides = {win.stride_h, win.stride_w};
  // The right padding as the left: oneDNN's output size, (H - KH + left + right) / stride + 1
  // rounded down, is then window2d's.
  c->padding_l = c->padding_r = {win.pad_h, win.pad_w};
  c->operand_type = key.operands == conv_operands::bf16 ? data_type::bf16 : data_type::f32;
  c->output_type = key.output == conv_operands::bf16 ? data_type::bf16 : data_type::f32;
  c->forward_description =
      dnnl::convolution_forward::primitive_desc(forward_desc(*c, key.bias), cache.engine);
  return *cache.prepared.emplace(key, std::move(c)).first->second;
}

forward_pass& forward_of(thread_cache& cache, prepared_conv& c) {
  if (!c.forward) {
    const auto& d = c.forward_description;
    auto pass = std::make_unique<forward_pass>();
    pass->primitive = dnnl::convolution_forward(d);
    pass->x = operand(cache.engine, images(c.x, c.operand_type), d.src_desc(), true, 0);
    pass->w = operand(cache.engine, weights(c.w, c.operand_type), d.weights_desc(), true, 1);
    pass->y = operand(cache.engine, images(c.y, c.output_type), d.dst_desc(), false, 2);
    pass->bias = dnnl::memory(dnnl::memory::desc(c.bias, data_type::f32, format::x), cache.engine,
                              DNNL_MEMORY_NONE);
    c.forward = std::move(pass);
  }
  return *c.forward;
}

backward_data_pass& backward_data_of(thread_cache& cache, prepared_conv& c) {
  if (!c.backward_data) {
    const dnnl::convolution_backward_data::desc description(
        dnnl::algorithm::convolution_direct, chosen(c.x, data_type::f32),
        chosen(c.w, c.operand_type), chosen(c.y, c.operand_type), c.strides, c.padding_l,
        c.padding_r);
    const dnnl::convolution_backward_data::primitive_desc d(description, cache.engine,
                                                            c.forward_description);
    auto pass = std::make_unique<backward_data_pass>();
    pass->primitive = dnnl::convolution_backward_data(d);
    pass->dy = operand(cache.engine, images(c.y, c.operand_type), d.diff_dst_desc(), true, 0);
    pass->w = operand(cache.engine, weights(c.w, c.operand_type), d.weights_desc(), true, 1);
    pass->dx = operand(cache.engine, images(c.x, c.output_type), d.diff_src_desc(), false, 2);
    c.backward_data = std::move(pass);
  }
  return *c.backward_data;
}

backward_weights_pass& backward_weights_of(thread_cache& cache, prepared_conv& c, bool bias) {
  if (!c.backward_weights) {
    const auto x = chosen(c.x, c.operand_type), dy = chosen(c.y, c.operand_type);
    const auto dw = chosen(c.w, data_type::f32);
    const auto description =
        bias ? dnnl::convolution_backward_weights::desc(
                   dnnl::algorithm::convolution_direct, x, dw,
                   dnnl::memory::desc(c.bias, data_type::f32, format::x), dy, c.strides,
                   c.padding_l, c.padding_r)
             : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x, dw,
                                                        dy, c.strides, c.padding_l, c.padding_r);
    const dnnl::convolution_backward_weights::primitive_desc d(description, cache.engine,
                                                               c.forward_description);
    auto pass = std::make_unique<backward_weights_pass>();
    pass->primitive = dnnl::convolution_backward_weights(d);
    pass->x = operand(cache.engine, images(c.x, c.operand_type), d.src_desc(), true, 0);
    pass->dy = operand(cache.engine, images(c.y, c.operand_type), d.diff_dst_desc(), true, 1);
    pass->dw = dnnl::memory(d.diff_weights_desc(), cache.engine);
    if (bias)
      pass->db = dnnl::memory(d.diff_bias_desc(), cache.engine);
    pass->dw_ours = dnnl::memory(weights(c.w, data_type::f32), cache.engine, DNNL_MEMORY_NONE);
    pass->dw_set = dnnl::reorder(pass->dw, pass->dw_ours);
    dnnl::post_ops add;
    add.append_sum(1.0f);
    dnnl::primitive_attr accumulate;
    accumulate.set_post_ops(add);
    pass->dw_add =
        dnnl::reorder(dnnl::reorder::primitive_desc(pass->dw, pass->dw_ours, accumulate));
    c.backward_weights = std::move(pass);
  }
  return *c.backward_weights;
}

// Runs `make` (a primitive's creation), turning oneDNN's refusal into a check_failure that
// names the op and the convolution; oneDNN's own message says only "could not create".
template <class Make>
auto made_for(const char* op, const conv_shape& key, Make make) -> decltype(make()) {
  try {
    return make();
  } catch (const dnnl::error& e) {
    const window2d& w = key.window;
    TROUPE_CHECK(false, op << ": oneDNN has no convolution of batch " << key.batch << ", "
                           << w.channels << " x " << w.height << " x " << w.width << " images, "
                           << key.out << " outputs, a " << w.kernel_h << "x" << w.kernel_w
                           << " kernel, stride " << w.stride_h << "x" << w.stride_w << ", padding "
                           << w.pad_h << "x" << w.pad_w << " in "
                           << (key.operands == conv_operands::bf16 ? "bf16" : "f32") << " ("
                           << e.what() << ")");
    throw;  // not reached
  }
}

thread_cache& this_thread_cache() {
  use_one_openmp_thread();
  thread_local thread_cache cache;
  return cache;
}

void conv2d_forward(const context&, conv_operands operands, int batch, const window2d& window,
                    int out_channels, const void* x, const void* w, const float* bias,
                    conv_operands output, void* y) {
  check_window("conv2d_forward", batch, window);
  TROUPE_CHECK(out_channels > 0, "conv2d_forward: out_channels=" << out_channels);
  if (batch == 0)
    return;
  thread_cache& cache = this_thread_cache();
  const auto key = shape_of(operands, output, bias != nullptr, batch, window, out_channels);
  forward_pass& pass = made_for("conv2d_forward", key, [&]() -> forward_pass& {
    return forward_of(cache, prepare(cache, key));
  });
  pass.x.take_input(cache.stream, cache.buffers, x);
  pass.w.take_input(cache.stream, cache.buffers, w);
  pass.y.take_output(cache.buffers, y);
  std::unordered_map<int, dnnl::memory> arguments{{DNNL_ARG_SRC, pass.x.theirs},
                                                  {DNNL_ARG_WEIGHTS, pass.w.theirs},
                                                  {DNNL_ARG_DST, pass.y.theirs}};
  if (bias != nullptr) {
    pass.bias.set_data_handle(const_cast<float*>(bias));
    arguments.emplace(DNNL_ARG_BIAS, pass.bias);
  }
  pass.primitive.execute(cache.stream, arguments);
  pass.y.give_output(cache.stream);
  cache.stream.wait();
  cache.buffers.trim();
}

void conv2d_backward_data(const context&, conv_operands operands, int batch, const window2d& window,
                          int out_channels, const void* dy, const void* w, conv_operands output,
                          void* dx) {
  check_window("conv2d_backward_data", batch, window);
  TROUPE_CHECK(out_channels > 0, "conv2d_backward_data: out_channels=" << out_channels);
  if (batch == 0)
    return;
  thread_cache& cache = this_thread_cache();
  // The forward's description is the hint of the backward's; its bias does not change them.
  const auto key = shape_of(operands, output, false, batch, window, out_channels);
  backward_data_pass& pass = made_for("conv2d_backward_data", key, [&]() -> backward_data_pass& {
    return backward_data_of(cache, prepare(cache, key));
  });
  pass.dy.take_input(cache.stream, cache.buffers, dy);
  pass.w.take_input(cache.stream, cache.buffers, w);
  pass.dx.take_output(cache.buffers, dx);
  pass.primitive.execute(cache.stream, {{DNNL_ARG_DIFF_DST, pass.dy.theirs},
                                        {DNNL_ARG_WEIGHTS, pass.w.theirs},
                                        {DNNL_ARG_DIFF_SRC, pass.dx.theirs}});
  pass.dx.give_output(cache.stream);
  cache.stream.wait();
  cache.buffers.trim();
}

void conv2d_backward_weights(const context&, conv_operands operands, int batch,
                             const window2d& window, int out_channels, const void* x,
                             const void* dy, float beta, float* dw, float* db) {
  check_window("conv2d_backward_weights", batch, window);
  TROUPE_CHECK(out_channels > 0, "conv2d_backward_weights: out_channels=" << out_channels);
  TROUPE_CHECK(beta == 0.0f || beta == 1.0f,
               "conv2d_backward_weights: beta=" << beta << " (0 or 1)");
  const auto weight_count =
      static_cast<std::int64_t>(out_channels) * window.channels * window.kernel_h * window.kernel_w;
  if (batch == 0) {  // no samples: the sums are empty
    if (beta == 0.0f) {
      std::fill_n(dw, weight_count, 0.0f);
      if (db != nullptr)
        std::fill_n(db, out_channels, 0.0f);
    }
    return;
  }
  thread_cache& cache = this_thread_cache();
  const auto key =
      shape_of(operands, conv_operands::f32, db != nullptr, batch, window, out_channels);
  backward_weights_pass& pass =
      made_for("conv2d_backward_weights", key, [&]() -> backward_weights_pass& {
        return backward_weights_of(cache, prepare(cache, key), db != nullptr);
      });
  pass.x.take_input(cache.stream, cache.buffers, x);
  pass.dy.take_input(cache.stream, cache.buffers, dy);
  std::unordered_map<int, dnnl::memory> arguments{{DNNL_ARG_SRC, pass.x.theirs},
                                                  {DNNL_ARG_DIFF_DST, pass.dy.theirs},
                                                  {DNNL_ARG_DIFF_WEIGHTS, pass.dw}};
  if (db != nullptr)
    arguments.emplace(DNNL_ARG_DIFF_BIAS, pass.db);
  pass.primitive.execute(cache.stream, arguments);
  pass.dw_ours.set_data_handle(dw);
  (beta == 0.0f ? pass.dw_set : pass.dw_add).execute(cache.stream, pass.dw, pass.dw_ours);
  cache.stream.wait();
  cache.buffers.trim();
  if (db != nullptr) {
    const auto* sums = static_cast<const float*>(pass.db.get_data_handle());
    for (int o = 0; o < out_channels; ++o)
      db[o] = beta == 0.0f ? sums[o] : db[o] + sums[o];
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::conv2d_forward, device_type::cpu, conv2d_forward);
TROUPE_REGISTER_KERNEL(ops::conv2d_backward_data, device_type::cpu, conv2d_backward_data);
TROUPE_REGISTER_KERNEL(ops::conv2d_backward_weights, device_type::cpu, conv2d_backward_weights);

}  // namespace troupe::kernels::cpu
