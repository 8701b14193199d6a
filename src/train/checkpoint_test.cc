#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/io/file_io.h"
#include "base/io/safetensors.h"
#include "model/decoder_session.h"
#include "relpos/error.h"
#include "train/evaluation.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder per test under the build tree's temp area.
std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_checkpoint_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

model::ModelConfig TinyModel(
    model::PositionScheme pos = model::PositionScheme::kRelative) {
  model::ModelConfig m;
  m.d_model = 16;
  m.heads = 2;
  m.layers = 1;
  m.d_ff = 32;
  m.scheme.max_len = 64;
  m.position = pos;
  m.scheme.max_distance = 4;
  return m;
}

TrainConfig TinyTrain() {
  TrainConfig t;
  t.data.task = "reverse";
  t.train_min_length = 1;
  t.train_max_length = 4;
  t.steps = 6;
  t.batch_size = 4;
  t.warmup_steps = 2;
  t.checkpoint_every = 3;
  t.seed = 7;
  return t;
}

// Trains the tiny model for a few steps into `dir` and returns the trainer.
Trainer TrainTiny(const std::string& dir) {
  Trainer t(TinyModel(), TinyTrain());
  RunOptions o;
  o.checkpoint_dir = dir;
  t.Run(o);
  return t;
}

TEST(Checkpoint, RoundTripRestoresEverything) {
  const std::string dir = TempDir("roundtrip");
  Trainer t = TrainTiny(dir);
  const Checkpoint ck = ReadCheckpoint(dir, /*with_optimizer=*/true);
  EXPECT_EQ(ck.state.step, 6);
  EXPECT_EQ(ck.state.data_rng, t.state().data_rng);
  EXPECT_EQ(ck.state.dropout_rng, t.state().dropout_rng);
  EXPECT_EQ(model::ToJson(ck.model_config), model::ToJson(t.model_config()));
  EXPECT_EQ(ToJson(ck.train_config), ToJson(t.config()));
  const auto& params = t.model().parameters();
  ASSERT_EQ(ck.parameters.size(), params.size());
  ASSERT_EQ(ck.optimizer.size(), 2 * params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(ck.parameters[i].name, params[i].name);
    EXPECT_EQ(ck.parameters[i].data, params[i].value);  // bitwise
    EXPECT_EQ(ck.optimizer[i].name, "exp_avg." + params[i].name);
    EXPECT_EQ(ck.optimizer[params.size() + i].name,
              "exp_avg_sq." + params[i].name);
  }
  // Only the newest set of files is left (older saves were collected).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 4);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model-00000006.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "optimizer-00000006.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "signal-00000006.json"));

  // A loaded model evaluates exactly like the trained one.
  TrainConfig tc;
  TrainState st;
  model::Transformer loaded = LoadModel(dir, &tc, &st);
  EXPECT_EQ(st.step, 6);
  auto data = MakeDataSource(tc.data);
  EvalConfig ec{.lengths = {3, 7}, .sequences_per_length = 8, .batch_size = 8};
  const auto a = EvaluateByLength(t.model(), *data, ec);
  const auto b = EvaluateByLength(loaded, *data, ec);
  ASSERT_EQ(a.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss);
    EXPECT_EQ(a[i].token_accuracy, b[i].token_accuracy);
  }
}

// Every position scheme, encoder and decoder: a few training steps, a save,
// and the loaded model evaluates exactly like the trained one (its tensors
// come back under their stable names, bit for bit).
TEST(Checkpoint, EverySchemeSavesLoadsAndEvaluatesIdentically) {
  using model::PositionScheme;
  for (model::Arch arch : {model::Arch::kEncoder, model::Arch::kDecoder}) {
    for (const Scheme& scheme : Schemes()) {  // the registry's, in order
      const PositionScheme p = scheme.id;
      const std::string name = model::ToString(arch) + "_" + model::ToString(p);
      SCOPED_TRACE(name);
      const std::string dir = TempDir("scheme_" + name);
      model::ModelConfig m = TinyModel(p);
      m.arch = arch;
      m.scheme.num_buckets = 8;
      m.scheme.bucket_max_distance = 6;
      m.scheme.k_left = 3;
      m.scheme.k_right = 1;
      TrainConfig tc = TinyTrain();
      Trainer t(m, tc);
      RunOptions o;
      o.checkpoint_dir = dir;
      t.Run(o);
      testing::ExpectLoadsAndEvaluatesIdentically(t, dir, {3, 7});
    }
  }
}

