// Task translate end to end on a tiny generated TSV corpus: `relpos train
// --task translate`, `relpos eval` (BLEU / chrF per source-length bucket),
// `relpos translate`, bad input, and resume with the vocabulary stored in the
// checkpoint (sentencepiece.model).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "relpos/lab/config.h"
#include "relpos/data/metrics.h"
#include "relpos/lab/training.h"
#include "relpos/lab/translation.h"
#include "support/gettext_files.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

using testing::ToyCorpus;

class VerbTranslateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_verb_translate_test_" + std::to_string(::getpid()) +
             "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    Write("toy.tsv", ToyCorpus(1, 300));
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string P(const std::string& name) const {
    return (root_ / name).string();
  }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(root_ / name, std::ios::binary) << text;
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(root_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // A model that trains in about two seconds: sources of 1-4 words (one
  // clause) inside the training lengths, 9 and 14 words (two and three
  // clauses) beyond.
  std::vector<std::string> Tiny(const std::string& out) const {
    return {"train", "--task", "translate", "--corpus", P("toy.tsv"),
            "--sentencepiece-size", "48", "--train-lengths", "1-4",
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff",
            "64", "--batch-size", "16", "--steps", "200", "--lr", "3e-3",
            "--progress",
            "none", "--out", P(out)};
  }
  // Runs a command that must fail: exit 2, one line on stderr, no output.
  void ExpectBad(const std::vector<std::string>& args,
                 const std::string& needle) {
    const CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, 2) << Joined(args) << r.err;
    EXPECT_EQ(r.out, "") << Joined(args);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  fs::path root_;
};

