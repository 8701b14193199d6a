#include "cli/signals.h"

#include <signal.h>

#include <algorithm>
#include <vector>

namespace relpos::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void OnStopSignal(int sig) {
  g_stop_signal = sig;
  // Second signal: default action. SA_RESETHAND already did that for this
  // signal; do it for the other one too (async-signal-safe: signal()).
  std::signal(sig == SIGINT ? SIGTERM : SIGINT, SIG_DFL);
}

// The handler runs on its own stack (per thread: the one that installs the
// handlers, which is the one that trains when threads = 1), so the signal
// frame is not pushed onto the interrupted code's stack. Without it, SIGTERM
// during oneDNN's JIT sgemm sometimes corrupted the heap (glibc: "corrupted
// size vs. prev_size"); presumably the JIT code keeps data below its stack
// pointer, where the operating system would otherwise write the frame.
void UseAlternateSignalStack() {
  static thread_local std::vector<char> stack;
  if (!stack.empty()) return;
  stack.resize(std::max<size_t>(SIGSTKSZ, 64 * 1024));
  stack_t ss {};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
}

}  // namespace

ScopedStopSignals::ScopedStopSignals() {
  g_stop_signal = 0;
  UseAlternateSignalStack();
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  // One-shot: a second Ctrl-C kills at once.
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

ScopedStopSignals::~ScopedStopSignals() {
  if (!restored_) {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
}

const volatile std::sig_atomic_t* ScopedStopSignals::flag() const {
  return &g_stop_signal;
}

int ScopedStopSignals::signal_number() const { return g_stop_signal; }

void ScopedStopSignals::Reraise() {
  const int sig = g_stop_signal;
  if (sig == 0) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  restored_ = true;
  // If the caller's previous disposition was to ignore it, raise() is a
  // no-op and the caller simply returns.
  std::raise(sig);
}

}  // namespace relpos::cli