// A checkpoint written before the scheme family says "position": "relative";
// it loads as shaw with the same tensors and evaluates identically.
TEST(Checkpoint, OldRelativeConfigLoadsAsShaw) {
  const std::string dir = TempDir("old_relative");
  Trainer t = TrainTiny(dir);
  const fs::path cfg = fs::path(dir) / "config.json";
  nlohmann::json j = nlohmann::json::parse(ReadAll(cfg));
  ASSERT_EQ(j["model"]["position"], "shaw");
  j["model"]["position"] = "relative";
  // The keys the family added were not written then.
  for (const char* key : {"k_left", "k_right", "num_buckets",
                          "bucket_max_distance", "rope_base", "rope_layout"}) {
    ASSERT_EQ(j["model"].erase(key), 1u) << key;
  }
  io::AtomicWriteFile(cfg.string(), j.dump(2));
  TrainConfig tc;
  TrainState st;
  model::Transformer loaded = LoadModel(dir, &tc, &st);
  EXPECT_EQ(loaded.config().position, model::PositionScheme::kShaw);
  auto data = MakeDataSource(tc.data);
  EvalConfig ec{.lengths = {3, 7}, .sequences_per_length = 8, .batch_size = 8};
  const auto a = EvaluateByLength(t.model(), *data, ec);
  const auto b = EvaluateByLength(loaded, *data, ec);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss);
}

// A checkpoint of `parameters` at step 0 with fresh optimizer moments.
Checkpoint WriteUntrained(const std::string& dir, const model::ModelConfig& m,
                          const TrainConfig& tc,
                          std::vector<io::NamedTensor> parameters) {
  Checkpoint ck;
  ck.model_config = m;
  ck.train_config = tc;
  ck.parameters = std::move(parameters);
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
    for (const io::NamedTensor& t : ck.parameters) {
      ck.optimizer.push_back(
          {prefix + t.name, t.shape, std::vector<float>(t.data.size(), 0.f)});
    }
  }
  WriteCheckpoint(dir, ck);
  return ck;
}

