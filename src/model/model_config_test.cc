// ModelConfig JSON round trip and validation messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "relpos/error.h"

namespace relpos::model {
namespace {

ModelConfig NonDefault() {
  ModelConfig c;
  c.arch = Arch::kDecoder;
  c.vocab_size = 259;
  c.d_model = 96;
  c.heads = 3;
  c.layers = 5;
  c.d_ff = 333;
  c.scheme.max_len = 777;
  c.position = PositionScheme::kShawAsym;  // Shaw's switches apply to it
  c.scheme.max_distance = 7;
  c.scheme.key_term = false;
  c.scheme.value_term = true;
  c.scheme.per_head_tables = true;
  c.scheme.rel_init_scale = 0.125;
  c.scheme.k_left = 5;
  c.scheme.k_right = 0;
  c.scheme.num_buckets = 12;
  c.scheme.bucket_max_distance = 99;
  c.scheme.rope_base = 500000.0;
  c.scheme.rope_layout = RopeLayout::kInterleaved;
  c.dropout = 0.25;
  c.seed = 18446744073709551615ULL;  // 2^64 - 1 survives the trip
  return c;
}

void ExpectEqual(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.decoder_layers, b.decoder_layers);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.scheme.max_len, b.scheme.max_len);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.scheme.max_distance, b.scheme.max_distance);
  EXPECT_EQ(a.scheme.key_term, b.scheme.key_term);
  EXPECT_EQ(a.scheme.value_term, b.scheme.value_term);
  EXPECT_EQ(a.scheme.per_head_tables, b.scheme.per_head_tables);
  EXPECT_EQ(a.scheme.rel_init_scale, b.scheme.rel_init_scale);
  EXPECT_EQ(a.scheme.k_left, b.scheme.k_left);
  EXPECT_EQ(a.scheme.k_right, b.scheme.k_right);
  EXPECT_EQ(a.scheme.num_buckets, b.scheme.num_buckets);
  EXPECT_EQ(a.scheme.bucket_max_distance, b.scheme.bucket_max_distance);
  EXPECT_EQ(a.scheme.rope_base, b.scheme.rope_base);
  EXPECT_EQ(a.scheme.rope_layout, b.scheme.rope_layout);
  EXPECT_EQ(a.dropout, b.dropout);
  EXPECT_EQ(a.seed, b.seed);
}

TEST(ModelConfigTest, JsonRoundTripThroughText) {
  const ModelConfig c = NonDefault();
  const std::string text = ToJson(c).dump();
  ExpectEqual(ModelConfigFromJson(nlohmann::json::parse(text)), c);
  EXPECT_EQ(ToJson(c)["position"], "shaw-asym");
  EXPECT_EQ(ToJson(c)["arch"], "decoder");
  EXPECT_EQ(ToJson(c)["rope_layout"], "interleaved");
  // decoder_layers is written only when it is not its default (-1), so
  // configs of encoders and decoders read exactly as before it existed.
  EXPECT_FALSE(ToJson(c).contains("decoder_layers"));
}

TEST(ModelConfigTest, Seq2seqRoundTripAndSides) {
  ModelConfig c = NonDefault();
  c.arch = Arch::kSeq2seq;
  c.position = PositionScheme::kT5;
  c.scheme.key_term = c.scheme.value_term = true;
  c.scheme.per_head_tables = false;
  c.decoder_layers = 2;
  const nlohmann::json j = ToJson(c);
  EXPECT_EQ(j["arch"], "seq2seq");
  EXPECT_EQ(j["decoder_layers"], 2);
  ExpectEqual(ModelConfigFromJson(nlohmann::json::parse(j.dump())), c);
  // Each side as the position functions see it.
  const ModelConfig enc = EncoderSide(c), dec = DecoderSide(c);
  EXPECT_EQ(enc.arch, Arch::kEncoder);
  EXPECT_EQ(enc.layers, 5);
  EXPECT_EQ(dec.arch, Arch::kDecoder);
  EXPECT_EQ(dec.layers, 2);
  EXPECT_EQ(DecoderLayers(c), 2);
  c.decoder_layers = -1;
  EXPECT_EQ(DecoderSide(c).layers, 5);
  // The other architectures are their own single side.
  const ModelConfig d = NonDefault();
  EXPECT_EQ(EncoderSide(d).arch, Arch::kDecoder);
  EXPECT_EQ(DecoderSide(d).layers, d.layers);
}

