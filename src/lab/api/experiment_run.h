// What RunExperiment (experiment.h) and RunCompare (compare.h) share: one
// run trained, evaluated and inspected, the memory check made before any
// run starts, and the output folder of a call. Shared by the files of
// src/lab/api/ only.
#ifndef RELPOS_SRC_LAB_API_EXPERIMENT_RUN_H_
#define RELPOS_SRC_LAB_API_EXPERIMENT_RUN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/io/file_io.h"
#include "relpos/lab/config.h"
#include "relpos/lab/experiment.h"
#include "relpos/lab/training.h"

namespace relpos {

inline bool IsTranslateTask(const std::string& task) {
  return task == "translate";
}

// ResourceError naming `what` unless training `config` (resolved) and
// evaluating it at `longest` (a task size parameter) with batches of
// min(64, sequences) fit in memory.
void CheckRunFits(const ExperimentConfig& config, int64_t longest,
                  int64_t sequences, const std::string& what);

// How a run is evaluated after training.
struct RunEvaluation {
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 128;
  int64_t batch_size = 64;
  int threads = 0;
  ProgressOptions progress;  // out == nullptr: none
  bool inspect = false;      // fill untrained_row_share
};

// Trains `config` (resolved) with `train`, then evaluates it: by length
// (Evaluate) or, for task translate, by EvaluateTranslation's source-word
// buckets ending at the lengths (BLEU and chrF; a bucket without a held-out
// pair has sequences 0). Fills everything of *out but name, checkpoint and
// settings; false (and *out untouched) when training did not complete.
bool TrainAndEvaluate(const ExperimentConfig& config, const TrainOptions& train,
                      const RunEvaluation& eval, ExperimentRunResult* out);

// The output folder of a call: created if missing, locked for the call (one
// writer per folder), the temporary files of killed writes of `owned`
// targets removed; if this call created it and Keep() was never called,
// removed again (when empty).
class OutFolder {
 public:
  OutFolder(const std::string& dir,
            const std::function<bool(const std::string&)>& owned);
  ~OutFolder();
  OutFolder(const OutFolder&) = delete;
  OutFolder& operator=(const OutFolder&) = delete;
  void Keep() { kept_ = true; }

 private:
  std::string dir_;
  bool created_ = false, kept_ = false;
  io::FolderLock lock_;
};

}  // namespace relpos

#endif  // RELPOS_SRC_LAB_API_EXPERIMENT_RUN_H_
