// Cached decoding against full recomputation: after every Append / Step, the
// session's logits for each sequence's last token must equal the model's
// Forward(ForwardMode::kInference) over the whole prefix, for every position
// scheme, with a batch of different lengths (padding), in float and double.
// Plus the session's argument checks.
#include "model/decoder_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"
#include "support/expect_invalid.h"

namespace relpos::model {
namespace {

struct Case {
  std::string name;
  PositionScheme position;
  bool per_head = false, key_term = true, value_term = true;
  bool interleaved = false;  // RoPE's layout
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  return {{"none", PositionScheme::kNone},
          {"sinusoidal", PositionScheme::kSinusoidal},
          {"learned", PositionScheme::kLearned},
          {"relative", PositionScheme::kRelative},
          {"relative_per_head_keys_only", PositionScheme::kRelative, true,
           true, false},
          {"relative_values_only", PositionScheme::kRelative, false, false,
           true},
          {"shaw_asym", PositionScheme::kShawAsym},
          {"shaw_log", PositionScheme::kShawLog},
          {"t5", PositionScheme::kT5},
          {"alibi", PositionScheme::kAlibi},
          {"rope", PositionScheme::kRope},
          {"rope_interleaved", PositionScheme::kRope, false, true, true, true},
          {"xl", PositionScheme::kXl}};
}

ModelConfig ConfigFor(const Case& k) {
  ModelConfig c;
  c.arch = Arch::kDecoder;
  c.vocab_size = 11;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 24;
  c.max_len = 20;
  c.position = k.position;
  c.max_distance = 3;  // shorter than the sequences: clipping is exercised
  c.per_head_tables = k.per_head;
  c.key_term = k.key_term;
  c.value_term = k.value_term;
  // Reaches shorter than the sequences, so clipping and the logarithmic
  // buckets are exercised too.
  c.k_left = 4;
  c.k_right = 2;
  c.num_buckets = 6;
  c.bucket_max_distance = 9;
  c.rope_interleaved = k.interleaved;
  c.seed = 5;
  return c;
}

// The initial biases and LayerNorm parameters are 0 / 1, which would hide a
// swapped bias; perturb every parameter.
template <typename T>
void Perturb(BasicTransformer<T>* model) {
  Rng rng(99);
  for (auto& p : model->parameters()) {
    for (T& v : p.value) v += static_cast<T>(0.3 * rng.Normal());
  }
}

// Logits of the last token of each sequence's prefix seqs[b][0, lens[b]),
// by the model's inference forward over the padded batch: [B, V].
template <typename T>
std::vector<T> Recompute(BasicTransformer<T>& model,
                         const std::vector<std::vector<int32_t>>& seqs,
                         const std::vector<int64_t>& lens) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  const int64_t V = model.config().vocab_size;
  Batch batch;
  batch.batch = B;
  batch.length = *std::max_element(lens.begin(), lens.end());
  batch.tokens.assign(B * batch.length, 0);
  batch.targets.assign(B * batch.length, -1);
  batch.lengths = lens;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < lens[b]; ++i) {
      batch.tokens[b * batch.length + i] = seqs[b][i];
    }
  }
  model.Forward(batch, ForwardMode::kInference, nullptr);
  std::vector<T> out(B * V);
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b) {
    row += lens[b];
    std::copy_n(model.LastLogits().data() + (row - 1) * V, V, out.data() + b * V);
  }
  return out;
}

// Per sequence: max |cached - full| / max(1, max |full|) <= tol.
template <typename T>
void ExpectClose(const std::vector<T>& cached, const std::vector<T>& full,
                 int64_t V, double tol, const std::string& where) {
  ASSERT_EQ(cached.size(), full.size()) << where;
  for (size_t b = 0; b * V < full.size(); ++b) {
    double err = 0, scale = 1;
    for (int64_t v = 0; v < V; ++v) {
      const size_t i = b * V + v;
      err = std::max(err, std::abs(static_cast<double>(cached[i] - full[i])));
      scale = std::max(scale, std::abs(static_cast<double>(full[i])));
    }
    EXPECT_LE(err / scale, tol) << where << ", sequence " << b;
  }
}

class DecoderSessionTest : public ::testing::TestWithParam<Case> {};

