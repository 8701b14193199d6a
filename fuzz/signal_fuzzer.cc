// libFuzzer target for the signal file reader (DecodeSignalStats in
// src/train/signal_stats.h), which reads signal-*.json from untrusted
// checkpoints for `relpos inspect`. The layout is fixed here (two tables,
// one with per-head signals), as a checkpoint's config would give it.
// Contract checked here:
//   - DecodeSignalStats either returns or throws relpos::Error (FormatError);
//     anything else, a crash, a sanitizer report or out-of-memory is a bug;
//   - what it accepts has the layout's tables, rows and heads, non-negative
//     counts and finite non-negative signals, and survives
//     EncodeSignalStats -> DecodeSignalStats bit for bit.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "relpos/error.h"
#include "train/signal_stats.h"

namespace {

using relpos::train::SignalStats;
using relpos::train::TableSignal;

constexpr int64_t kStep = 7;

SignalStats Layout() {
  SignalStats s;
  TableSignal a;
  a.parameter = "blocks.0.attn.rel_k";
  a.rows = 5;
  a.pair_count.assign(5, 0);
  a.signal.assign(5, 0.0);
  TableSignal b;
  b.parameter = "blocks.1.attn.t5_bias";
  b.heads = 2;
  b.rows = 3;
  b.pair_count.assign(3, 0);
  b.signal.assign(3, 0.0);
  b.signal_per_head.assign(6, 0.0);
  s.tables = {a, b};
  return s;
}

void Check(const SignalStats& got, const SignalStats& layout) {
  if (got.tables.size() != layout.tables.size()) __builtin_trap();
  if (got.first_step < 0 || got.steps < 0) __builtin_trap();
  for (size_t i = 0; i < got.tables.size(); ++i) {
    const TableSignal& t = got.tables[i];
    const TableSignal& want = layout.tables[i];
    if (t.parameter != want.parameter || t.rows != want.rows ||
        t.heads != want.heads ||
        t.pair_count.size() != static_cast<size_t>(t.rows) ||
        t.signal.size() != static_cast<size_t>(t.rows)) {
      __builtin_trap();
    }
    for (int64_t c : t.pair_count) {
      if (c < 0) __builtin_trap();
    }
    for (const auto* v : {&t.signal, &t.signal_per_head}) {
      for (double x : *v) {
        if (!std::isfinite(x) || x < 0) __builtin_trap();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const SignalStats layout = Layout();
  const std::string text(reinterpret_cast<const char*>(data), size);
  SignalStats got;
  try {
    got = relpos::train::DecodeSignalStats(text, "fuzz.json", layout, kStep);
  } catch (const relpos::Error&) {
    return 0;  // rejected cleanly
  }
  Check(got, layout);
  // Accepted: the round trip must be exact (not caught: a throw is a bug).
  const std::string again = relpos::train::EncodeSignalStats(got, kStep);
  if (!(relpos::train::DecodeSignalStats(again, "again.json", layout, kStep) ==
        got)) {
    __builtin_trap();
  }
  return 0;
}
