// Test-only helpers shared by the model's tests (transformer_test.cc,
// seq2seq_test.cc, decoder_session_test.cc): every position scheme, and the
// float-vs-double comparison of a whole model's loss and gradients.
#ifndef RELPOS_SRC_MODEL_MODEL_TEST_UTIL_H_
#define RELPOS_SRC_MODEL_MODEL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/transformer.h"
#include "model/nn/grad_check_test_util.h"

namespace relpos::model::testing {

// A tiny model: d_model 8, 2 heads, 2 blocks, d_ff 12, max_len 9, with small
// reaches and buckets so that length-6 batches reach Shaw's clipped rows
// and T5's logarithmic buckets (bidirectional: exact 2, causal: 4).
inline ModelConfig TinyConfig(Arch arch, PositionScheme position) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 7;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 12;
  c.scheme.max_len = 9;
  c.position = position;
  c.scheme.max_distance = 2;
  c.scheme.k_left = 3;
  c.scheme.k_right = 1;
  c.scheme.num_buckets = 8;
  c.scheme.bucket_max_distance = 5;
  c.seed = 11;
  return c;
}

// Every scheme of the registry (relpos/schemes.h), in its order: a scheme
// added there is run by every test that loops over them.
inline const std::vector<PositionScheme>& AllSchemes() {
  static const std::vector<PositionScheme> all = [] {
    std::vector<PositionScheme> ids;
    for (const Scheme& s : Schemes()) ids.push_back(s.id);
    return ids;
  }();
  return all;
}

// Same config, same initial values (generated in float for both): one
// ForwardBackward of the float model (the fused kernel wherever it supports
// the scheme) against the double one (the reference). The float model's
// rounding (eps 6e-8) through ~10 GEMMs and normalisations of width <= 32
// stays far below 1e-4 relative to each tensor's largest gradient; a wrong
// float-only code path (Sgemm arguments) would be O(1).
inline void ExpectFloatMatchesDouble(const ModelConfig& c, const Batch& batch,
                                     double label_smoothing,
                                     const std::string& what) {
  BasicTransformer<double> md(c);
  Transformer mf(c);
  md.set_label_smoothing(label_smoothing);
  mf.set_label_smoothing(label_smoothing);
  Rng r1(1), r2(1);
  const double ld = md.ForwardBackward(batch, r1, nullptr);
  const float lf = mf.ForwardBackward(batch, r2, nullptr);
  EXPECT_NEAR(lf, ld, 1e-5 * std::abs(ld)) << what;
  for (size_t i = 0; i < md.parameters().size(); ++i) {
    const auto& gd = md.parameters()[i].grad;
    const auto& gf = mf.parameters()[i].grad;
    double scale = 0;
    for (double v : gd) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < gd.size(); ++j) {
      ASSERT_NEAR(gf[j], gd[j], 1e-4 * scale + 1e-7)
          << what << " " << md.parameters()[i].name << "[" << j << "]";
    }
  }
}

// Every parameter tensor's gradient against central differences of the
// double model's loss on `batch` (the same code as the float model), at
// most most_entries(name) entries each; returns the entries checked. With
// dropout the masks are a function of the Rng seed, so each loss
// evaluation uses a fresh Rng with the same seed: the function being
// differentiated is fixed. Tolerances: nn/grad_check_test_util.h.
template <typename Most>
int CheckEveryParameter(BasicTransformer<double>& model, const Batch& batch,
                        Most most_entries) {
  auto loss = [&] {
    Rng rng(5);
    return model.ForwardBackward(batch, rng, nullptr);
  };
  loss();
  std::vector<std::vector<double>> grads;
  for (const auto& p : model.parameters()) grads.push_back(p.grad);
  int checked = 0;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    auto& p = model.parameters()[i];
    checked += nn::testing::CheckGradient(p.name, &p.value, grads[i], loss,
                                          most_entries(p.name));
  }
  loss();  // leave the model's grads as Backward left them
  return checked;
}

}  // namespace relpos::model::testing

#endif  // RELPOS_SRC_MODEL_MODEL_TEST_UTIL_H_