// LoadModelFor(int8 / int8_a8) gives the model LoadModel + QuantizedLinears
// + DropFloatWeights give, bit for bit (every value kept, the logits of a
// decoding session), without ever allocating the float32 matrices that get
// int8 copies: a decoder with a float32 head (small vocabulary) and with an
// int8 head, and a seq2seq model (its encoder in int8 too) whose int8 head
// is its embedding.
TEST(Checkpoint, LoadModelForInt8IsLoadQuantizeAndDrop) {
  using model::ComputeType;
  struct Case {
    model::Arch arch;
    int64_t vocab;
    bool head_int8;
  };
  for (const Case& k : {Case{model::Arch::kDecoder, 8, false},
                        Case{model::Arch::kDecoder, 40, true},
                        Case{model::Arch::kSeq2seq, 64, true}}) {
    model::ModelConfig m = TinyModel();
    m.arch = k.arch;
    m.vocab_size = k.vocab;
    m.layers = 2;
    if (k.arch == model::Arch::kSeq2seq) m.decoder_layers = 2;
    const std::string name = model::ToString(k.arch) + std::to_string(k.vocab);
    SCOPED_TRACE(name);
    const std::string dir = TempDir("int8_" + name);
    TrainConfig tc = TinyTrain();
    if (k.arch == model::Arch::kSeq2seq) tc.data.task = "s2s_copy";
    const Checkpoint ck =
        WriteUntrained(dir, m, tc, GetParameters(model::Transformer(m)));
    for (const ComputeType type : {ComputeType::kInt8, ComputeType::kInt8A8}) {
      model::Transformer want = LoadModel(dir, nullptr, nullptr);
      model::QuantizedLinears want_q(want, type);
      want_q.DropFloatWeights(&want);
      TrainState st;
      const LoadedModel got = LoadModelFor(dir, type, nullptr, &st);
      EXPECT_EQ(st.step, ck.state.step);
      ASSERT_NE(got.quantized, nullptr);
      EXPECT_EQ(got.quantized->dropped_from(), got.model.get());
      EXPECT_TRUE(got.model->values_dropped());
      EXPECT_EQ(got.quantized->size(), want_q.size());
      EXPECT_EQ(got.quantized->bytes(), want_q.bytes());
      const auto& gp = got.model->parameters();
      const auto& wp = want.parameters();
      ASSERT_EQ(gp.size(), wp.size());
      int64_t int8_matrices = 0;
      for (size_t i = 0; i < gp.size(); ++i) {
        SCOPED_TRACE(gp[i].name);
        EXPECT_EQ(gp[i].value.size(), wp[i].value.size());
        if (wp[i].value.size() > 1) {
          EXPECT_EQ(gp[i].value, wp[i].value);
        } else {
          ++int8_matrices;  // never allocated: a placeholder
        }
      }
      // 2 decoder blocks x (self [+ cross] attention x 4 + FFN x 2), the
      // seq2seq encoder's 2 blocks x 6, the head (seq2seq: the embedding).
      const bool s2s = k.arch == model::Arch::kSeq2seq;
      const int64_t want_int8 =
          2 * (s2s ? 10 : 6) + (s2s ? 2 * 6 : 0) + (k.head_int8 ? 1 : 0);
      EXPECT_EQ(int8_matrices, want_int8);
      EXPECT_EQ(got.quantized->size(), want_int8);
      std::vector<float> a, b;
      if (k.arch == model::Arch::kSeq2seq) {
        const std::vector<std::vector<int32_t>> sources = {{3, 1, 4}, {5}};
        model::BasicDecoderSession<float> sw(want, sources, 8, &want_q);
        model::BasicDecoderSession<float> sg(*got.model, sources, 8,
                                             got.quantized.get());
        for (const int32_t t : {1, 6, 2}) {
          sw.Step({t, t}, &a);
          sg.Step({t, t}, &b);
          EXPECT_EQ(a, b);
        }
      } else {
        model::BasicDecoderSession<float> sw(want, 2, 8, &want_q);
        model::BasicDecoderSession<float> sg(*got.model, 2, 8,
                                             got.quantized.get());
        sw.Append({{1, 2, 3}, {4}}, &a);
        sg.Append({{1, 2, 3}, {4}}, &b);
        EXPECT_EQ(a, b);
        sw.Step({5, 6}, &a);
        sg.Step({5, 6}, &b);
        EXPECT_EQ(a, b);
      }
      EXPECT_FALSE(a.empty());
    }
    // float32: LoadModel's model, no int8 copies.
    const LoadedModel f =
        LoadModelFor(dir, ComputeType::kFloat32, nullptr, nullptr);
    EXPECT_EQ(f.quantized, nullptr);
    EXPECT_FALSE(f.model->values_dropped());
  }
}