TEST_F(VerbTranslateTest, TrainsEvaluatesAndTranslates) {
  // The corpus counts and the vocabulary are printed (on the process's
  // stderr, with the run's header); arch seq2seq is the default for task
  // translate.
  ::testing::internal::CaptureStderr();
  const CliResult t = RunRelpos(Tiny("ck"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(err.find("train: task translate, seq2seq"), std::string::npos)
      << err;
  EXPECT_NE(err.find("300 lines"), std::string::npos) << err;
  EXPECT_NE(err.find("(split by message)"), std::string::npos) << err;
  EXPECT_NE(err.find("SentencePiece vocabulary: 48 pieces (trained on the "
                     "training split)"),
            std::string::npos)
      << err;
  ASSERT_TRUE(fs::exists(root_ / "ck" / kSentencePieceFile));
  // The stored bytes are the vocabulary's: Load reads them back and the
  // model's ids cover exactly its pieces.
  const nlohmann::json config =
      nlohmann::json::parse(Read("ck/config.json"));
  EXPECT_EQ(config["files"]["vocabulary"], kSentencePieceFile);
  EXPECT_EQ(config["model"]["vocab_size"], 48);

  // eval: the buckets inside and beyond the training lengths, whose scores
  // are sacrebleu's corpus BLEU / chrF of the translations.
  const CliResult e = RunRelpos({"eval", P("ck"), "--progress", "none"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("1-4 (inside)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("9-16 (beyond)"), std::string::npos) << e.out;
  const CliResult j =
      RunRelpos({"eval", P("ck"), "--json", "--beam", "2", "--progress",
                 "none"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json ej = nlohmann::json::parse(j.out);
  EXPECT_EQ(ej["beam"], 2);
  const auto& scores = ej["scores"];
  ASSERT_GE(scores.size(), 3u);
  EXPECT_EQ(scores[0]["bucket"], "all");
  int64_t in_buckets = 0;
  for (size_t i = 1; i < scores.size(); ++i)
    in_buckets += scores[i]["sentences"].get<int64_t>();
  EXPECT_EQ(in_buckets, scores[0]["sentences"].get<int64_t>());
  EXPECT_EQ(scores[0]["sentences"], ej["sentences"]);

  Model model = Model::Load(P("ck"));
  TranslationEvalOptions options;
  options.decode.beam_size = 2;
  const TranslationEvalResult r = EvaluateTranslation(model, options);
  // It learnt something (inside the training lengths, the toy language is
  // easy), so the scores below are not trivially zero.
  ASSERT_GT(r.scores[0].bleu, 1.0);
  EXPECT_GT(r.scores[1].chrf, r.scores[2].chrf);
  EXPECT_DOUBLE_EQ(r.scores[0].bleu,
                   CorpusBleu(r.hypotheses, r.references).score);
  EXPECT_DOUBLE_EQ(r.scores[0].chrf, CorpusChrf(r.hypotheses, r.references));
  EXPECT_DOUBLE_EQ(r.scores[0].bleu, scores[0]["bleu"].get<double>());

  // translate: one line out per line in, the same text as the library's
  // Translator; --json has the tokens and scores.
  Write("in.txt", "open the red file\nclose the big list and save the old "
                  "key\n  find   the new page \n");
  const CliResult o = RunRelpos({"translate", P("ck"), "--input", P("in.txt"),
                                 "--beam", "3", "--batch-size", "2"});
  ASSERT_EQ(o.code, 0) << o.err;
  Translator translator = Translator::Load(P("ck"));
  DecodeOptions d;
  d.beam_size = 3;
  const std::vector<TextTranslation> want = translator.Translate(
      {"open the red file", "close the big list and save the old key",
       "find the new page"},
      d);
  std::string expected;
  for (const auto& w : want) expected += w.text + "\n";
  EXPECT_EQ(o.out, expected);
  // --threads changes the thread count, not the translations.
  for (const char* threads : {"1", "2"}) {
    const CliResult ot =
        RunRelpos({"translate", P("ck"), "--input", P("in.txt"), "--beam", "3",
                   "--threads", threads});
    ASSERT_EQ(ot.code, 0) << ot.err;
    EXPECT_EQ(ot.out, expected) << "--threads " << threads;
  }
  const CliResult oj = RunRelpos(
      {"translate", P("ck"), "--input", P("in.txt"), "--json", "--beam", "3"});
  ASSERT_EQ(oj.code, 0) << oj.err;
  std::istringstream lines(oj.out);
  std::string line;
  size_t n = 0;
  for (; std::getline(lines, line); ++n) {
    const nlohmann::json x = nlohmann::json::parse(line);
    EXPECT_EQ(x["line"], n + 1);
    EXPECT_EQ(x["translation"], want[n].text);
    EXPECT_EQ(x["tokens"].get<std::vector<int32_t>>(), want[n].best.tokens);
    EXPECT_DOUBLE_EQ(x["score"].get<double>(), want[n].best.score);
    EXPECT_GE(x["batch_seconds"].get<double>(), 0.0);
  }
  EXPECT_EQ(n, 3u);

  // --max-length caps every translation at that many pieces, as
  // DecodeOptions::max_length does.
  DecodeOptions d2 = d;
  d2.max_length = 2;
  const std::vector<TextTranslation> want2 = translator.Translate(
      {"open the red file", "close the big list and save the old key",
       "find the new page"},
      d2);
  const CliResult o2 =
      RunRelpos({"translate", P("ck"), "--input", P("in.txt"), "--json",
                 "--beam", "3", "--max-length", "2"});
  ASSERT_EQ(o2.code, 0) << o2.err;
  std::istringstream lines2(o2.out);
  for (size_t i = 0; i < want2.size(); ++i) {
    ASSERT_TRUE(std::getline(lines2, line));
    const auto tokens =
        nlohmann::json::parse(line)["tokens"].get<std::vector<int32_t>>();
    EXPECT_LE(tokens.size(), 2u);
    EXPECT_EQ(tokens, want2[i].best.tokens);
  }
  ExpectBad({"translate", P("ck"), "--input", P("in.txt"), "--max-length",
             "0"},
            "--max-length");

  // --compute-type int8 (and int8_a8, 8-bit activations): the library's
  // int8 translations, the same for any thread count; eval scores them
  // (BLEU close to float32's on this easy toy language; the deltas on the
  // catalogs are in docs/benchmarks.md).
  for (const std::string type : {"int8", "int8_a8"}) {
    SCOPED_TRACE(type);
    DecodeOptions d8 = d;
    d8.compute_type = type;
    const std::vector<TextTranslation> want8 = translator.Translate(
        {"open the red file", "close the big list and save the old key",
         "find the new page"},
        d8);
    std::string expected8;
    for (const auto& w : want8) expected8 += w.text + "\n";
    for (const char* threads : {"1", "2"}) {
      const CliResult o8 = RunRelpos({"translate", P("ck"), "--input",
                                      P("in.txt"), "--beam", "3",
                                      "--compute-type", type, "--threads",
                                      threads});
      ASSERT_EQ(o8.code, 0) << o8.err;
      EXPECT_EQ(o8.out, expected8) << "--threads " << threads;
    }
    const CliResult e8 =
        RunRelpos({"eval", P("ck"), "--json", "--beam", "2", "--progress",
                   "none", "--compute-type", type});
    ASSERT_EQ(e8.code, 0) << e8.err;
    const nlohmann::json ej8 = nlohmann::json::parse(e8.out);
    EXPECT_EQ(ej8["sentences"], ej["sentences"]);
    EXPECT_NEAR(ej8["scores"][0]["bleu"].get<double>(),
                scores[0]["bleu"].get<double>(), 5.0);
  }
  ExpectBad({"translate", P("ck"), "--input", P("in.txt"), "--compute-type",
             "bf16"},
            "--compute-type");
}

TEST_F(VerbTranslateTest, BadInputExitsTwoWithOneLine) {
  ASSERT_EQ(RunRelpos(Tiny("ck")).code, 0);
  const auto translate = [&](const std::string& text) {
    Write("in.txt", text);
    return std::vector<std::string>{"translate", P("ck"), "--input",
                                    P("in.txt")};
  };
  ExpectBad(translate("open the file\n\nclose it\n"), "line 2: the text is empty");
  ExpectBad(translate("open the file\n  \t \n"), "line 2: the text is empty");
  ExpectBad(translate("open \xff the file\n"), "line 1: the text is not UTF-8");
  ExpectBad(translate("open \x1b[31m file\n"), "control characters");
  ExpectBad(translate(std::string(5000, 'a') + "\n"),
            "more than a corpus pair has");
  ExpectBad(translate(""), "no line");
  ExpectBad({"translate", P("ck"), "--input", P("missing.txt")},
            "cannot open");
  ExpectBad({"translate", P("ck"), "--threads", "-1"}, "--threads");

  // A source longer than the model takes: learned positions with 24 rows.
  std::vector<std::string> learned = Tiny("learned");
  learned.insert(learned.end(), {"--position", "learned", "--max-len", "24"});
  ASSERT_EQ(RunRelpos(learned).code, 0);
  Write("long.txt", "open the red file and close the big list and save the "
                    "old key\n");
  ExpectBad({"translate", P("learned"), "--input", P("long.txt")},
            "more than the model takes (24)");

  // Checkpoints that cannot translate.
  Write("in.txt", "open the file\n");
  for (const auto& [task, lengths] :
       std::vector<std::pair<std::string, std::string>>{{"reverse", "1-4"},
                                                        {"lm", "8"}}) {
    ASSERT_EQ(RunRelpos({"train", "--task", task, "--train-lengths", lengths,
                         "--d-model", "16", "--heads", "2", "--layers", "1",
                         "--steps", "2", "--progress", "none", "--out",
                         P(task)})
                  .code,
              0);
    ExpectBad({"translate", P(task), "--input", P("in.txt")},
              "not a translation checkpoint: its task is '" + task + "'");
  }
  fs::copy(root_ / "ck", root_ / "novocab");
  fs::remove(root_ / "novocab" / kSentencePieceFile);
  ExpectBad({"translate", P("novocab"), "--input", P("in.txt")},
            kSentencePieceFile);
  ExpectBad({"eval", P("novocab")}, kSentencePieceFile);
  fs::copy(root_ / "ck", root_ / "badvocab");
  Write("badvocab/sentencepiece.model", "not a model");
  ExpectBad({"translate", P("badvocab"), "--input", P("in.txt")},
            kSentencePieceFile);
  // config.json without the vocabulary entry.
  fs::copy(root_ / "ck", root_ / "unreferenced");
  nlohmann::json c = nlohmann::json::parse(Read("unreferenced/config.json"));
  c["files"].erase("vocabulary");
  Write("unreferenced/config.json", c.dump());
  ExpectBad({"translate", P("unreferenced"), "--input", P("in.txt")},
            "without its vocabulary");
  // --lengths means nothing for a translation checkpoint.
  ExpectBad({"eval", P("ck"), "--lengths", "4"}, "drop --lengths");
}

// A run stopped and resumed ends bit for bit where the uninterrupted run
// does; the resumed run reads its vocabulary from sentencepiece.model (the
// data built in between, of another corpus, evicts the trained one).
TEST_F(VerbTranslateTest, ResumesBitExactWithTheStoredVocabulary) {
  ExperimentConfig c;
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"task", "translate"}, {"corpus_path", P("toy.tsv")},
           {"sentencepiece_size", "48"}, {"--train-lengths", "1-4"},
           {"steps", "30"}, {"batch_size", "8"}, {"checkpoint_every", "0"}}) {
    c.Set("train", k, v);
  }
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"d_model", "16"}, {"heads", "2"}, {"layers", "1"},
           {"d_ff", "32"}}) {
    c.Set("model", k, v);
  }
  Training whole(c);
  whole.Run({.checkpoint_dir = P("whole"), .progress = {}});
  {
    Training part(c);
    part.Run({.checkpoint_dir = P("part"), .progress = {},
              .stop_at_step = 12});
  }
  Write("other.tsv", ToyCorpus(2, 200));
  ExperimentConfig other = c;
  other.Set("train", "corpus_path", P("other.tsv"));
  (void)Model(other);
  Training resumed = Training::Resume(P("part"));
  EXPECT_EQ(resumed.step(), 12);
  EXPECT_NE(DescribeData(resumed.config()).source.find("from the checkpoint"),
            std::string::npos);
  resumed.Run({.checkpoint_dir = P("part"), .progress = {}});
  EXPECT_EQ(Read("part/sentencepiece.model"), Read("whole/sentencepiece.model"));
  EXPECT_EQ(Read("part/model-00000030.safetensors"),
            Read("whole/model-00000030.safetensors"));
  EXPECT_EQ(Read("part/optimizer-00000030.safetensors"),
            Read("whole/optimizer-00000030.safetensors"));
}

}  // namespace
}  // namespace relpos::cli
