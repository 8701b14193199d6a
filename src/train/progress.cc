#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace relpos::train {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds",
                  static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm",
                  static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buf;
}

std::string FormatRate(double r) {
  char buf[32];
  if (!std::isfinite(r) || r < 0) return "?";
  if (r < 1e3) {
    std::snprintf(buf, sizeof buf, "%.0f", r);
  } else if (r < 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2fM", r / 1e6);
  }
  return buf;
}

namespace {

ProgressMode ResolveMode(std::ostream& out, ProgressMode mode) {
  if (mode != ProgressMode::kAuto) return mode;
  int fd = -1;
  if (&out == &std::cerr || &out == &std::clog) fd = STDERR_FILENO;
  if (&out == &std::cout) fd = STDOUT_FILENO;
  return fd >= 0 && isatty(fd) ? ProgressMode::kTerminal : ProgressMode::kLines;
}

}  // namespace

Progress::Progress(std::ostream& out, std::string label, int64_t total,
                   ProgressMode mode, double log_interval_s)
    : out_(out),
      label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      mode_(ResolveMode(out, mode)),
      log_interval_s_(log_interval_s),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  // A bar left half-drawn would glue the next message onto it.
  if (mode_ == ProgressMode::kTerminal && !finished_ && last_width_ > 0) {
    out_ << "\n" << std::flush;
  }
}

double Progress::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start_)
      .count();
}

std::string Progress::Line(int64_t done, double loss, int64_t tokens,
                           double elapsed_s, bool with_bar) const {
  const double frac = std::clamp(
      static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  std::string line = label_ + " ";
  if (with_bar) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(frac * kWidth);
    // Appended piece by piece: GCC 12's -Wrestrict misfires on
    // `"literal" + std::string&&` (GCC bug 105329).
    line += '[';
    line.append(filled, '#');
    line.append(kWidth - filled, '.');
    line += "] ";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld/%lld (%3.0f%%)",
                static_cast<long long>(done), static_cast<long long>(total_),
                100.0 * frac);
  line += buf;
  line += " elapsed ";
  line += FormatDuration(elapsed_s);
  // ETA from the average rate so far (of the units this run did): simple,
  // and steady once warmed up.
  const int64_t run = done - start_done_;
  const double eta = run > 0 ? elapsed_s * static_cast<double>(total_ - done) /
                                   static_cast<double>(run)
                             : NAN;
  line += " eta ";
  line += done >= total_ ? std::string("0s") : FormatDuration(eta);
  if (loss >= 0.0 || std::isnan(loss)) {
    std::snprintf(buf, sizeof buf, " loss %.4f", loss);
    line += buf;
  }
  if (tokens > 0 && elapsed_s > 0) {
    line += ' ';
    line += FormatRate(static_cast<double>(tokens) / elapsed_s);
    line += " tok/s";
  }
  if (!note_.empty()) {
    line += "; ";
    line += note_;
  }
  return line;
}

void Progress::Note(std::string note) {
  note_ = std::move(note);
  if (mode_ != ProgressMode::kLines || finished_) return;
  const double now = ElapsedSeconds();
  last_print_s_ = now;
  out_ << Line(done_, loss_, tokens_, now, false) << "\n" << std::flush;
}

void Progress::Update(int64_t done, double loss, int64_t tokens) {
  done_ = done;
  loss_ = loss;
  tokens_ = tokens;
  if (mode_ == ProgressMode::kQuiet) return;
  const double now = ElapsedSeconds();
  if (mode_ == ProgressMode::kTerminal) {
    // Redraw at most ~10 times a second: terminals are slow.
    if (now - last_print_s_ < 0.1 && done < total_) return;
    last_print_s_ = now;
    std::string line = Line(done, loss, tokens, now, true);
    const size_t width = line.size();
    if (width < last_width_) line += std::string(last_width_ - width, ' ');
    last_width_ = width;
    out_ << "\r" << line << std::flush;
    return;
  }
  if (now - last_print_s_ < log_interval_s_) return;
  last_print_s_ = now;
  out_ << Line(done, loss, tokens, now, false) << "\n" << std::flush;
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::kQuiet) return;
  const std::string line = Line(done_, loss_, tokens_, ElapsedSeconds(),
                                mode_ == ProgressMode::kTerminal);
  if (mode_ == ProgressMode::kTerminal) {
    std::string padded = line;
    if (padded.size() < last_width_)
      padded += std::string(last_width_ - padded.size(), ' ');
    out_ << "\r" << padded << "\n" << std::flush;
  } else {
    out_ << line << "\n" << std::flush;
  }
}

}  // namespace relpos::train
