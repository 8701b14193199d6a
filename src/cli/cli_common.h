// Shared plumbing of the relpos command line: how verbs register, how errors
// become exit codes. Every verb lives in its own verb_*.cc file.
#ifndef RELPOS_SRC_CLI_CLI_COMMON_H_
#define RELPOS_SRC_CLI_CLI_COMMON_H_

#include <cstdint>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "relpos/error.h"

// Throws relpos::InvalidArgument with a message built by operator<< unless
// `condition` holds (the library's own macro is internal).
#define RELPOS_CLI_CHECK(condition, message_stream)      \
  do {                                                   \
    if (!(condition)) {                                  \
      std::ostringstream relpos_cli_os_;                 \
      relpos_cli_os_ << message_stream;                  \
      throw ::relpos::InvalidArgument(relpos_cli_os_.str()); \
    }                                                    \
  } while (0)

namespace relpos::cli {

// Exit codes: 0 success; 1 an unexpected internal failure; 2 bad usage or bad
// input (unknown flag, out-of-range value, unreadable or corrupt file,
// unwritable output, a write error on stdout, a plan that does not fit in
// memory). Errors print exactly one line on stderr. A closed pipe on stdout
// (`relpos ... | head`) ends the process by SIGPIPE, as for any Unix filter
// (exit status 141 in a shell); with SIGPIPE ignored, the EPIPE write error
// is reported like any other (exit 2). docs/robustness.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUsage = 2;

// Each verb adds itself as a subcommand of `app`; its callback does the work
// and writes to `out`.
void AddParamsVerb(CLI::App& app, std::ostream& out);
void AddBenchVerb(CLI::App& app, std::ostream& out);
void AddTrainVerb(CLI::App& app, std::ostream& out);
void AddEvalVerb(CLI::App& app, std::ostream& out);
void AddDemoVerb(CLI::App& app, std::ostream& out);
void AddSweepVerb(CLI::App& app, std::ostream& out);
void AddCompareVerb(CLI::App& app, std::ostream& out);
void AddSettingsVerb(CLI::App& app, std::ostream& out);
void AddGenerateVerb(CLI::App& app, std::ostream& out);
void AddInspectVerb(CLI::App& app, std::ostream& out);
void AddTranslateVerb(CLI::App& app, std::ostream& out);

// Runs `fn`; an InvalidArgument about the library setting `setting` (its
// message starts with the setting's name) is reported under the flag that
// gave it: "steps 5 is below ..." -> "--steps 5 is below ...". A message
// that already names a flag ("--share ...", from an inner AsFlag) is kept.
template <typename Fn>
decltype(auto) AsFlag(const std::string& flag, const std::string& setting,
                      Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const InvalidArgument& e) {
    std::string message = MessageBody(e);
    if (message.rfind(setting, 0) == 0) {
      message.replace(0, setting.size(), flag);
    } else if (message.rfind("--", 0) != 0) {
      message = flag + ": " + message;
    }
    throw InvalidArgument(message);
  }
}

// The buffer of the binary's stdout: writes to file descriptor 1 with
// write(2) and remembers the errno of the first failed write (a stream only
// knows that it failed), so the error can say why: "No space left on
// device", "Broken pipe", "Bad file descriptor".
class StdoutBuffer : public std::streambuf {
 public:
  StdoutBuffer() { setp(buffer_, buffer_ + sizeof buffer_); }
  ~StdoutBuffer() override { sync(); }
  // errno of the first failed write; 0 if none failed.
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override;
  int sync() override;

 private:
  bool Drain();
  char buffer_[1 << 16];
  int error_ = 0;
};

// IoError "cannot write to standard output: <strerror>" unless everything
// written to `out` so far has been written (flushes it; the reason comes
// from its StdoutBuffer when it has one).
void CheckOutput(std::ostream& out);

// The lines of the file `path`, or of standard input for "-", for the
// option `flag` (named in errors): at most 64 MiB (so that a typo such as
// /dev/zero cannot fill memory), at least one line; IoError for a file
// that cannot be opened.
std::vector<std::string> ReadInputLines(const std::string& path,
                                        const std::string& flag);

// The command line's own text: lists, length ranges and durations in its
// messages and tables.
// "a,,b" -> {"a", "", "b"}.
std::vector<std::string> SplitList(const std::string& text, char sep = ',');
// "8-16", or "8" when lo == hi.
std::string FormatLengthRange(int64_t lo, int64_t hi);
// Sorted lengths as the spec that ParseLengths turns back into them:
// "8-16:2", "17-48:8" (the last length may be off the step, as in a
// spec), "4-8"; a comma list when they are not evenly spaced.
std::string LengthList(const std::vector<int64_t>& lengths);
// "12s", "3m05s", "1h02m"; "?" for a negative or non-finite time.
std::string FormatDuration(double seconds);

// Builds the whole command line, parses `args` (args[0] is the program name),
// runs the chosen verb. Never throws: returns the exit code and prints the
// one-line error to `err`.
int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_CLI_COMMON_H_
