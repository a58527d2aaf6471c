// sanitizers.hpp: whether this is a sanitizer build (scripts/sanitize.sh address|thread),
// for the tests that cap memory. ASan and TSan reserve terabytes of address space for their
// shadow memory, so `ulimit -v` or RLIMIT_AS would stop them at their start; the cap is then
// their allocator's (memory_cap_options), beyond which the sanitizer reports an error and
// the process exits 1. Test-only, header-only.
#pragma once

namespace troupe::testing {

#if defined(__has_feature)
#define TROUPE_HAS_FEATURE(x) __has_feature(x)
#else
#define TROUPE_HAS_FEATURE(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || TROUPE_HAS_FEATURE(address_sanitizer)
constexpr bool under_address_sanitizer = true;
#else
constexpr bool under_address_sanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__) || TROUPE_HAS_FEATURE(thread_sanitizer)
constexpr bool under_thread_sanitizer = true;
#else
constexpr bool under_thread_sanitizer = false;
#endif

#undef TROUPE_HAS_FEATURE

constexpr bool under_sanitizer = under_address_sanitizer || under_thread_sanitizer;

/// Under a sanitizer, the shell words that cap one allocation at 4 GiB for the next command
/// (ASan's malloc_limit_mb, TSan's max_allocation_size_mb), keeping the options already set.
constexpr const char* memory_cap_options =
    under_address_sanitizer
        ? "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_limit_mb=4096\"; "
        : "export TSAN_OPTIONS=\"${TSAN_OPTIONS:+$TSAN_OPTIONS:}max_allocation_size_mb=4096\"; ";

}  // namespace troupe::testing