// A config.json written before the scheme family (position "relative", none
// of the new keys) loads as Shaw's scheme with the old meaning of every
// field; the new keys take their defaults.
TEST(ModelConfigTest, OldRelativeConfigLoads) {
  const nlohmann::json old = {{"arch", "encoder"},
                              {"vocab_size", 16},
                              {"d_model", 32},
                              {"heads", 4},
                              {"layers", 2},
                              {"d_ff", 64},
                              {"max_len", 128},
                              {"position", "relative"},
                              {"max_distance", 8},
                              {"key_term", true},
                              {"value_term", false},
                              {"per_head_tables", true},
                              {"rel_init_scale", 1.0},
                              {"dropout", 0.0},
                              {"seed", 3}};
  const ModelConfig c = ModelConfigFromJson(old);
  EXPECT_EQ(c.position, PositionScheme::kShaw);
  EXPECT_EQ(c.scheme.max_distance, 8);
  EXPECT_FALSE(c.scheme.value_term);
  EXPECT_TRUE(c.scheme.per_head_tables);
  EXPECT_EQ(c.scheme.k_left, ModelConfig().scheme.k_left);
  EXPECT_EQ(ToJson(c)["position"], "shaw");
}

TEST(ModelConfigTest, MissingFieldsKeepDefaults) {
  const ModelConfig c = ModelConfigFromJson({{"vocab_size", 10}});
  ModelConfig want;
  want.vocab_size = 10;
  ExpectEqual(c, want);
}

TEST(ModelConfigTest, EnumNames) {
  const std::vector<std::string> names = {
      "none",     "sinusoidal", "learned", "shaw", "shaw-asym",
      "shaw-log", "t5",         "alibi",   "rope", "xl"};
  for (const std::string& name : names) {
    EXPECT_EQ(ToString(ParsePositionScheme(name)), name);
  }
  // The old name of Shaw's scheme parses; the scheme is written "shaw".
  EXPECT_EQ(ParsePositionScheme("relative"), PositionScheme::kShaw);
  EXPECT_EQ(ToString(PositionScheme::kRelative), "shaw");
  EXPECT_EQ(ParseArch("encoder"), Arch::kEncoder);
  EXPECT_EQ(ParseArch("decoder"), Arch::kDecoder);
  EXPECT_EQ(ParseArch("seq2seq"), Arch::kSeq2seq);
  EXPECT_EQ(ToString(Arch::kSeq2seq), "seq2seq");
  EXPECT_THROW(ParsePositionScheme("rotary"), InvalidArgument);
  EXPECT_THROW(ParseArch("encoder-decoder"), InvalidArgument);
}

// Expects `json` to be rejected with exception type E whose message contains
// every string in `needles`.
template <typename E>
void ExpectRejected(const nlohmann::json& json,
                    std::initializer_list<std::string> needles) {
  try {
    ModelConfigFromJson(json);
    ADD_FAILURE() << "accepted " << json.dump();
  } catch (const E& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << json.dump() << ": "
                  << e.what();
  }
}

TEST(ModelConfigTest, BadValuesNameTheField) {
  const nlohmann::json base = ToJson(NonDefault());
  auto with = [&](const std::string& key, nlohmann::json v) {
    nlohmann::json j = base;
    j[key] = std::move(v);
    return j;
  };
  ExpectRejected<InvalidArgument>(with("vocab_size", 0), {"vocab_size", "0"});
  ExpectRejected<InvalidArgument>(with("d_model", -4), {"d_model", "-4"});
  ExpectRejected<InvalidArgument>(with("heads", 5), {"heads", "5", "96"});
  ExpectRejected<InvalidArgument>(with("heads", 0), {"heads"});
  ExpectRejected<InvalidArgument>(with("layers", -1), {"layers"});
  ExpectRejected<InvalidArgument>(with("d_ff", 0), {"d_ff"});
  ExpectRejected<InvalidArgument>(with("max_len", 0), {"max_len"});
  ExpectRejected<InvalidArgument>(with("max_distance", -3),
                                  {"max_distance", "-3"});
  ExpectRejected<InvalidArgument>(with("dropout", 1.0), {"dropout", "1"});
  ExpectRejected<InvalidArgument>(with("dropout", -0.1), {"dropout"});
  ExpectRejected<InvalidArgument>(with("rel_init_scale", -1.0),
                                  {"rel_init_scale"});
  ExpectRejected<InvalidArgument>(with("position", "rotary"),
                                  {"position", "rotary", "relative"});
  ExpectRejected<InvalidArgument>(with("arch", "encdec"), {"arch", "encdec"});
  ExpectRejected<InvalidArgument>(with("k_left", -1), {"k_left", "-1"});
  ExpectRejected<InvalidArgument>(with("k_right", -2), {"k_right", "-2"});
  ExpectRejected<InvalidArgument>(with("num_buckets", 1), {"num_buckets", "1"});
  ExpectRejected<InvalidArgument>(with("bucket_max_distance", 0),
                                  {"bucket_max_distance", "0"});
  ExpectRejected<InvalidArgument>(with("rope_base", 0.0), {"rope_base", "0"});
  ExpectRejected<InvalidArgument>(with("rope_layout", "halves"),
                                  {"rope_layout", "halves"});
  // Checks that depend on the scheme and the architecture.
  auto scheme = [&](const std::string& position, const std::string& arch) {
    nlohmann::json j = base;
    j["position"] = position;
    j["arch"] = arch;
    j["key_term"] = j["value_term"] = true;  // Shaw's switches at defaults
    j["per_head_tables"] = false;
    return j;
  };
  // Shaw's switches are refused, not ignored, by the other schemes.
  for (const char* p : {"none", "sinusoidal", "learned", "t5", "alibi",
                        "rope", "xl"}) {
    nlohmann::json j = scheme(p, "decoder");
    j["per_head_tables"] = true;
    ExpectRejected<InvalidArgument>(j, {"per_head_tables", p});
    j = scheme(p, "decoder");
    j["value_term"] = false;
    ExpectRejected<InvalidArgument>(j, {"value_term", p});
  }
  nlohmann::json t5 = scheme("t5", "encoder");
  t5["num_buckets"] = 3;  // bidirectional needs 4
  ExpectRejected<InvalidArgument>(t5, {"num_buckets", "3", "4"});
  t5["arch"] = "decoder";  // causal needs 2: accepted with a reach above 1
  t5["bucket_max_distance"] = 2;
  EXPECT_NO_THROW(ModelConfigFromJson(t5));
  nlohmann::json log = scheme("shaw-log", "encoder");
  log["num_buckets"] = 32;
  log["bucket_max_distance"] = 8;  // exact reach 8: no log range
  ExpectRejected<InvalidArgument>(log, {"bucket_max_distance", "8"});
  // RoPE rotates pairs of each head's dimensions: 96 / 3 = 32 is fine,
  // 96 / 32 = 3 is not.
  nlohmann::json rope = scheme("rope", "decoder");
  EXPECT_NO_THROW(ModelConfigFromJson(rope));
  rope["heads"] = 32;
  ExpectRejected<InvalidArgument>(rope, {"rope", "3"});
  nlohmann::json xl = scheme("xl", "decoder");
  xl["d_model"] = 9;
  ExpectRejected<InvalidArgument>(xl, {"xl", "d_model", "9"});
  // Absurd sizes from an untrusted file: rejected before any allocation.
  ExpectRejected<InvalidArgument>(with("vocab_size", int64_t{1} << 40),
                                  {"vocab_size"});
  nlohmann::json huge = base;
  huge["d_model"] = 65536;
  huge["heads"] = 1;
  huge["layers"] = 1024;
  ExpectRejected<InvalidArgument>(huge, {"parameters"});
}