// A non-finite value in a matrix LoadModelFor quantizes (read into its
// one-matrix buffer, never into the model) is the file's FormatError, as
// LoadModel reports it; an encoder has nothing to quantize.
TEST(Checkpoint, LoadModelForInt8ChecksWhatItQuantizes) {
  model::ModelConfig m = TinyModel();
  m.arch = model::Arch::kDecoder;
  m.vocab_size = 8;
  const std::string dir = TempDir("int8_nan");
  std::vector<io::NamedTensor> params = GetParameters(model::Transformer(m));
  bool poisoned = false;
  for (io::NamedTensor& t : params) {
    if (t.name == "blocks.0.ff.in.weight") {
      t.data[5] = std::numeric_limits<float>::quiet_NaN();
      poisoned = true;
    }
  }
  ASSERT_TRUE(poisoned);
  WriteUntrained(dir, m, TinyTrain(), std::move(params));
  for (const model::ComputeType type :
       {model::ComputeType::kFloat32, model::ComputeType::kInt8}) {
    try {
      LoadModelFor(dir, type, nullptr, nullptr);
      ADD_FAILURE() << "no FormatError";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "tensor 'blocks.0.ff.in.weight' holds NaN or Inf"),
                std::string::npos)
          << e.what();
    }
  }
  const std::string enc = TempDir("int8_encoder");
  Trainer t(TinyModel(), TinyTrain());
  RunOptions o;
  o.checkpoint_dir = enc;
  t.Run(o);
  EXPECT_THROW(LoadModelFor(enc, model::ComputeType::kInt8, nullptr, nullptr),
               InvalidArgument);
}

TEST(Checkpoint, SameSeedGivesBitwiseIdenticalFiles) {
  const std::string a = TempDir("det_a"), b = TempDir("det_b");
  TrainTiny(a);
  TrainTiny(b);
  for (const char* name :
       {"config.json", "model-00000006.safetensors",
        "optimizer-00000006.safetensors", "signal-00000006.json"}) {
    EXPECT_EQ(ReadAll(fs::path(a) / name), ReadAll(fs::path(b) / name)) << name;
  }
}

TEST(Checkpoint, CrashBeforeTheCommitKeepsTheOldCheckpoint) {
  const std::string dir = TempDir("crash");
  Trainer t = TrainTiny(dir);
  const std::string config_before = ReadAll(fs::path(dir) / "config.json");
  // Simulate a save of step 9 killed after its tensor files but before
  // config.json: the new files exist, config.json still names step 6.
  io::AtomicWriteFile((fs::path(dir) / "model-00000009.safetensors").string(),
                      "junk");
  io::AtomicWriteFile(
      (fs::path(dir) / "optimizer-00000009.safetensors").string(), "junk");
  const Checkpoint ck = ReadCheckpoint(dir, true);
  EXPECT_EQ(ck.state.step, 6);
  EXPECT_EQ(ReadAll(fs::path(dir) / "config.json"), config_before);
  // Re-saving the same step under names still referenced picks fresh names,
  // and the next commit collects the debris.
  Checkpoint again = ck;
  WriteCheckpoint(dir, again);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model-00000009.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model-00000006.1.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model-00000006.safetensors"));
  const Checkpoint re = ReadCheckpoint(dir, true);
  EXPECT_EQ(re.parameters[0].data, ck.parameters[0].data);
}

