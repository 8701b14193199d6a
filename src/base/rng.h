// relpos's own pseudo-random generator. std::normal_distribution and friends
// are implementation-defined, so seeded results would differ between standard
// libraries; this generator gives the same stream everywhere.
//
// SplitMix64 (Steele, Lea and Flood, 2014) seeds and steps the state; it is
// small, fast and passes BigCrush, which is plenty for initialisation,
// dropout masks and synthetic data.
#ifndef RELPOS_SRC_BASE_RNG_H_
#define RELPOS_SRC_BASE_RNG_H_

#include <cmath>
#include <cstdint>

namespace relpos {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t NextU64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the tiny bias
  // for n far below 2^64 is irrelevant here).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(NextU64()) * n) >> 64);
  }

  // Standard normal by the Box-Muller transform (one value per call; the
  // second value is discarded so the stream position is easy to reason about).
  double Normal() {
    double u1 = Uniform();
    while (u1 <= 0.0) u1 = Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

namespace base {
// Mixes a seed with a stream id (SplitMix64's finaliser over (seed,
// stream)): nearby inputs give unrelated outputs, so the streams of one seed
// (initialisation, data, dropout, evaluation) do not overlap in practice.
inline uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed ^ (stream * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace base

}  // namespace relpos

#endif  // RELPOS_SRC_BASE_RNG_H_
