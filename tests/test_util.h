// Helpers for end-to-end tests: temp dirs, files, and child processes.
#ifndef DET_TESTS_TEST_UTIL_H_
#define DET_TESTS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace det::testing {

// A fresh directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);
// Every regular file below `dir` (recursively): relative path -> bytes; empty
// when `dir` does not exist.
std::map<std::string, std::string> FilesUnder(const std::string& dir);

// A child process whose stdout and stderr go to files.
class Subprocess {
 public:
  // Starts argv[0] (a path) with argv; stdout/stderr to the given files.
  Subprocess(const std::vector<std::string>& argv, const std::string& stdout_path, const std::string& stderr_path);
  ~Subprocess();  // kills the child if still running
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit up to `timeout`; returns the exit status as
  // 0..255, 128+signal when killed, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  std::string Stdout() const { return ReadFile(stdout_path_); }
  std::string Stderr() const { return ReadFile(stderr_path_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string stdout_path_, stderr_path_;
};

// Runs argv to completion (bounded by timeout); returns the exit status and
// fills out/err.
int RunProcess(const std::vector<std::string>& argv, std::string* out, std::string* err,
               std::chrono::milliseconds timeout = std::chrono::minutes(5));

// Polls `pred` every 20 ms until it is true or `timeout` passes.
bool PollUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// Process `pid`'s resident set size in MiB, read from /proc/PID/status:
// RssMiB is the current one (VmRSS), PeakRssMiB the high-water mark of the
// process's whole life so far (VmHWM), which is what a memory bound must be
// checked against: a process that held 300 MB for a moment and freed it has
// a small VmRSS but a VmHWM of 300 MB. -1 when unknown (no such process).
int64_t RssMiB(pid_t pid);
int64_t PeakRssMiB(pid_t pid);

// Whether `pid` exists and is not a zombie (its /proc/PID/stat state).
bool ProcessAlive(pid_t pid);

// The processes (not zombies) whose environment holds `entry` exactly
// ("KEY=VALUE"), e.g. DET_ALLOCATION_ID=... for every process of one
// allocation (children inherit it), read from /proc/PID/environ.
std::vector<pid_t> PidsWithEnv(const std::string& entry);

// Logs in through the master's REST API at 127.0.0.1:`http_port`
// (POST /api/v1/auth/login) and returns the token ("" on failure). The
// master bootstraps `determined` with an empty password.
std::string RestLogin(int http_port, const std::string& username = "determined", const std::string& password = "");

// Bytes that pass the master's trial.so checks (the ELF header of a shared
// library for this machine) for in-process master tests; never loadable.
std::string FakeTrialSo();

// The config of a one-trial experiment ("single" searcher, 100 batches of
// 16 records, max_restarts 3) named `name`, whose checkpoints go to
// `checkpoint_dir`, for in-process master tests (the trial never runs).
std::string SingleTrialConfig(const std::string& name, const std::string& checkpoint_dir, int slots_per_trial = 1);

// Writes a self-signed certificate for 127.0.0.1 and localhost to
// dir/cert.pem and its key to dir/key.pem with /usr/bin/openssl; "" when
// done, else why not (no openssl, or its error output).
std::string WriteSelfSignedCert(const std::string& dir);

// Points det-cli's token file ($DET_AUTH_FILE) into `dir`, so that a test's
// det-cli runs never share (or touch) ~/.det/auth.json.
void IsolateCliAuth(const std::string& dir);

}  // namespace det::testing

#endif  // DET_TESTS_TEST_UTIL_H_
