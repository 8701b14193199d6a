// SIGINT / SIGTERM during training: the first signal sets a flag that the
// training loop polls after every step (it then writes a checkpoint and
// returns); the caller re-raises the signal once it has finished, so the
// process still ends "killed by SIGINT" (exit status 130 in a shell) as Unix
// tools should. A second signal while the first is being handled falls
// through to the default action (immediate exit): the atomic checkpoint
// protocol keeps the previous checkpoint intact even then.
#ifndef RELPOS_SRC_CLI_SIGNALS_H_
#define RELPOS_SRC_CLI_SIGNALS_H_

#include <csignal>

namespace relpos::cli {

class ScopedStopSignals {
 public:
  // Installs the handlers (and resets the flag); the destructor restores the
  // previous handlers. Only one instance may be alive at a time.
  ScopedStopSignals();
  ~ScopedStopSignals();
  ScopedStopSignals(const ScopedStopSignals&) = delete;
  ScopedStopSignals& operator=(const ScopedStopSignals&) = delete;

  // Nonzero once a signal arrived: the signal number.
  const volatile std::sig_atomic_t* flag() const;
  int signal_number() const;

  // Restores the previous handlers and raises the received signal again
  // (no-op when none arrived).
  void Reraise();

 private:
  struct sigaction old_int_, old_term_;
  bool restored_ = false;
};

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_SIGNALS_H_
