// Shared plumbing of the relpos command line: how verbs register, how errors
// become exit codes. Every verb lives in its own verb_*.cc file.
#ifndef RELPOS_SRC_CLI_CLI_COMMON_H_
#define RELPOS_SRC_CLI_CLI_COMMON_H_

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace relpos::cli {

// Exit codes: 0 success; 1 an unexpected internal failure; 2 bad usage or bad
// input (unknown flag, out-of-range value, unreadable or corrupt file,
// unwritable output). Errors print exactly one line on stderr.
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
void AddSettingsVerb(CLI::App& app, std::ostream& out);

// Builds the whole command line, parses `args` (args[0] is the program name),
// runs the chosen verb. Never throws: returns the exit code and prints the
// one-line error to `err`.
int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_CLI_COMMON_H_
