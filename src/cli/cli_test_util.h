// Runs the relpos command line in-process for tests: exit code, stdout and
// stderr of one invocation.
#ifndef RELPOS_SRC_CLI_CLI_TEST_UTIL_H_
#define RELPOS_SRC_CLI_CLI_TEST_UTIL_H_

#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_common.h"

namespace relpos::cli {

struct CliResult {
  int code;
  std::string out, err;
};

// `args` without the program name.
inline CliResult RunRelpos(std::vector<std::string> args) {
  args.insert(args.begin(), "relpos");
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

// "a b c " for failure messages.
inline std::string Joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a + " ";
  return s;
}

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_CLI_TEST_UTIL_H_
