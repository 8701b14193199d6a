#include "cli/cli_common.h"

#include <algorithm>
#include <exception>

#include "relpos/error.h"
#include "relpos/version.h"

namespace relpos::cli {
namespace {

// Keeps only the first line of a message (errors are one line by contract)
// and drops the library's "relpos: " prefix, which the CLI replaces with the
// verb's name.
std::string FirstLine(const std::exception& e) {
  std::string message = MessageBody(e);
  message.erase(std::find(message.begin(), message.end(), '\n'), message.end());
  return message;
}

// The deepest subcommand that was selected, for "see 'relpos VERB --help'".
std::string SelectedPath(const CLI::App& app) {
  std::string path = app.get_name();
  const CLI::App* current = &app;
  while (true) {
    auto subs = current->get_subcommands();
    if (subs.empty()) break;
    current = subs.front();
    path += " " + current->get_name();
  }
  return path;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err) {
  CLI::App app{"relpos: self-attention with relative position representations",
               "relpos"};
  app.set_version_flag("--version", RELPOS_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough(false);
  AddParamsVerb(app, out);
  AddBenchVerb(app, out);
  AddTrainVerb(app, out);
  AddEvalVerb(app, out);
  AddDemoVerb(app, out);
  AddSweepVerb(app, out);
  AddCompareVerb(app, out);
  AddSettingsVerb(app, out);
  AddGenerateVerb(app, out);
  AddInspectVerb(app, out);

  std::vector<std::string> rest(args.rbegin(), args.rend() - 1);  // CLI11 wants reversed
  try {
    app.parse(rest);
  } catch (const CLI::CallForHelp&) {
    // `--help` on the selected verb (or the top level) goes to stdout.
    const CLI::App* target = &app;
    while (!target->get_subcommands().empty()) target = target->get_subcommands().front();
    out << target->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    out << RELPOS_VERSION_STRING << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err << SelectedPath(app) << ": error: " << FirstLine(e)
        << " (see '" << SelectedPath(app) << " --help')\n";
    return kExitUsage;
  } catch (const relpos::Error& e) {
    err << SelectedPath(app) << ": error: " << FirstLine(e) << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << SelectedPath(app) << ": internal error: " << FirstLine(e)
        << "\n";
    return kExitInternal;
  }
  return kExitOk;
}

}  // namespace relpos::cli