// Every way a checkpoint folder can be broken is refused with IoError or
// FormatError (never a crash, never a silently wrong model).
TEST(Checkpoint, RejectsDamagedFolders) {
  const std::string good = TempDir("good");
  TrainTiny(good);
  const fs::path cfg = fs::path(good) / "config.json";
  const std::string cfg_text = ReadAll(cfg);
  const fs::path model_file = fs::path(good) / "model-00000006.safetensors";
  const std::string model_bytes = ReadAll(model_file);

  auto edit_json = [&](std::function<void(nlohmann::json&)> f) {
    return [cfg, cfg_text, f](const std::string& dir) {
      nlohmann::json j = nlohmann::json::parse(cfg_text);
      f(j);
      io::AtomicWriteFile((fs::path(dir) / "config.json").string(), j.dump());
    };
  };
  auto edit_model = [&](std::function<void(io::SafetensorsFile&)> f) {
    return [model_bytes, f](const std::string& dir) {
      io::SafetensorsFile st = io::ParseSafetensors(model_bytes, "test");
      f(st);
      io::WriteSafetensors(
          (fs::path(dir) / "model-00000006.safetensors").string(), st.tensors,
          st.metadata);
    };
  };
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    bool io_error;  // IoError expected (else FormatError)
  };
  const std::vector<Case> cases = {
      {"no config.json",
       [](const std::string& d) { fs::remove(fs::path(d) / "config.json"); },
       true},
      {"config not JSON",
       [](const std::string& d) {
         io::AtomicWriteFile((fs::path(d) / "config.json").string(),
                             "{not json");
       },
       false},
      {"wrong format",
       edit_json([](nlohmann::json& j) { j["format"] = "other"; }), false},
      {"wrong version", edit_json([](nlohmann::json& j) { j["version"] = 99; }),
       false},
      {"unknown field", edit_json([](nlohmann::json& j) { j["extra"] = 1; }),
       false},
      {"step beyond steps",
       edit_json([](nlohmann::json& j) { j["state"]["step"] = 100; }), false},
      {"bad rng",
       edit_json([](nlohmann::json& j) { j["state"]["data_rng"] = "12"; }),
       false},
      {"path traversal", edit_json([](nlohmann::json& j) {
         j["files"]["model"] = "../model-00000006.safetensors";
       }),
       false},
      {"model config changed (d_model)",
       edit_json([](nlohmann::json& j) { j["model"]["d_model"] = 32; }), false},
      {"model config invalid (heads)",
       edit_json([](nlohmann::json& j) { j["model"]["heads"] = 3; }), false},
      {"position scheme changed",
       edit_json([](nlohmann::json& j) { j["model"]["position"] = "learned"; }),
       false},
      {"missing model file",
       [](const std::string& d) {
         fs::remove(fs::path(d) / "model-00000006.safetensors");
       },
       true},
      {"truncated model file",
       [model_bytes](const std::string& d) {
         io::AtomicWriteFile(
             (fs::path(d) / "model-00000006.safetensors").string(),
             model_bytes.substr(0, model_bytes.size() / 2));
       },
       false},
      {"tensor renamed",
       // swap, not `name = "x"`: GCC 12's -Wrestrict misfires on that
       // assignment once inlined here (GCC bug 105329).
       edit_model([](io::SafetensorsFile& f) {
         std::string renamed = "x";
         f.tensors[0].name.swap(renamed);
       }),
       false},
      {"tensor missing",
       edit_model([](io::SafetensorsFile& f) { f.tensors.pop_back(); }), false},
      {"NaN in a tensor", edit_model([](io::SafetensorsFile& f) {
         f.tensors[1].data[0] = std::numeric_limits<float>::quiet_NaN();
       }),
       false},
      {"step metadata mismatch",
       edit_model([](io::SafetensorsFile& f) { f.metadata["step"] = "3"; }),
       false},
  };
  for (const Case& c : cases) {
    const std::string dir = TempDir("bad");
    for (const auto& e : fs::directory_iterator(good)) {
      fs::copy_file(e.path(), fs::path(dir) / e.path().filename());
    }
    c.damage(dir);
    if (c.io_error) {
      EXPECT_THROW(ReadCheckpoint(dir, true), IoError) << c.name;
    } else {
      EXPECT_THROW(ReadCheckpoint(dir, true), FormatError) << c.name;
    }
    EXPECT_THROW(Trainer::Resume(dir), Error) << c.name;
  }
  EXPECT_THROW(ReadCheckpoint(TempDir("empty"), true), IoError);
  EXPECT_THROW(ReadCheckpoint("/nonexistent/relpos", true), IoError);
}

TEST(Checkpoint, NegativeSecondMomentRejected) {
  const std::string dir = TempDir("moment");
  TrainTiny(dir);
  const fs::path f = fs::path(dir) / "optimizer-00000006.safetensors";
  io::SafetensorsFile st = io::ReadSafetensors(f.string());
  st.tensors.back().data[0] = -1.0f;
  io::WriteSafetensors(f.string(), st.tensors, st.metadata);
  EXPECT_THROW(ReadCheckpoint(dir, true), FormatError);
  EXPECT_NO_THROW(ReadCheckpoint(dir, false));  // eval ignores the optimiser
}

}  // namespace
}  // namespace relpos::train
