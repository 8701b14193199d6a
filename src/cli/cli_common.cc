#include "cli/cli_common.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "relpos/cpu.h"
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

// Every verb's name, comma-separated, for "unknown verb" messages.
std::string VerbNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub :
       app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  return joined;
}

// args[1] when it names no verb (and is not a top-level flag), else "".
std::string UnknownVerb(const CLI::App& app,
                        const std::vector<std::string>& args) {
  if (args.size() < 2 || args[1].empty() || args[1][0] == '-') return "";
  for (const CLI::App* sub :
       app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(args[1])) return "";
  }
  return args[1];
}

// CLI11 prints a captured default as "--steps INT=1000"; the help reads
// better with "(default: 1000)" at the end of the description, and a list
// as "256,512" rather than "[256,512]". Flags without a value, required
// options and empty lists have none.
void MoveDefaultsIntoDescriptions(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt :
         sub->get_options([](CLI::Option*) { return true; })) {
      std::string value = opt->get_default_str();
      if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
        value = value.substr(1, value.size() - 2);
      }
      opt->default_str("");
      if (value.empty() || opt->get_expected_max() == 0 ||
          opt->get_required()) {
        continue;
      }
      opt->description(opt->get_description() + " (default: " + value + ")");
    }
  }
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err) {
  CLI::App app{"relpos: self-attention with relative position representations",
               "relpos"};
  app.set_version_flag("--version", RELPOS_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough(false);
  // Every option shows the value it starts with (verbs override it with
  // ->default_str where the variable's start value is a sentinel).
  app.option_defaults()->always_capture_default();
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
  AddTranslateVerb(app, out);
  MoveDefaultsIntoDescriptions(app);

  // An unknown verb (also with --help after it) is a usage error that lists
  // the verbs; CLI11 would only say that a subcommand is required.
  if (const std::string verb = UnknownVerb(app, args); !verb.empty()) {
    err << "relpos: error: unknown verb '" << verb << "' (verbs: "
        << VerbNames(app) << "; see 'relpos --help')\n";
    return kExitUsage;
  }

  // RELPOS_CPU_ISA caps the kernels' instruction sets (relpos/cpu.h),
  // before anything runs.
  if (const char* isa = std::getenv("RELPOS_CPU_ISA");
      isa != nullptr && *isa != '\0') {
    try {
      LimitCpuIsa(isa);
    } catch (const relpos::Error& e) {
      err << "relpos: error: RELPOS_CPU_ISA: " << FirstLine(e) << "\n";
      return kExitUsage;
    }
  }

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

std::vector<std::string> ReadInputLines(const std::string& path,
                                        const std::string& flag) {
  constexpr int64_t kMaxInputBytes = int64_t{64} << 20;
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      throw IoError(flag + " " + PathText(path) + ": cannot open the file");
    }
  }
  std::istream& in = path == "-" ? std::cin : file;
  const std::string name = path == "-" ? "-" : PathText(path);
  std::vector<std::string> lines;
  std::string line;
  int64_t bytes = 0;
  while (std::getline(in, line)) {
    bytes += static_cast<int64_t>(line.size()) + 1;
    RELPOS_CLI_CHECK(bytes <= kMaxInputBytes,
                     flag << " " << name << ": more than 64 MiB");
    lines.push_back(std::move(line));
  }
  RELPOS_CLI_CHECK(!in.bad(), flag << " " << name << ": read error");
  RELPOS_CLI_CHECK(!lines.empty(), flag << " " << name << ": no line");
  return lines;
}

std::vector<std::string> SplitList(const std::string& text, char sep) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == sep) {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  return parts;
}

std::string FormatLengthRange(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo)
                  : std::to_string(lo) + "-" + std::to_string(hi);
}

std::string LengthList(const std::vector<int64_t>& lengths) {
  const size_t n = lengths.size();
  // Evenly spaced but perhaps for the last one, which a spec always adds.
  const int64_t step = n > 2 ? lengths[1] - lengths[0] : 0;
  bool even = step > 0 && lengths[n - 1] - lengths[n - 2] <= step;
  for (size_t i = 2; even && i + 1 < n; ++i) {
    even = lengths[i] - lengths[i - 1] == step;
  }
  if (even) {
    return FormatLengthRange(lengths.front(), lengths.back()) +
           (step == 1 ? "" : ":" + std::to_string(step));
  }
  std::string text;
  for (int64_t x : lengths) {
    text += (text.empty() ? "" : ",") + std::to_string(x);
  }
  return text;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = std::llround(seconds);
  auto two = [](int64_t v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + two(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + two(s % 3600 / 60) + "m";
}

}  // namespace relpos::cli
