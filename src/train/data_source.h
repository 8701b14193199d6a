// Where training and evaluation examples come from: a synthetic sequence
// task (src/data/tasks/task.h), byte-level language modelling on a text corpus
// (src/data/tasks/text_corpus.h), or source-target pairs for a seq2seq model
// (src/data/tasks/pair_source.h: the synthetic s2s_* tasks, or any other
// PairSource through MakePairDataSource), behind one DataSource interface.
#ifndef RELPOS_SRC_TRAIN_DATA_SOURCE_H_
#define RELPOS_SRC_TRAIN_DATA_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/transformer.h"
#include "data/tasks/pair_source.h"
#include "data/tasks/task.h"

namespace relpos::train {

// Largest size parameter accepted for any data: far beyond anything a small
// model can process, small enough that a typo cannot request gigabytes.
inline constexpr int64_t kMaxTaskSize = int64_t{1} << 16;

// The name of the byte-level language-modelling "task".
inline constexpr const char* kLanguageModelTask = "lm";

struct DataConfig {
  std::string task = "local_difference";  // a tasks::TaskNames() name or "lm"
  // Task "lm" only: a text file or a directory (walked recursively for files
  // matching `corpus_pattern`, at most `corpus_max_bytes` read; see
  // tasks::TextCorpus::FromPath); empty = relpos's generated text with
  // `corpus_seed` and `corpus_bytes`.
  std::string corpus_path;
  std::string corpus_pattern = "*";
  int64_t corpus_max_bytes = int64_t{64} << 20;
  uint64_t corpus_seed = 0;
  int64_t corpus_bytes = int64_t{1} << 20;
  // Task "translate" (translate/translation_task.h): corpus_path is a locale
  // tree, a folder of .mo / .po files or a TSV file (empty:
  // /usr/share/locale); the languages; the SentencePiece vocabulary's size.
  std::string src_lang = "en", tgt_lang = "de";
  int32_t sentencepiece_size = 8000;
  // Task "translate": the SentencePiece model's bytes, not a setting (not in
  // the JSON): a checkpoint stores them as the file sentencepiece.model.
  // Empty: the vocabulary is trained on the training split.
  std::string vocabulary;
};

// Every accepted task name: tasks::TaskNames(), tasks::PairTaskNames() and
// "lm", sorted.
std::vector<std::string> DataTaskNames();

// Examples for training and evaluation, whatever their origin.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string name() const = 0;
  virtual int32_t vocab_size() const = 0;
  // The architecture this data needs by default: the formal tasks read
  // answers at blank positions after the input (bidirectional encoder);
  // language modelling predicts the next byte (causal decoder); pairs map a
  // source to a target (seq2seq, the only architecture they take).
  virtual model::Arch default_arch() const = 0;
  // Smallest and largest accepted size parameter `length`.
  virtual int64_t min_length() const = 0;
  virtual int64_t max_length() const = 0;
  // Tokens in an example of size `length` (tasks: input + blanks; pairs:
  // the longer of the source and the decoder's BOS + target, what a learned
  // position table must cover).
  virtual int64_t SequenceLength(int64_t length) const = 0;
  // One example; `held_out` selects the evaluation split where the data has
  // one (the corpus's last 10%); tasks draw from the same distribution, the
  // evaluation stream is kept apart by its seed.
  virtual tasks::Example Sample(int64_t length, bool held_out,
                                Rng& rng) const = 0;
  // One training example of a size in [min_length, max_length]: by default
  // a size drawn uniformly, then Sample(size, held_out = false); pair data
  // follows its PairSource (a corpus draws from its own distribution).
  virtual tasks::Example SampleTrain(int64_t min_length, int64_t max_length,
                                     Rng& rng) const;
  // The pairs behind a seq2seq data source (their special tokens, the
  // decoding lengths a source may need); null for the other data.
  virtual const tasks::PairSource* pairs() const { return nullptr; }
  // Task "translate": the vocabulary's serialised SentencePiece model, which
  // a checkpoint stores; empty for the other data.
  virtual std::string vocabulary() const { return {}; }
  // "per-token accuracy over output positions" or "next-byte accuracy".
  virtual std::string metric_description() const = 0;
  // Where the examples come from: the task's name, or the corpus's summary
  // (path, files read, split sizes).
  virtual std::string source_description() const { return name(); }
};

// InvalidArgument for an unknown task; IoError/FormatError for a bad corpus.
std::unique_ptr<DataSource> MakeDataSource(const DataConfig& config);

// A seq2seq DataSource over `pairs` (examples: tasks::TeacherForced). What
// MakeDataSource builds for the s2s_* tasks; a translation corpus plugs in
// the same way.
std::unique_ptr<DataSource> MakePairDataSource(
    std::unique_ptr<tasks::PairSource> pairs);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_DATA_SOURCE_H_