// The checks a seq2seq config adds: decoder_layers (seq2seq only, -1 or a
// block count), each side's scheme (the encoder's bidirectional T5 buckets
// need 4), and a parameter count of both stacks and the cross-attention.
TEST(ModelConfigTest, Seq2seqChecks) {
  const nlohmann::json base = ToJson(NonDefault());
  nlohmann::json j = base;
  j["decoder_layers"] = 2;
  ExpectRejected<InvalidArgument>(j, {"decoder_layers", "seq2seq", "decoder"});
  j["arch"] = "seq2seq";
  j["decoder_layers"] = -2;
  ExpectRejected<InvalidArgument>(j, {"decoder_layers", "-2"});
  nlohmann::json t5 = base;
  t5["arch"] = "seq2seq";
  t5["position"] = "t5";
  t5["key_term"] = t5["value_term"] = true;
  t5["per_head_tables"] = false;
  t5["num_buckets"] = 3;
  ExpectRejected<InvalidArgument>(t5, {"num_buckets", "3", "4"});
  t5["num_buckets"] = 4;
  EXPECT_NO_THROW(ModelConfigFromJson(t5));
  nlohmann::json big = t5;
  big["position"] = "none";
  big["arch"] = "encoder";
  big["d_model"] = 2048;  // ~25M parameters per encoder block, ~42M per
  big["heads"] = 8;       // decoder block: 60 blocks are ~1.5G as an
  big["d_ff"] = 2048;     // encoder, ~4G as seq2seq (cap 2^31)
  big["layers"] = 60;
  big["vocab_size"] = 16;
  EXPECT_NO_THROW(ModelConfigFromJson(big));
  big["arch"] = "seq2seq";
  ExpectRejected<InvalidArgument>(big, {"parameters"});
}

TEST(ModelConfigTest, WrongTypesAndUnknownFieldsAreFormatErrors) {
  const nlohmann::json base = ToJson(NonDefault());
  auto with = [&](const std::string& key, nlohmann::json v) {
    nlohmann::json j = base;
    j[key] = std::move(v);
    return j;
  };
  ExpectRejected<FormatError>(with("d_model", "64"), {"d_model", "integer"});
  ExpectRejected<FormatError>(with("d_model", 64.5), {"d_model"});
  ExpectRejected<FormatError>(with("key_term", 1), {"key_term"});
  ExpectRejected<FormatError>(with("dropout", "0.1"), {"dropout"});
  ExpectRejected<FormatError>(with("position", 3), {"position"});
  ExpectRejected<FormatError>(with("seed", -1), {"seed"});
  ExpectRejected<FormatError>(with("max_distanse", 3), {"max_distanse"});
  ExpectRejected<FormatError>(nlohmann::json::array({1, 2}), {"object"});
}

}  // namespace
}  // namespace relpos::model
