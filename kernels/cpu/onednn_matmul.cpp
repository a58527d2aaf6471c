// onednn_matmul.cpp: the per-thread cache of oneDNN matmul primitives and the call through it.
#include "kernels/cpu/onednn_matmul.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "troupe/check.hpp"

namespace troupe::kernels::cpu {
namespace {

// Everything of a call but its pointers: the primitive for it is the same.
struct call_shape {
  bool transpose_a, transpose_b;
  int m, n, k, lda, ldb, ldc;
  std::uint32_t alpha_bits, beta_bits;
  matmul_element operands;

  bool operator==(const call_shape& other) const {
    return std::memcmp(this, &other, sizeof(call_shape)) == 0;
  }
};

struct call_shape_hash {
  std::size_t operator()(const call_shape& s) const {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<std::uint64_t>(s.transpose_a) | static_cast<std::uint64_t>(s.transpose_b) << 1 |
        static_cast<std::uint64_t>(s.operands) << 2);
    for (int v : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc})
      mix(static_cast<std::uint32_t>(v));
    mix(s.alpha_bits);
    mix(s.beta_bits);
    return static_cast<std::size_t>(h);
  }
};

call_shape shape_of(const matmul_call& call) {
  call_shape s;
  std::memset(&s, 0, sizeof s);  // padding too: operator== compares bytes
  s.transpose_a = call.transpose_a;
  s.transpose_b = call.transpose_b;
  s.m = call.m;
  s.n = call.n;
  s.k = call.k;
  s.lda = call.lda;
  s.ldb = call.ldb;
  s.ldc = call.ldc;
  std::memcpy(&s.alpha_bits, &call.alpha, sizeof(float));
  std::memcpy(&s.beta_bits, &call.beta, sizeof(float));
  s.operands = call.operands;
  return s;
}

// One primitive with its memory objects, whose data pointers are set at each call.
struct prepared_matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

dnnl::memory::data_type data_type_of(matmul_element element) {
  return element == matmul_element::bf16 ? dnnl::memory::data_type::bf16
                                         : dnnl::memory::data_type::f32;
}

// A row-major (rows, cols) matrix with row stride ld, or, transposed, the (cols, rows)
// matrix stored that way read as (rows, cols): oneDNN takes the strides of the logical one.
dnnl::memory::desc matrix(int rows, int cols, int ld, bool transposed, dnnl::memory::data_type type) {
  const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

// Note [oneDNN's own cache]: each thread keeps its primitives (thread_cache), so oneDNN's
// process-wide primitive cache would only hold second copies. It is turned off when the
// library loads, on the loading thread, before any device thread exists: oneDNN creates
// that cache's lock lazily, on first use, and ThreadSanitizer (which does not see inside
// Debian's uninstrumented libdnnl) reported two device threads' first primitives as a race
// on it. The C API returns a status rather than throwing, as a static initialiser must.
const bool onednn_cache_off = dnnl_set_primitive_cache_capacity(0) == dnnl_success;

struct thread_cache {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<call_shape, std::unique_ptr<prepared_matmul>, call_shape_hash> prepared;
};

// Shapes a thread sees are few (a layer's forward and backward products per batch size); a
// program that cycles through many sizes starts over rather than grow without bound.
constexpr std::size_t max_prepared_shapes = 512;

prepared_matmul& prepare(thread_cache& cache, const matmul_call& call) {
  const call_shape key = shape_of(call);
  auto found = cache.prepared.find(key);
  if (found != cache.prepared.end())
    return *found->second;
  if (cache.prepared.size() >= max_prepared_shapes)
    cache.prepared.clear();
  const auto operand_type = data_type_of(call.operands);
  const auto a = matrix(call.m, call.k, call.lda, call.transpose_a, operand_type);
  const auto b = matrix(call.k, call.n, call.ldb, call.transpose_b, operand_type);
  const auto c = matrix(call.m, call.n, call.ldc, false, dnnl::memory::data_type::f32);
  dnnl::primitive_attr attributes;
  if (call.alpha != 1.0f)
    attributes.set_output_scales(0, {call.alpha});
  if (call.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(call.beta);
    attributes.set_post_ops(sum);
  }
  const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(a, b, c), attributes,
                                                 cache.engine);
  auto made = std::make_unique<prepared_matmul>(prepared_matmul{
      dnnl::matmul(description), dnnl::memory(a, cache.engine, DNNL_MEMORY_NONE),
      dnnl::memory(b, cache.engine, DNNL_MEMORY_NONE),
      dnnl::memory(c, cache.engine, DNNL_MEMORY_NONE)});
  return *cache.prepared.emplace(key, std::move(made)).first->second;
}

dnnl::cpu_isa effective_isa() {
  static const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa;
}

bool isa_includes(dnnl::cpu_isa wanted) {
  // oneDNN's instruction sets are bit masks, each a superset of the ones it extends.
  const auto have = static_cast<unsigned>(effective_isa());
  const auto want = static_cast<unsigned>(wanted);
  return (have & want) == want;
}

}  // namespace

// Note [oneDNN on one thread]: Debian's oneDNN runs its kernels on OpenMP (libgomp), whose
// default team is every core; each calling thread asks for a team of one, once. Through the
// symbol rather than <omp.h>, which clang's sanitizer builds do not have.
void use_one_openmp_thread() {
  thread_local bool done = false;
  if (done)
    return;
  done = true;
  using set_threads = void (*)(int);
  if (void* symbol = dlsym(RTLD_DEFAULT, "omp_set_num_threads"))
    reinterpret_cast<set_threads>(symbol)(1);
}

void onednn_matmul(const matmul_call& call) {
  TROUPE_CHECK(call.m > 0 && call.n > 0 && call.k > 0,
               "onednn_matmul: m=" << call.m << " n=" << call.n << " k=" << call.k
                                   << " (each must be positive)");
  use_one_openmp_thread();
  thread_local thread_cache cache;
  prepared_matmul& p = prepare(cache, call);
  p.a.set_data_handle(const_cast<void*>(call.a));
  p.b.set_data_handle(const_cast<void*>(call.b));
  p.c.set_data_handle(call.c);
  p.primitive.execute(cache.stream,
                      {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  cache.stream.wait();
}

bool onednn_has_avx512() { return isa_includes(dnnl::cpu_isa::avx512_core); }

bool onednn_has_bf16() { return isa_includes(dnnl::cpu_isa::avx512_core_bf16); }

const char* onednn_isa_name() {
  switch (effective_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace troupe::kernels::cpu
