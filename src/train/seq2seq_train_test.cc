// Training a seq2seq model (docs/training.md, "Sequence-to-sequence tasks"):
// the pair data source and its batches (sources and targets padded apart),
// the architecture checks against the data, a run that learns s2s_copy,
// resume bit for bit (dropout and label smoothing included), every scheme
// saving, loading and evaluating identically, and the relative tables'
// training signal per side.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "data/tasks/pair_tasks.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/signal_stats.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;
using model::PositionScheme;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_seq2seq_train_test_" +
                      std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

model::ModelConfig SmallSeq2seq(PositionScheme pos) {
  model::ModelConfig m;
  m.arch = model::Arch::kSeq2seq;
  m.d_model = 32;
  m.heads = 4;
  m.layers = 2;
  m.d_ff = 64;
  m.scheme.max_len = 64;
  m.position = pos;
  m.scheme.max_distance = 4;
  m.scheme.num_buckets = 8;
  m.scheme.bucket_max_distance = 6;
  m.scheme.k_left = 3;
  m.scheme.k_right = 1;
  return m;
}

TrainConfig SmallTrain(const std::string& task, int64_t steps) {
  TrainConfig t;
  t.data.task = task;
  t.train_min_length = 2;
  t.train_max_length = 8;
  t.steps = steps;
  t.batch_size = 16;
  t.lr = 3e-3;
  t.warmup_steps = steps / 10;
  t.checkpoint_every = 0;
  t.label_smoothing = kSeq2seqLabelSmoothing;
  t.seed = 5;
  return t;
}

TEST(PairData, IsSeq2seqDataWithItsTokens) {
  const auto data = MakeDataSource(DataConfig{.task = "s2s_duplicate"});
  ASSERT_NE(data->pairs(), nullptr);
  EXPECT_EQ(data->default_arch(), model::Arch::kSeq2seq);
  EXPECT_EQ(data->vocab_size(), tasks::kPairSymbols + 2);
  EXPECT_EQ(data->pairs()->tokens().eos, tasks::kPairSymbols + 1);
  // The longer side: BOS + 2n target tokens.
  EXPECT_EQ(data->SequenceLength(5), 11);
  EXPECT_EQ(MakeDataSource(DataConfig{.task = "reverse"})->pairs(), nullptr);
  const std::vector<std::string> names = DataTaskNames();
  for (const std::string& n : tasks::PairTaskNames()) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

// Sources and decoder sequences are padded to their own longest; every
// example is the teacher-forced pair; the same Rng state gives the same
// batch.
TEST(PairData, BatchesPadSourcesAndTargetsApart) {
  const auto data = MakeDataSource(DataConfig{.task = "s2s_duplicate"});
  const tasks::PairTokens tok = data->pairs()->tokens();
  Rng rng(3), rng2(3);
  const model::Batch b = MakeTrainBatch(*data, 12, 2, 7, rng);
  ASSERT_EQ(b.batch, 12);
  int64_t longest_source = 0, longest = 0;
  for (int64_t i = 0; i < b.batch; ++i) {
    const int64_t n = b.source_lengths[i], m = b.lengths[i];
    EXPECT_TRUE(n >= 2 && n <= 7);
    EXPECT_EQ(m, 2 * n + 1);  // BOS + x x
    EXPECT_EQ(b.tokens[i * b.length], tok.bos);
    EXPECT_EQ(b.targets[i * b.length + m - 1], tok.eos);
    for (int64_t j = 0; j < n; ++j) {
      // The first half of the target is the source.
      EXPECT_EQ(b.targets[i * b.length + j],
                b.source_tokens[i * b.source_length + j]);
    }
    for (int64_t p = m; p < b.length; ++p) {
      EXPECT_EQ(b.targets[i * b.length + p], -1);
    }
    longest_source = std::max(longest_source, n);
    longest = std::max(longest, m);
  }
  EXPECT_EQ(b.source_length, longest_source);
  EXPECT_EQ(b.length, longest);
  const model::Batch b2 = MakeTrainBatch(*data, 12, 2, 7, rng2);
  EXPECT_EQ(b.source_tokens, b2.source_tokens);
  EXPECT_EQ(b.tokens, b2.tokens);
  // Fixed-length batches (evaluation): every source of that length.
  const model::Batch f = MakeFixedBatch(*data, 4, 5, true, rng);
  EXPECT_EQ(f.source_length, 5);
  for (int64_t n : f.source_lengths) EXPECT_EQ(n, 5);
}

TEST(PairData, ArchitectureMustMatchTheData) {
  model::ModelConfig enc = SmallSeq2seq(PositionScheme::kShaw);
  enc.arch = model::Arch::kEncoder;
  try {
    Trainer t(enc, SmallTrain("s2s_copy", 1));
    ADD_FAILURE() << "an encoder trained on pairs";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs arch seq2seq"),
              std::string::npos)
        << e.what();
  }
  try {
    Trainer t(SmallSeq2seq(PositionScheme::kShaw), SmallTrain("reverse", 1));
    ADD_FAILURE() << "a seq2seq model trained on a formal task";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("source-target task"),
              std::string::npos)
        << e.what();
  }
}

