#include "cli/cli_common.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include <unistd.h>

#include "relpos/error.h"
#include "relpos/lab/files.h"
#include "relpos/version.h"

namespace relpos::cli {
namespace {

// Keeps only the first line of a message (errors are one line by contract)
// and drops the library's "relpos: " prefix, which the CLI replaces with the
// verb's name. Bytes that are not printable UTF-8 (a path or a flag value
// the library did not quote) are escaped as PathText does, so the line is
// always one line of valid UTF-8.
std::string FirstLine(const std::exception& e) {
  std::string message = MessageBody(e);
  message.erase(std::find(message.begin(), message.end(), '\n'), message.end());
  const std::string text = PathText(message);
  return text == message ? message : text.substr(1, text.size() - 2);
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

  // Whatever a verb printed must have reached stdout: a write error (a full
  // disk, a closed stdout) is a failure of the command, not a success.
  auto finish = [&]() -> int {
    try {
      CheckOutput(out);
    } catch (const relpos::Error& e) {
      err << SelectedPath(app) << ": error: " << FirstLine(e) << "\n";
      return kExitUsage;
    }
    return kExitOk;
  };
  std::vector<std::string> rest(args.rbegin(), args.rend() - 1);  // CLI11 wants reversed
  try {
    app.parse(rest);
  } catch (const CLI::CallForHelp&) {
    // `--help` on the selected verb (or the top level) goes to stdout.
    const CLI::App* target = &app;
    while (!target->get_subcommands().empty()) target = target->get_subcommands().front();
    out << target->help();
    return finish();
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return finish();
  } catch (const CLI::CallForVersion&) {
    out << RELPOS_VERSION_STRING << "\n";
    return finish();
  } catch (const CLI::ParseError& e) {
    err << SelectedPath(app) << ": error: " << FirstLine(e)
        << " (see '" << SelectedPath(app) << " --help')\n";
    return kExitUsage;
  } catch (const relpos::Error& e) {
    err << SelectedPath(app) << ": error: " << FirstLine(e) << "\n";
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // The memory planner refuses what it foresees; this is what it did not.
    err << SelectedPath(app)
        << ": error: out of memory (an allocation failed beyond what the "
           "memory planner foresaw; docs/robustness.md, \"Memory\")\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << SelectedPath(app) << ": internal error: " << FirstLine(e)
        << "\n";
    return kExitInternal;
  }
  return finish();
}

bool StdoutBuffer::Drain() {
  const char* p = pbase();
  while (p < pptr()) {
    const ssize_t n = ::write(1, p, static_cast<size_t>(pptr() - p));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (error_ == 0) error_ = errno;
      setp(buffer_, buffer_ + sizeof buffer_);  // dropped, as it failed
      return false;
    }
    p += n;
  }
  setp(buffer_, buffer_ + sizeof buffer_);
  return true;
}

StdoutBuffer::int_type StdoutBuffer::overflow(int_type c) {
  if (!Drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

int StdoutBuffer::sync() { return Drain() ? 0 : -1; }

void CheckOutput(std::ostream& out) {
  out.flush();
  const auto* buffer = dynamic_cast<const StdoutBuffer*>(out.rdbuf());
  const int error = buffer ? buffer->error() : 0;
  if (out.good() && error == 0) return;
  throw IoError("cannot write to standard output" +
                (error != 0 ? ": " + std::string(std::strerror(error))
                            : std::string()));
}

}  // namespace relpos::cli
