// address_sanitizer.hpp: whether this is the AddressSanitizer build (scripts/sanitize.sh
// address), for the tests that cap memory: ASan reserves terabytes of address space for
// its shadow memory, so `ulimit -v` or RLIMIT_AS would stop it at its start, and the cap is
// its allocator's instead (ASAN_OPTIONS malloc_limit_mb). Test-only, header-only.
#pragma once

namespace troupe::testing {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool under_address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool under_address_sanitizer = true;
#else
constexpr bool under_address_sanitizer = false;
#endif
#else
constexpr bool under_address_sanitizer = false;
#endif

}  // namespace troupe::testing
