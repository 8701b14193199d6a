// Cached decoding against full recomputation: after every Append / Step, the
// session's logits for each sequence's last token must equal the model's
// Forward(ForwardMode::kInference) over the whole prefix, for every position
// scheme, with a batch of different lengths (padding), in float and double.
// Plus the session's argument checks.
#include "model/decoder_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <type_traits>
#include <sstream>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/transformer.h"
#include "model/transformer_block.h"
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
  c.scheme.max_len = 20;
  c.position = k.position;
  // Shorter than the sequences: clipping is exercised.
  c.scheme.max_distance = 3;
  c.scheme.per_head_tables = k.per_head;
  c.scheme.key_term = k.key_term;
  c.scheme.value_term = k.value_term;
  // Reaches shorter than the sequences, so clipping and the logarithmic
  // buckets are exercised too.
  c.scheme.k_left = 4;
  c.scheme.k_right = 2;
  c.scheme.num_buckets = 6;
  c.scheme.bucket_max_distance = 9;
  c.scheme.rope_layout =
      k.interleaved ? RopeLayout::kInterleaved : RopeLayout::kSplitHalves;
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
// by the model's inference forward over the padded batch: [B, V]. A seq2seq
// model's sequence b has the source sources[b].
template <typename T>
std::vector<T> Recompute(BasicTransformer<T>& model,
                         const std::vector<std::vector<int32_t>>& seqs,
                         const std::vector<int64_t>& lens,
                         const std::vector<std::vector<int32_t>>& sources = {}) {
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
  if (!sources.empty()) {
    batch.source_length = 1;
    for (const auto& src : sources) {
      batch.source_length = std::max<int64_t>(batch.source_length, src.size());
    }
    batch.source_tokens.assign(B * batch.source_length, 0);
    for (int64_t b = 0; b < B; ++b) {
      std::copy(sources[b].begin(), sources[b].end(),
                batch.source_tokens.begin() + b * batch.source_length);
      batch.source_lengths.push_back(static_cast<int64_t>(sources[b].size()));
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

// Int8 sessions are checked against the float recomputation of the model
// whose quantized weights are replaced by their int8 values times their
// scales: what remains is the activations' per-row rounding, at most 1/2
// in 32767 of each row's largest |x| at these widths
// (kernels/int8_linear.h); through the blocks the logits moved by at most
// 6.2e-4 of their scale over every scheme here (the bound below has ~3x
// margin), while an error in the plumbing (a wrong matrix, bias or row)
// moves them by O(1).
// What the weights' rounding costs is measured on trained models
// (docs/benchmarks.md, "Quantized inference").
constexpr double kInt8LogitTolerance = 2e-3;
// int8_a8 (8-bit activations): each row's rounding is 1/2 in 127 of its
// largest |x|, 258 times the int16 step; the logits moved by at most 0.107
// of their scale over every scheme here (shaw_asym; most schemes below
// 0.06), and the bound has ~3x margin. A plumbing error moves them by O(1).
constexpr double kInt8A8LogitTolerance = 0.3;

// Every weight `q` holds becomes scale * int8 value in place.
void Dequantize(BasicTransformer<float>* model, const QuantizedLinears& q) {
  int64_t replaced = 0;
  for (auto& p : model->parameters()) {
    const Int8Matrix* m = q.Find(p.value.data());
    if (m == nullptr) continue;
    ++replaced;
    for (int64_t j = 0; j < m->rows; ++j) {
      for (int64_t c = 0; c < m->cols; ++c) {
        p.value[j * m->cols + c] =
            m->scales[j] * static_cast<float>(m->Value(j, c));
      }
    }
  }
  EXPECT_EQ(replaced, q.size());
}

// Prompts of lengths 5, 5, 2, 7 (one Append; sequences 0 and 1 share an
// attention call), then single-token steps, then a chunk of 3, 1, 2, 2
// tokens, then steps again, up to the capacity of the longest sequence;
// every result checked against recomputation.
// int8: the session runs the linear layers in int8 (QuantizedLinears)
// while the recomputation stays float.
template <typename T>
void CheckAgainstRecomputation(const Case& k, double tol,
                               ComputeType type = ComputeType::kFloat32) {
  BasicTransformer<T> model(ConfigFor(k));
  Perturb(&model);
  std::optional<QuantizedLinears> quantized;
  if constexpr (std::is_same_v<T, float>) {
    if (type != ComputeType::kFloat32) {
      quantized.emplace(model, type);
      Dequantize(&model, *quantized);
    }
  }
  const int64_t V = model.config().vocab_size, capacity = 20;
  const std::vector<int64_t> prompt = {5, 5, 2, 7};
  const int64_t B = static_cast<int64_t>(prompt.size());
  Rng rng(7);
  std::vector<std::vector<int32_t>> seqs(B);
  for (auto& s : seqs) {
    for (int64_t i = 0; i < capacity; ++i) s.push_back(rng.Below(V));
  }
  BasicDecoderSession<T> session(model, B, capacity,
                                 quantized ? &*quantized : nullptr);
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

namespace relpos::model {
namespace {

// ---- Seq2seq sessions ----

ModelConfig Seq2seqConfigFor(const Case& k) {
  ModelConfig c = ConfigFor(k);
  c.arch = Arch::kSeq2seq;
  c.decoder_layers = 2;
  c.layers = 1;
  return c;
}

// Sources of lengths 5, 2, 7 and 0 (one hypothesis each): a prompt of 3
// tokens each, then steps; then Reorder to 5 hypotheses (source 1 dropped,
// sources 0 and 2 duplicated) and steps to the capacity (20: the cache
// slots grow from 16 rows to 20 after the Reorder); every result
// against recomputation with each hypothesis's source.
template <typename T>
void CheckSeq2seqAgainstRecomputation(
    const Case& k, double tol, ComputeType type = ComputeType::kFloat32) {
  BasicTransformer<T> model(Seq2seqConfigFor(k));
  Perturb(&model);
  std::optional<QuantizedLinears> quantized;
  if constexpr (std::is_same_v<T, float>) {
    if (type != ComputeType::kFloat32) {
      quantized.emplace(model, type);
      Dequantize(&model, *quantized);
    }
  }
  const int64_t V = model.config().vocab_size, capacity = 20;
  Rng rng(17);
  std::vector<std::vector<int32_t>> sources(4);
  const int64_t source_lengths[4] = {5, 2, 7, 0};
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t i = 0; i < source_lengths[s]; ++i) {
      sources[s].push_back(rng.Below(V));
    }
  }
  std::vector<std::vector<int32_t>> seqs(4);
  for (auto& s : seqs) {
    for (int64_t i = 0; i < capacity; ++i) s.push_back(rng.Below(V));
  }
  BasicDecoderSession<T> session(model, sources, capacity,
                                 quantized ? &*quantized : nullptr);
  std::vector<int64_t> lens(4, 3);
  std::vector<T> logits;
  std::vector<std::vector<int32_t>> prompt(4);
  for (int64_t b = 0; b < 4; ++b) {
    prompt[b].assign(seqs[b].begin(), seqs[b].begin() + 3);
  }
  session.Append(prompt, &logits);
  std::vector<std::vector<int32_t>> srcs = sources;
  ExpectClose(logits, Recompute(model, seqs, lens, srcs), V, tol,
              "prompt");
  auto steps = [&](int64_t n) {
    for (int64_t s = 0; s < n; ++s) {
      std::vector<int32_t> next;
      for (size_t b = 0; b < seqs.size(); ++b) next.push_back(seqs[b][lens[b]++]);
      session.Step(next, &logits);
      ExpectClose(logits, Recompute(model, seqs, lens, srcs), V,
                  tol, "step");
    }
  };
  steps(3);
  const std::vector<int64_t> parents = {2, 0, 0, 3, 2};
  session.Reorder(parents);
  std::vector<std::vector<int32_t>> seqs2;
  std::vector<int64_t> lens2;
  srcs.clear();
  for (int64_t p : parents) {
    seqs2.push_back(seqs[p]);
    lens2.push_back(lens[p]);
    srcs.push_back(sources[p]);
  }
  // The reordered hypotheses diverge from here: new random continuations.
  for (auto& s : seqs2) {
    for (int64_t i = 6; i < capacity; ++i) s[i] = rng.Below(V);
  }
  seqs = seqs2;
  lens = lens2;
  ASSERT_EQ(session.batch(), 5);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(session.source_of(j), parents[j]);
    EXPECT_EQ(session.length(j), 6);
  }
  steps(capacity - 6);
}

TEST_P(DecoderSessionTest, Seq2seqFloatMatchesRecomputation) {
  CheckSeq2seqAgainstRecomputation<float>(GetParam(), 1e-5);
}

TEST_P(DecoderSessionTest, Seq2seqDoubleMatchesRecomputation) {
  CheckSeq2seqAgainstRecomputation<double>(GetParam(), 1e-12);
}

// Int8 linear layers (QuantizedLinears) against the float model with the
// same (dequantized) weights: kInt8LogitTolerance above.
TEST_P(DecoderSessionTest, Int8StaysCloseToFloat) {
  CheckAgainstRecomputation<float>(GetParam(), kInt8LogitTolerance,
                                   ComputeType::kInt8);
}

TEST_P(DecoderSessionTest, Seq2seqInt8StaysCloseToFloat) {
  CheckSeq2seqAgainstRecomputation<float>(GetParam(), kInt8LogitTolerance,
                                          ComputeType::kInt8);
}

// The same with 8-bit activations (kInt8A8LogitTolerance).
TEST_P(DecoderSessionTest, Int8A8StaysCloseToFloat) {
  CheckAgainstRecomputation<float>(GetParam(), kInt8A8LogitTolerance,
                                   ComputeType::kInt8A8);
}

TEST_P(DecoderSessionTest, Seq2seqInt8A8StaysCloseToFloat) {
  CheckSeq2seqAgainstRecomputation<float>(GetParam(), kInt8A8LogitTolerance,
                                          ComputeType::kInt8A8);
}

TEST(DecoderSessionInt8, QuantizesEveryDecoderLinearOnce) {
  BasicTransformer<float> decoder(ConfigFor(Cases()[3]));
  const QuantizedLinears q(decoder);
  EXPECT_EQ(q.size(), 2 * 6);  // per block q, k, v, o, FFN in and out
  const DecoderWeights<float> dw = decoder.decoder_weights();
  // The head's 11 x 16 floats are 704 bytes, below 1/8 of the blocks'
  // 2 x (4 x 16 x 64 + 2 x 24 x 64 or 16 x 64) int8 bytes: it stays float.
  EXPECT_LE(11 * 16 * 4, q.bytes() / kFloatHeadShare);
  EXPECT_EQ(q.Find(dw.head_w), nullptr);
  ASSERT_NE(q.Find(dw.blocks[1].ff_in_w), nullptr);
  EXPECT_EQ(q.Find(dw.blocks[1].ff_in_w)->rows, 24);
  EXPECT_EQ(q.Find(dw.blocks[1].ff_in_w)->cols, 16);
  EXPECT_EQ(q.Find(dw.token), nullptr);  // embeddings stay float
  BasicTransformer<float> s2s(Seq2seqConfigFor(Cases()[3]));
  // 2 decoder blocks of 10 (self and cross q, k, v, o; FFN) and the
  // encoder's block of 6.
  const QuantizedLinears qs(s2s);
  EXPECT_EQ(qs.size(), 2 * 10 + 6);
  ASSERT_EQ(s2s.encoder_blocks().size(), 1u);
  ASSERT_NE(qs.Find(s2s.encoder_blocks()[0].attn.wv), nullptr);
  ASSERT_NE(qs.Find(s2s.encoder_blocks()[0].ff_out_w), nullptr);
  EXPECT_EQ(qs.Find(s2s.encoder_blocks()[0].ff_out_w)->rows, 16);
  EXPECT_EQ(qs.Find(s2s.encoder_blocks()[0].ff_out_w)->cols, 24);
  // Its embedding, the head: small, so float32.
  EXPECT_EQ(qs.Find(s2s.decoder_weights().token), nullptr);
  // A vocabulary whose head outweighs 1/8 of the blocks: quantized too.
  ModelConfig wide = ConfigFor(Cases()[3]);
  wide.vocab_size = 300;
  BasicTransformer<float> wide_model(wide);
  const QuantizedLinears qw(wide_model);
  EXPECT_EQ(qw.size(), 2 * 6 + 1);
  ASSERT_NE(qw.Find(wide_model.decoder_weights().head_w), nullptr);
  EXPECT_EQ(qw.Find(wide_model.decoder_weights().head_w)->rows, 300);
  ModelConfig encoder = ConfigFor(Cases()[3]);
  encoder.arch = Arch::kEncoder;
  const BasicTransformer<float> encoder_model(encoder);
  ExpectInvalid([&] { QuantizedLinears bad(encoder_model); },
                {"decoder or seq2seq", "encoder"});
  ExpectInvalid([] { ParseComputeType("int4", "--compute-type"); },
                {"--compute-type must be float32, int8 or int8_a8", "int4"});
  EXPECT_EQ(ParseComputeType("int8", "x"), ComputeType::kInt8);
  EXPECT_EQ(ParseComputeType("int8_a8", "x"), ComputeType::kInt8A8);
  EXPECT_EQ(ParseComputeType("float32", "x"), ComputeType::kFloat32);
  // The activations each int8 type asks Int8Linear for; float32 has no
  // int8 layers.
  EXPECT_EQ(q.activations(), Int8Activations::k16);
  EXPECT_EQ(QuantizedLinears(decoder, ComputeType::kInt8A8).activations(),
            Int8Activations::k8);
  ExpectInvalid([&] { QuantizedLinears bad(decoder, ComputeType::kFloat32); },
                {"float32"});
}

// The reader's embedding lookups: rows of a table held in int8 as scale x
// int8 values (a tied seq2seq head), -1 a zero row, a token out of range
// refused; a table not held looked up from its float values.
// The refusals around the int8 readers: a parameter index out of range,
// the streaming constructor on a model that holds its float values, and a
// reader given to a block with cross-attention.
TEST(DecoderSessionInt8, RefusesMisusedReaders) {
  BasicTransformer<float> decoder(ConfigFor(Cases()[3]));
  const auto params = static_cast<int64_t>(decoder.parameters().size());
  ExpectInvalid([&] { decoder.AllocateValue(-1); }, {"AllocateValue"});
  ExpectInvalid([&] { decoder.AllocateValue(params); }, {"AllocateValue"});
  ExpectInvalid(
      [&] {
        QuantizedLinears q(decoder, ComputeType::kInt8,
                           [](int64_t, std::vector<float>*) {});
      },
      {"holds its float32 values"});
  const QuantizedLinears q(decoder);
  BlockMemory<float> memory;
  ExpectInvalid(
      [&] {
        BlockForward<float>(nullptr, BlockWeights<float>{}, nullptr, nullptr,
                            nullptr, BlockShape{}, AttentionOptions{},
                            BlockOptions{}, &memory, &q);
      },
      {"cross-attention"});
}

TEST(DecoderSessionInt8, EmbeddingReadsInt8Rows) {
  ModelConfig c = Seq2seqConfigFor(Cases()[3]);
  c.vocab_size = 300;  // a head large enough to be quantized
  BasicTransformer<float> s2s(c);
  Perturb(&s2s);
  const QuantizedLinears q(s2s);
  const float* token = s2s.decoder_weights().token;
  const Int8Matrix* m = q.Find(token);
  ASSERT_NE(m, nullptr);
  const int64_t d = c.d_model;
  const std::vector<int32_t> ids = {299, -1, 0, 17};
  std::vector<float> out(ids.size() * d, 1.0f);
  q.Embedding(ids.data(), token, out.data(), {4, 300, d});
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t e = 0; e < d; ++e) {
      const float want =
          ids[r] < 0 ? 0.0f
                     : m->scales[ids[r]] * static_cast<float>(m->Value(ids[r], e));
      EXPECT_EQ(out[r * d + e], want) << r << " " << e;
    }
  }
  // Close to the float rows (per-row int8: half a step of max |row|).
  EXPECT_NEAR(out[0], token[299 * d], m->scales[299]);
  const int32_t bad = 300;
  ExpectInvalid([&] { q.Embedding(&bad, token, out.data(), {1, 300, d}); },
                {"token 300"});
  BasicTransformer<float> decoder(ConfigFor(Cases()[3]));
  const QuantizedLinears qd(decoder);
  const float* table = decoder.decoder_weights().token;
  const int32_t one = 3;
  std::vector<float> got(d), want(d);
  qd.Embedding(&one, table, got.data(), {1, 11, d});
  nn::EmbeddingForward<float>(&one, table, want.data(), {1, 11, d});
  EXPECT_EQ(got, want);
}

// DropFloatWeights: the int8-only model decodes bit for bit as the model
// that kept its float32 weights, frees them (a head tied to the token
// embedding too: the lookups read its int8 rows) and refuses every float32
// use.
TEST(DecoderSessionInt8, DroppedFloatWeightsDecodeTheSame) {
  for (const bool seq2seq : {false, true}) {
    SCOPED_TRACE(seq2seq ? "seq2seq" : "decoder");
    ModelConfig c = seq2seq ? Seq2seqConfigFor(Cases()[3])
                            : ConfigFor(Cases()[3]);
    c.vocab_size = 300;  // a head large enough to be quantized
    BasicTransformer<float> kept(c), dropped(c);
    Perturb(&kept);
    Perturb(&dropped);
    const QuantizedLinears qk(kept);
    QuantizedLinears qd(dropped);
    const int64_t params = dropped.NumParameters();
    const DecoderWeights<float> before = dropped.decoder_weights();
    EXPECT_EQ(before.head_w == before.token, seq2seq);  // tied
    ExpectInvalid([&] { qd.DropFloatWeights(&kept); }, {"not the model"});
    const int64_t freed = qd.DropFloatWeights(&dropped);
    // Every block matrix (the encoder's too) and the head.
    int64_t want = 0;
    for (const auto& p : kept.parameters()) {
      if (qk.Find(p.value.data()) != nullptr) {
        want += p.numel() * static_cast<int64_t>(sizeof(float));
      }
    }
    EXPECT_GT(want, 0);
    EXPECT_EQ(freed, want);
    EXPECT_TRUE(dropped.values_dropped());
    EXPECT_FALSE(kept.values_dropped());
    EXPECT_EQ(dropped.NumParameters(), params);  // counted by shape
    EXPECT_EQ(qd.dropped_from(), &dropped);
    for (const auto& p : dropped.parameters()) {
      EXPECT_EQ(p.numel() == 1, qd.Find(p.value.data()) != nullptr) << p.name;
    }
    EXPECT_EQ(qd.Find(dropped.decoder_weights().token) != nullptr, seq2seq);
    // The same logits, bit for bit, through prompts and steps.
    std::vector<std::vector<int32_t>> sources = {{1, 2, 3}, {4, 5}};
    auto session = [&](const BasicTransformer<float>& m,
                       const QuantizedLinears& q) {
      return seq2seq
                 ? std::make_unique<BasicDecoderSession<float>>(m, sources,
                                                                12, &q)
                 : std::make_unique<BasicDecoderSession<float>>(m, 2, 12, &q);
    };
    const auto a = session(kept, qk), b = session(dropped, qd);
    std::vector<float> la, lb;
    a->Append({{7, 8, 9}, {10}}, &la);
    b->Append({{7, 8, 9}, {10}}, &lb);
    EXPECT_EQ(la, lb);
    for (int32_t t = 0; t < 5; ++t) {
      a->Step({t, 2 * t}, &la);
      b->Step({t, 2 * t}, &lb);
      EXPECT_EQ(la, lb) << "step " << t;
    }
    // Float32 uses of the dropped model are refused, not run on NaNs, and
    // so is encoding through int8 copies that did not drop its values.
    ExpectInvalid([&] { QuantizedLinears again(dropped); },
                  {"were dropped"});
    if (seq2seq) {
      std::vector<float> memory;
      ExpectInvalid([&] { dropped.Encode(sources, &memory, &qk); },
                    {"Encode", "int8 weights only"});
      ExpectInvalid([&] { dropped.Encode(sources, &memory); },
                    {"Encode", "int8 weights only"});
      dropped.Encode(sources, &memory, &qd);
      std::vector<float> kept_memory;
      kept.Encode(sources, &kept_memory, &qk);
      EXPECT_EQ(memory, kept_memory);
    }
    ExpectInvalid(
        [&] {
          if (seq2seq) {
            BasicDecoderSession<float> s(dropped, sources, 12);
          } else {
            BasicDecoderSession<float> s(dropped, 2, 12);
          }
        },
        {"int8 weights only"});
    ExpectInvalid(
        [&] {
          if (seq2seq) {
            BasicDecoderSession<float> s(dropped, sources, 12, &qk);
          } else {
            BasicDecoderSession<float> s(dropped, 2, 12, &qk);
          }
        },
        {"int8 weights only"});
    Batch batch;
    batch.batch = 1;
    batch.length = 2;
    batch.tokens = {1, 2};
    batch.targets = {2, 3};
    batch.lengths = {2};
    if (seq2seq) {
      batch.source_tokens = {1, 2};
      batch.source_lengths = {2};
      batch.source_length = 2;
    }
    ExpectInvalid([&] { dropped.Evaluate(batch, nullptr, nullptr); },
                  {"int8 weights only", "float32 forward"});
  }
}

// Reorder on a decoder-only session: sequences copied, dropped and
// duplicated continue as the copies would.
TEST(DecoderSessionReorder, DecoderOnlyContinuesFromThePrefixes) {
  BasicTransformer<double> model(ConfigFor(Cases()[3]));
  Perturb(&model);
  const int64_t V = model.config().vocab_size;
  BasicDecoderSession<double> session(model, 3, 8);
  std::vector<std::vector<int32_t>> seqs = {{1, 2, 3, 4, 5},
                                            {6, 7, 8, 9, 10},
                                            {0, 1}};
  std::vector<double> logits;
  session.Append({{1, 2, 3}, {6, 7, 8, 9}, {0}}, &logits);
  session.Reorder({1, 1, 0});
  EXPECT_EQ(session.length(0), 4);
  EXPECT_EQ(session.length(2), 3);
  session.Step({10, 3, 4}, &logits);
  const std::vector<std::vector<int32_t>> want = {
      {6, 7, 8, 9, 10}, {6, 7, 8, 9, 3}, {1, 2, 3, 4}};
  ExpectClose(logits, Recompute(model, want, {5, 5, 4}), V, 1e-12, "reorder");
}

// Reorder without copies where it can: a parent's first child takes its
// cache slot (0 moves to slot 2's owner's place, 2 keeps its rows), and the
// session shrinking to two, then growing to three (a copy into the free
// slot).
TEST(DecoderSessionReorder, SwapsAndShrinksInPlace) {
  BasicTransformer<double> model(ConfigFor(Cases()[3]));
  Perturb(&model);
  const int64_t V = model.config().vocab_size;
  BasicDecoderSession<double> session(model, 3, 8);
  std::vector<double> logits;
  session.Append({{1, 2, 3}, {6, 7}, {4, 5, 0, 9}}, &logits);
  session.Reorder({2, 0});
  ASSERT_EQ(session.batch(), 2);
  EXPECT_EQ(session.length(0), 4);
  EXPECT_EQ(session.length(1), 3);
  session.Step({8, 10}, &logits);
  ExpectClose(logits, Recompute(model, {{4, 5, 0, 9, 8}, {1, 2, 3, 10}}, {5, 4}),
              V, 1e-12, "swap");
  session.Reorder({1, 1, 0});
  session.Step({3, 4, 5}, &logits);
  ExpectClose(logits,
              Recompute(model, {{1, 2, 3, 10, 3}, {1, 2, 3, 10, 4},
                                {4, 5, 0, 9, 8, 5}},
                        {5, 5, 6}),
              V, 1e-12, "grow");
}

// Reorder along cycles: sequences that take each other's rows (a 3-cycle,
// then a swap beside a duplicate and a chain) keep every slot's rows.
TEST(DecoderSessionReorder, CyclesKeepEverySlotsRows) {
  BasicTransformer<double> model(ConfigFor(Cases()[3]));
  Perturb(&model);
  const int64_t V = model.config().vocab_size;
  BasicDecoderSession<double> session(model, 4, 8);
  std::vector<double> logits;
  session.Append({{1, 2, 3}, {6, 7}, {4, 5, 0, 9}, {3}}, &logits);
  session.Reorder({1, 2, 0, 3});
  session.Step({8, 10, 2, 5}, &logits);
  std::vector<std::vector<int32_t>> want = {
      {6, 7, 8}, {4, 5, 0, 9, 10}, {1, 2, 3, 2}, {3, 5}};
  ExpectClose(logits, Recompute(model, want, {3, 5, 4, 2}), V, 1e-12,
              "3-cycle");
  session.Reorder({1, 0, 0, 2});
  session.Step({6, 7, 8, 9}, &logits);
  want = {{4, 5, 0, 9, 10, 6}, {6, 7, 8, 7}, {6, 7, 8, 8},
          {1, 2, 3, 2, 9}};
  ExpectClose(logits, Recompute(model, want, {6, 4, 4, 5}), V, 1e-12,
              "swap, duplicate and chain");
}

// Sequences whose cache slots are out of order, with free slots between
// them: more sequences than slots (new slots), prompts of different
// lengths appended after a Reorder (attention calls per run of consecutive
// slots with the same count), and slots growing past their first 16 rows
// with the sequences in that order; every step against the recomputed
// prefixes.
TEST(DecoderSessionReorder, SlotsOutOfOrderAppendAndGrow) {
  BasicTransformer<double> model(ConfigFor(Cases()[3]));
  Perturb(&model);
  const int64_t V = model.config().vocab_size;
  BasicDecoderSession<double> session(model, 4, 40);
  std::vector<double> logits;
  std::vector<std::vector<int32_t>> want = {{1, 2}, {3}, {4, 5, 6}, {7, 8}};
  session.Append(want, &logits);
  // Sequence 3's slot is freed; 0 and 2 get two children each.
  const std::vector<int64_t> parents = {2, 0, 0, 1, 2, 1};
  session.Reorder(parents);
  std::vector<std::vector<int32_t>> next;
  for (int64_t p : parents) next.push_back(want[p]);
  want = next;
  const std::vector<std::vector<int32_t>> more = {{9}, {1, 2}, {3}, {4, 5},
                                                  {6}, {7, 8, 9}};
  session.Append(more, &logits);
  std::vector<int64_t> lengths;
  for (size_t b = 0; b < want.size(); ++b) {
    want[b].insert(want[b].end(), more[b].begin(), more[b].end());
    lengths.push_back(static_cast<int64_t>(want[b].size()));
  }
  ExpectClose(logits, Recompute(model, want, lengths), V, 1e-12,
              "uneven append");
  session.Reorder({5, 3, 0, 0});
  want = {want[5], want[3], want[0], want[0]};
  for (int step = 0; step < 14; ++step) {  // past 16 rows: the slots grow
    const std::vector<int32_t> tokens = {static_cast<int32_t>(step % 11), 2,
                                         5, static_cast<int32_t>(step % 7)};
    session.Step(tokens, &logits);
    lengths.clear();
    for (size_t b = 0; b < want.size(); ++b) {
      want[b].push_back(tokens[b]);
      lengths.push_back(static_cast<int64_t>(want[b].size()));
    }
    ExpectClose(logits, Recompute(model, want, lengths), V, 1e-12, "step");
    if (step == 6) {
      session.Reorder({3, 2, 2, 1});
      want = {want[3], want[2], want[2], want[1]};
    }
  }
  EXPECT_GT(session.length(0), 16);
}

TEST(DecoderSessionErrors, Seq2seqArguments) {
  ModelConfig c = Seq2seqConfigFor(Cases()[2]);  // learned, max_len 20
  Transformer model(c);
  ExpectInvalid([&] { DecoderSession s(model, 2, 4); },
                {"decoder", "seq2seq", "source"});
  ExpectInvalid(
      [&] { DecoderSession s(model, std::vector<std::vector<int32_t>>{}, 4); },
      {"no source"});
  ExpectInvalid([&] { DecoderSession s(model, {{1, 11}}, 4); },
                {"[0][1]", "vocab_size = 11"});
  ExpectInvalid([&] { DecoderSession s(model, {{1}}, 21); },
                {"capacity 21", "max_len = 20"});
  Transformer decoder(ConfigFor(Cases()[3]));
  ExpectInvalid([&] { DecoderSession s(decoder, {{1}}, 4); },
                {"seq2seq", "decoder"});
  DecoderSession session(model, {{1, 2}, {3}}, 4);
  std::vector<float> logits;
  session.Step({1, 1}, &logits);
  ExpectInvalid([&] { session.Reorder({}); }, {"no sequence"});
  ExpectInvalid([&] { session.Reorder({0, 2}); }, {"parents[1]", "2"});
  EXPECT_EQ(session.batch(), 2);
  session.Reorder({1});
  EXPECT_EQ(session.source_of(0), 1);
  session.Step({2}, &logits);
  EXPECT_EQ(logits.size(), 11u);
}

}  // namespace
}  // namespace relpos::model
