// The relpos command-line tool. All the work happens in cli/ verbs.
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli_common.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return relpos::cli::RunCli(args, std::cout, std::cerr);
}