// End to end: a small Shaw-position seq2seq model learns to copy within a
// few hundred steps (chance is 1/10 per token), the step losses fall, and
// evaluation runs by source length.
TEST(Seq2seqTrainer, TinyRunLearnsToCopy) {
  Trainer t(SmallSeq2seq(PositionScheme::kShaw), SmallTrain("s2s_copy", 300));
  EXPECT_EQ(t.model().label_smoothing(), kSeq2seqLabelSmoothing);
  const RunResult r = t.Run(RunOptions{});
  EXPECT_TRUE(r.completed);
  EXPECT_LT(r.final_loss, 0.5 * r.steps.front().loss);
  EvalConfig ec{.lengths = {4, 8}, .sequences_per_length = 32,
                .batch_size = 32};
  const auto res = EvaluateByLength(t.model(), t.data(), ec);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].sequence_length, 5);
  EXPECT_EQ(res[0].tokens, 32 * 5);  // each target and its EOS
  EXPECT_GE(res[0].token_accuracy, 0.9) << "loss " << r.final_loss;
  EXPECT_GE(res[1].token_accuracy, 0.8);
}

// Stop after 4 updates, resume, finish: the later losses, the final
// parameters and the optimiser state equal the uninterrupted run's, bit for
// bit, with dropout and label smoothing on.
TEST(Seq2seqTrainer, ResumeContinuesBitwise) {
  model::ModelConfig m = SmallSeq2seq(PositionScheme::kT5);
  m.dropout = 0.1;
  m.decoder_layers = 1;
  TrainConfig tc = SmallTrain("s2s_difference", 9);
  tc.checkpoint_every = 3;
  const std::string full = TempDir("full"), part = TempDir("part");
  Trainer a(m, tc);
  RunOptions oa;
  oa.checkpoint_dir = full;
  const RunResult ra = a.Run(oa);
  Trainer b(m, tc);
  RunOptions ob;
  ob.checkpoint_dir = part;
  ob.stop_at_step = 4;
  b.Run(ob);
  Trainer c = Trainer::Resume(part);
  EXPECT_EQ(c.model().label_smoothing(), kSeq2seqLabelSmoothing);
  EXPECT_EQ(c.model_config().decoder_layers, 1);
  RunOptions oc;
  oc.checkpoint_dir = part;
  const RunResult rc = c.Run(oc);
  ASSERT_EQ(rc.steps.size(), 5u);
  for (size_t i = 0; i < rc.steps.size(); ++i) {
    EXPECT_EQ(rc.steps[i].loss, ra.steps[4 + i].loss) << "step " << 4 + i;
  }
  const Checkpoint x = ReadCheckpoint(full, true, true),
                   y = ReadCheckpoint(part, true, true);
  testing::ExpectSameTensors(x, y);
  EXPECT_EQ(x.signal, y.signal);
  EXPECT_EQ(x.train_config.label_smoothing, kSeq2seqLabelSmoothing);
}

// Every scheme: a few steps, a save, and the loaded model evaluates exactly
// like the trained one.
TEST(Seq2seqCheckpoint, EverySchemeSavesLoadsAndEvaluatesIdentically) {
  for (PositionScheme p :
       {PositionScheme::kNone, PositionScheme::kSinusoidal,
        PositionScheme::kLearned, PositionScheme::kShaw,
        PositionScheme::kShawAsym, PositionScheme::kShawLog,
        PositionScheme::kT5, PositionScheme::kAlibi, PositionScheme::kRope,
        PositionScheme::kXl}) {
    SCOPED_TRACE(model::ToString(p));
    const std::string dir = TempDir("scheme_" + model::ToString(p));
    Trainer t(SmallSeq2seq(p), SmallTrain("s2s_reverse", 4));
    RunOptions o;
    o.checkpoint_dir = dir;
    t.Run(o);
    testing::ExpectLoadsAndEvaluatesIdentically(t, dir, {3, 9});
  }
}

// The tables of each side, under their stack's names and bucket maps; an
// update counts the encoder's pairs over the sources (bidirectional) and
// the decoder's over the targets (causal).
TEST(Seq2seqSignal, TablesPerSideCountTheirOwnPairs) {
  model::ModelConfig m = SmallSeq2seq(PositionScheme::kShawLog);
  m.vocab_size = tasks::kPairSymbols + 2;
  m.decoder_layers = 1;
  const std::vector<RelativeTable> tables = RelativeTables(m);
  ASSERT_EQ(tables.size(), 2u * 2 + 2u * 1);
  EXPECT_EQ(tables[0].parameter, "encoder.blocks.0.attn.rel_k");
  EXPECT_TRUE(tables[0].source);
  EXPECT_FALSE(tables[0].causal);
  EXPECT_EQ(tables[4].parameter, "decoder.blocks.0.attn.rel_k");
  EXPECT_FALSE(tables[4].source);
  EXPECT_TRUE(tables[4].causal);
  EXPECT_NE(tables[0].map.description, tables[4].map.description);
  const model::Transformer reference(m);
  for (const RelativeTable& t : tables) {
    EXPECT_GE(reference.FindParameter(t.parameter), 0) << t.parameter;
  }
  Trainer tr(m, SmallTrain("s2s_duplicate", 1));
  tr.Run(RunOptions{});
  const SignalStats& s = tr.signal();
  ASSERT_EQ(s.tables.size(), tables.size());
  // Recompute the batch of step 0 and its pair counts.
  Rng data_rng(base::DeriveSeed(5, 2));
  const model::Batch b = MakeTrainBatch(tr.data(), 16, 2, 8, data_rng);
  std::vector<int64_t> enc, dec;
  AddPairCounts(b.source_lengths, false, tables[0].map, &enc);
  AddPairCounts(b.lengths, true, tables[4].map, &dec);
  EXPECT_EQ(s.tables[0].pair_count, enc);
  EXPECT_EQ(s.tables[4].pair_count, dec);
}

}  // namespace
}  // namespace relpos::train
