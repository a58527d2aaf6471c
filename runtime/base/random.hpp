// random.hpp: a small counter-based generator, the same on every platform.
//
// Randomness in troupe is keyed by what it is for (seed, step, sample index, layer), not
// by which actor or thread draws it (DESIGN.md "Equivalence"), so every stream of
// numbers starts from a key. std::mt19937 distributions differ between standard
// libraries; this does not.
#pragma once

#include <cmath>
#include <cstdint>

namespace troupe {

/// splitmix64: a fast 64-bit mixer and generator.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A generator started from a key of up to three numbers.
class keyed_random {
 public:
  keyed_random(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0)
      : state_(mix64(mix64(mix64(a) ^ b) ^ c)) {}

  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }

  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return static_cast<std::uint64_t>(uniform() * n); }

  /// Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300)
      u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace troupe
