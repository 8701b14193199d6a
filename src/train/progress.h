// Progress reporting for long operations (training, evaluation, the demo).
//
// On a terminal: one line redrawn in place with '\r' (bar, step/total,
// elapsed, ETA, loss, tokens/s). Otherwise (a log file, a pipe, CI): plain
// lines, one every `log_interval_s` seconds of wall time plus one at the end,
// so logs stay short and readable.
#ifndef RELPOS_SRC_TRAIN_PROGRESS_H_
#define RELPOS_SRC_TRAIN_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace relpos::train {

enum class ProgressMode { kAuto, kTerminal, kLines, kQuiet };

// Formats seconds as "12s", "3m05s", "1h02m".
std::string FormatDuration(double seconds);
// 12345 -> "12.3k", 1234567 -> "1.23M".
std::string FormatRate(double per_second);

class Progress {
 public:
  // `label` prefixes every line ("train relative"); `total` units of work.
  // kAuto picks kTerminal when `out` is std::cerr/std::cout attached to a
  // TTY (isatty) and kLines otherwise.
  Progress(std::ostream& out, std::string label, int64_t total,
           ProgressMode mode = ProgressMode::kAuto,
           double log_interval_s = 5.0);
  ~Progress();

  // Reports that `done` units are finished. `loss` < 0 or NaN-free optional:
  // pass a negative value to leave it out. `tokens` = tokens processed since
  // the start (for tokens/s; 0 leaves it out).
  void Update(int64_t done, double loss = -1.0, int64_t tokens = 0);
  // Units already done when this run started (a resumed training run): the
  // ETA comes from the rate of the units done since then.
  void SetStart(int64_t done) { start_done_ = done; }
  // Text appended to every line from now on (a training run's latest
  // held-out evaluation); in kLines mode a line with it is printed at once.
  void Note(std::string note);
  // Prints the final line (and a newline on a terminal). Idempotent.
  void Finish();

  double ElapsedSeconds() const;
  ProgressMode mode() const { return mode_; }
  // The line Update would print now (exposed for tests).
  std::string Line(int64_t done, double loss, int64_t tokens, double elapsed_s,
                   bool with_bar) const;

 private:
  std::ostream& out_;
  std::string label_;
  int64_t total_;
  ProgressMode mode_;
  double log_interval_s_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = -1e9;
  int64_t start_done_ = 0;
  int64_t done_ = 0;
  double loss_ = -1.0;
  int64_t tokens_ = 0;
  std::string note_;
  size_t last_width_ = 0;
  bool finished_ = false;
};

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_PROGRESS_H_
