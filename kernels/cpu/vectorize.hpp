// vectorize.hpp: the one attribute the CPU kernels' hot loops share.
//
// We do not build with -march=native (the machine that runs a binary may differ from the
// one that built it), so a plain -O3 loop only gets SSE2. TROUPE_VECTOR_CLONES asks GCC
// (and Clang >= 14) for AVX-512 and AVX2 copies of a function as well, picked once at
// load time by the CPU the process runs on. Put it on small static loop helpers taking
// __restrict pointers, never on the registered kernel itself, each named uniquely across
// kernels/cpu: clang names a clone's resolver without its anonymous namespace, so two files'
// `widen_all` clash at link time (CI's clang build did). It does nothing on other
// architectures. This header holds no kernels.
//
// Measured on one Zen 4 core, 200k floats (a 784x256 layer), clones against SSE2 only:
// adam_update 174 -> 83 us, axpy 27 -> 19 us, bias_add 16 -> 13 us, relu 20 -> 18 us;
// sgd_update (four memory streams) is unchanged at 40 us.
#pragma once

// Not under ThreadSanitizer (scripts/sanitize.sh thread): the clones' resolvers run while
// the dynamic loader relocates libtroupe.so, before TSan's runtime exists, and clang
// instruments them, so the process crashed in __tsan_func_entry before main.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(TROUPE_NO_VECTOR_CLONES)
#define TROUPE_NO_VECTOR_CLONES
#endif
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(TROUPE_NO_VECTOR_CLONES)
#define TROUPE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TROUPE_VECTOR_CLONES
#endif