// Prompts of lengths 5, 5, 2, 7 (one Append; sequences 0 and 1 share an
// attention call), then single-token steps, then a chunk of 3, 1, 2, 2
// tokens, then steps again, up to the capacity of the longest sequence;
// every result checked against recomputation.
template <typename T>
void CheckAgainstRecomputation(const Case& k, double tol) {
  BasicTransformer<T> model(ConfigFor(k));
  Perturb(&model);
  const int64_t V = model.config().vocab_size, capacity = 20;
  const std::vector<int64_t> prompt = {5, 5, 2, 7};
  const int64_t B = static_cast<int64_t>(prompt.size());
  Rng rng(7);
  std::vector<std::vector<int32_t>> seqs(B);
  for (auto& s : seqs) {
    for (int64_t i = 0; i < capacity; ++i) s.push_back(rng.Below(V));
  }
  BasicDecoderSession<T> session(model, B, capacity);
  std::vector<int64_t> lens(B, 0);
  std::vector<T> logits;
  auto append = [&](const std::vector<int64_t>& counts) {
    std::vector<std::vector<int32_t>> chunk(B);
    for (int64_t b = 0; b < B; ++b) {
      chunk[b].assign(seqs[b].begin() + lens[b],
                      seqs[b].begin() + lens[b] + counts[b]);
      lens[b] += counts[b];
    }
    session.Append(chunk, &logits);
    for (int64_t b = 0; b < B; ++b) ASSERT_EQ(session.length(b), lens[b]);
    std::ostringstream where;
    where << "lengths";
    for (int64_t n : lens) where << " " << n;
    ExpectClose(logits, Recompute(model, seqs, lens), V, tol, where.str());
  };
  auto steps = [&](int64_t n) {
    for (int64_t s = 0; s < n; ++s) {
      std::vector<int32_t> next(B);
      for (int64_t b = 0; b < B; ++b) next[b] = seqs[b][lens[b]++];
      session.Step(next, &logits);
      ExpectClose(logits, Recompute(model, seqs, lens), V, tol, "step");
    }
  };
  append(prompt);
  steps(4);                // lengths up to 11
  append({3, 1, 2, 2});    // 12 10 8 13
  steps(capacity - 13);    // the last sequence reaches the capacity
  // Truncating and decoding again reproduces the same logits.
  session.Truncate(6);
  std::fill(lens.begin(), lens.end(), 6);
  steps(3);
}

TEST_P(DecoderSessionTest, FloatMatchesRecomputation) {
  // Float: both sides round every product; the prefix sums of attention and
  // the matrix products run in different orders (Nq = 1 against Nq = n), so
  // they agree to a few float ulps of the logits' scale.
  CheckAgainstRecomputation<float>(GetParam(), 1e-5);
}

TEST_P(DecoderSessionTest, DoubleMatchesRecomputation) {
  CheckAgainstRecomputation<double>(GetParam(), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Schemes, DecoderSessionTest,
                         ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(DecoderSessionErrors, EncoderIsRejected) {
  ModelConfig c = ConfigFor(Cases()[3]);
  c.arch = Arch::kEncoder;
  Transformer model(c);
  ExpectInvalid([&] { DecoderSession s(model, 1, 4); },
                {"decoder", "encoder"});
}

TEST(DecoderSessionErrors, BadSizes) {
  Transformer model(ConfigFor(Cases()[2]));  // learned, max_len 20
  ExpectInvalid([&] { DecoderSession s(model, 0, 4); }, {"batch", "0"});
  ExpectInvalid([&] { DecoderSession s(model, 1, 0); }, {"capacity", "0"});
  ExpectInvalid([&] { DecoderSession s(model, 1, 21); },
                {"capacity 21", "max_len = 20"});
}

TEST(DecoderSessionErrors, BadAppendsChangeNothing) {
  Transformer model(ConfigFor(Cases()[3]));
  DecoderSession session(model, 2, 4);
  std::vector<float> logits;
  ExpectInvalid([&] { session.Append({{1}}, &logits); }, {"one list", "2"});
  ExpectInvalid([&] { session.Append({{1, 2}, {}}, &logits); },
                {"tokens[1] is empty"});
  ExpectInvalid([&] { session.Append({{1, 11}, {3}}, &logits); },
                {"tokens[0][1]", "vocab_size = 11", "11"});
  ExpectInvalid([&] { session.Append({{1}, {1, 2, 3, 4, 5}}, &logits); },
                {"sequence 1", "5 tokens", "capacity 4"});
  ExpectInvalid([&] { session.Step({1, 2, 3}, &logits); },
                {"one token per sequence"});
  ExpectInvalid([&] { session.Truncate(-1); }, {"length", "-1"});
  EXPECT_EQ(session.length(0), 0);
  EXPECT_EQ(session.length(1), 0);
  session.Append({{1, 2, 3, 4}, {5}}, &logits);
  EXPECT_EQ(logits.size(), 2u * 11u);
  ExpectInvalid([&] { session.Step({1, 2}, &logits); },
                {"sequence 0", "capacity 4"});
  EXPECT_EQ(session.length(0), 4);
  EXPECT_EQ(session.length(1), 1);
}

}  // namespace
}  // namespace relpos::model
