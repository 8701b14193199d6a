// SampleToken: greedy ties, top-k, and the frequencies of the tempered
// softmax against their expectation (5 standard deviations of a binomial
// count, so a correct sampler fails with probability below 1e-6 per check).
#include "lab/api/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"

namespace relpos {
namespace {

TEST(SampleTokenTest, GreedyTakesTheLowestOfTiedMaxima) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  Rng rng(1);
  EXPECT_EQ(SampleToken(logits.data(), 4, 0.0, 0, rng), 1);
  EXPECT_EQ(rng.state(), 1u);  // greedy draws nothing
  // top_k = 1 keeps only the greedy choice, at any temperature.
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(SampleToken(logits.data(), 4, 3.0, 1, rng), 1);
  }
}

// Counts of `draws` samples per token.
std::vector<int64_t> Counts(const std::vector<double>& logits_d,
                            double temperature, int64_t top_k, int64_t draws,
                            uint64_t seed) {
  const std::vector<float> logits(logits_d.begin(), logits_d.end());
  std::vector<int64_t> counts(logits.size(), 0);
  Rng rng(seed);
  for (int64_t i = 0; i < draws; ++i) {
    ++counts[SampleToken(logits.data(), static_cast<int64_t>(logits.size()),
                         temperature, top_k, rng)];
  }
  return counts;
}

void ExpectFrequencies(const std::vector<int64_t>& counts,
                       const std::vector<double>& p, int64_t draws) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double mean = draws * p[i];
    const double sd = std::sqrt(draws * p[i] * (1 - p[i]));
    EXPECT_LE(std::abs(counts[i] - mean), 5 * sd + 1e-9)
        << "token " << i << ": " << counts[i] << " draws, expected " << mean;
  }
}

TEST(SampleTokenTest, FrequenciesFollowTheTemperedSoftmax) {
  const int64_t n = 40000;
  // Probabilities 0.5, 0.3, 0.2 and three tokens that are never drawn.
  const std::vector<double> logits = {std::log(0.5), std::log(0.3),
                                      std::log(0.2), -1e30, -1e30, -1e30};
  ExpectFrequencies(Counts(logits, 1.0, 0, n, 7), {0.5, 0.3, 0.2, 0, 0, 0}, n);
  // T = 0.5 squares the probabilities before normalising.
  const double z = 0.25 + 0.09 + 0.04;
  ExpectFrequencies(Counts(logits, 0.5, 0, n, 8),
                    {0.25 / z, 0.09 / z, 0.04 / z, 0, 0, 0}, n);
  // top_k = 2 renormalises over the two most likely tokens.
  ExpectFrequencies(Counts(logits, 1.0, 2, n, 9),
                    {0.625, 0.375, 0, 0, 0, 0}, n);
}

TEST(SampleTokenTest, DeterministicForASeed) {
  const std::vector<double> logits = {0.1, 0.2, 0.3, 0.4, 0.5};
  EXPECT_EQ(Counts(logits, 1.0, 0, 1000, 5), Counts(logits, 1.0, 0, 1000, 5));
  EXPECT_NE(Counts(logits, 1.0, 0, 1000, 5), Counts(logits, 1.0, 0, 1000, 6));
}

}  // namespace
}  // namespace relpos
