// Test-only: run code or a program in a child process with a deadline, so
// that a regression that blocks (a FIFO opened for reading) fails the test
// instead of hanging it, and with the child's own resource limits
// (setrlimit) and standard streams (/dev/full, a closed stdout).
#ifndef RELPOS_TESTS_SUPPORT_SUBPROCESS_H_
#define RELPOS_TESTS_SUPPORT_SUBPROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace relpos::testing {

struct ChildResult {
  bool timed_out = false;  // killed (SIGKILL) at the deadline
  int exit_code = -1;      // when it exited
  int signal = 0;          // when a signal ended it
  std::string out, err;    // captured stdout / stderr (RunProgram)
  double seconds = 0;
};

// Waits for `pid` until `timeout`, then kills it.
inline ChildResult WaitChild(pid_t pid, std::chrono::milliseconds timeout) {
  ChildResult r;
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() - start > timeout) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start)
                  .count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// Runs `fn` in a forked child whose exit code is fn's result (an exception
// escaping fn exits 99). Only for tests that have started no threads.
inline ChildResult RunInChild(const std::function<int()>& fn,
                              std::chrono::milliseconds timeout =
                                  std::chrono::seconds(20)) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = fn();
    } catch (...) {
    }
    ::_exit(code);
  }
  return WaitChild(pid, timeout);
}

struct ProgramOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // stdout: "" = captured; "-" = closed; "|" = a pipe whose reader has
  // gone (writes fail with EPIPE / SIGPIPE); else a path opened for writing
  // (e.g. /dev/full).
  std::string stdout_path;
  // RLIMIT_AS of the child in bytes; 0 = unchanged.
  uint64_t address_space_limit = 0;
  // Extra environment "NAME=value" entries.
  std::vector<std::string> env;
  // SIGPIPE ignored in the child (as some parents leave it).
  bool ignore_sigpipe = false;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Runs the program args[0] (a path) with args, stdin from /dev/null.
inline ChildResult RunProgram(std::vector<std::string> args,
                              const ProgramOptions& o = {}) {
  char out_name[] = "/tmp/relpos_test_out_XXXXXX";
  char err_name[] = "/tmp/relpos_test_err_XXXXXX";
  const int out_fd = ::mkstemp(out_name);
  const int err_fd = ::mkstemp(err_name);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_fds[2] = {-1, -1};
  if (o.stdout_path == "|" && ::pipe(pipe_fds) == 0) ::close(pipe_fds[0]);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    if (o.stdout_path == "-") {
      ::close(1);
    } else if (o.stdout_path == "|") {
      ::dup2(pipe_fds[1], 1);
    } else if (!o.stdout_path.empty()) {
      const int fd = ::open(o.stdout_path.c_str(), O_WRONLY);
      ::dup2(fd, 1);
    } else {
      ::dup2(out_fd, 1);
    }
    ::dup2(err_fd, 2);
    if (o.address_space_limit > 0) {
      const rlimit lim{o.address_space_limit, o.address_space_limit};
      ::setrlimit(RLIMIT_AS, &lim);
    }
    if (o.ignore_sigpipe) ::signal(SIGPIPE, SIG_IGN);
    for (const std::string& e : o.env) ::putenv(const_cast<char*>(e.c_str()));
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  ChildResult r = WaitChild(pid, o.timeout);
  ::close(out_fd);
  ::close(err_fd);
  r.out = ReadWholeFile(out_name);
  r.err = ReadWholeFile(err_name);
  ::unlink(out_name);
  ::unlink(err_name);
  return r;
}

// Starts the program args[0] with its standard streams on /dev/null and
// returns at once (WaitChild ends it); for runs a test signals or races.
inline pid_t StartProgram(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The relpos binary of this build (RELPOS_TEST_BINARY overrides it, to run
// these tests against another build, e.g. one from before a fix).
inline std::string RelposBinary() {
  if (const char* other = std::getenv("RELPOS_TEST_BINARY")) return other;
  return std::string(RELPOS_BINARY_DIR) + "/bin/relpos";
}

}  // namespace relpos::testing

#endif  // RELPOS_TESTS_SUPPORT_SUBPROCESS_H_
