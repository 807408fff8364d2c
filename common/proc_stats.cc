#include "common/proc_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace det {
namespace {

constexpr size_t kMaxProcFileBytes = 4096;
constexpr int64_t kMaxCountedFds = 1 << 20;

std::string ProcPath(pid_t pid, absl::string_view file) { return absl::StrCat("/proc/", pid, "/", file); }

absl::Status Gone(pid_t pid) { return absl::NotFoundError(absl::StrCat("process ", pid, " does not exist (no /proc/", pid, ")")); }

// The first kMaxProcFileBytes bytes of /proc/PID/<file>.
absl::StatusOr<std::string> ReadProcFile(pid_t pid, absl::string_view file) {
  const std::string path = ProcPath(pid, file);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ESRCH) return Gone(pid);
    return absl::InternalError(absl::StrCat("cannot open ", path, ": errno ", errno));
  }
  std::string text(kMaxProcFileBytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      if (err == ESRCH) return Gone(pid);
      return absl::InternalError(absl::StrCat("cannot read ", path, ": errno ", err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

absl::Status Unparsable(pid_t pid, absl::string_view file) {
  return absl::InternalError(absl::StrCat("cannot parse ", ProcPath(pid, file)));
}

// /proc/stat's btime, read once (it does not change while the system runs);
// 0 when it cannot be read (start times are then seconds since boot).
double BootTimeSeconds() {
  static const double boot = [] {
    absl::StatusOr<double> btime = ReadBootTimeSeconds("/proc/stat");
    return btime.ok() ? *btime : 0.0;
  }();
  return boot;
}

// utime, stime and starttime of /proc/PID/stat (fields 14, 15, 22; the
// command name, field 2, is in parentheses and may hold spaces).
absl::Status ReadStat(pid_t pid, ProcStats* out) {
  auto text = ReadProcFile(pid, "stat");
  if (!text.ok()) return text.status();
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return Unparsable(pid, "stat");
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*text).substr(close + 1), ' ', absl::SkipWhitespace());
  // fields[0] is field 3 (state), so field k is fields[k - 3].
  if (fields.size() < 20 || fields[0].size() != 1) return Unparsable(pid, "stat");
  out->state = fields[0][0];
  uint64_t utime = 0, stime = 0, start = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime) ||
      !absl::SimpleAtoi(fields[19], &start)) {
    return Unparsable(pid, "stat");
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  out->cpu_seconds = static_cast<double>(utime + stime) / ticks;
  out->start_time_seconds = BootTimeSeconds() + static_cast<double>(start) / ticks;
  return absl::OkStatus();
}

absl::Status ReadStatm(pid_t pid, ProcStats* out) {
  auto text = ReadProcFile(pid, "statm");
  if (!text.ok()) return text.status();
  std::vector<absl::string_view> fields = absl::StrSplit(*text, ' ', absl::SkipWhitespace());
  uint64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages)) return Unparsable(pid, "statm");
  out->rss_bytes = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return absl::OkStatus();
}

// The soft limit of the "Max open files" line of /proc/PID/limits.
absl::Status ReadLimits(pid_t pid, ProcStats* out) {
  auto text = ReadProcFile(pid, "limits");
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t soft = 0;
    if (!fields.empty() && absl::SimpleAtoi(fields[0], &soft)) out->max_fds = soft;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// The number of entries of /proc/PID/fd (at most kMaxCountedFds), or -1
// when it is not readable (another user's process).
absl::Status CountFds(pid_t pid, ProcStats* out) {
  const std::string path = ProcPath(pid, "fd");
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return Gone(pid);
    out->open_fds = -1;
    return absl::OkStatus();
  }
  int64_t count = 0;
  while (count < kMaxCountedFds) {
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    if (entry->d_name[0] == '.') continue;
    ++count;
  }
  ::closedir(dir);
  // Our own opendir holds one descriptor of this process while counting.
  if (pid == ::getpid() && count > 0) --count;
  out->open_fds = count;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> ReadBootTimeSeconds(const std::string& stat_path) {
  FILE* file = std::fopen(stat_path.c_str(), "re");
  if (file == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", stat_path, ": errno ", errno));
  // Line by line in a fixed buffer; a line longer than it (an "intr" line
  // with thousands of IRQs) arrives in pieces, and only a piece that starts
  // a line can be the btime line.
  char buf[4096];
  size_t total = 0;
  bool at_line_start = true;
  absl::StatusOr<double> result =
      absl::NotFoundError(absl::StrCat(stat_path, " has no btime line in its first ", kMaxProcStatBytes, " bytes"));
  while (total < kMaxProcStatBytes && std::fgets(buf, sizeof(buf), file) != nullptr) {
    absl::string_view piece(buf);
    total += piece.size();
    const bool starts_line = at_line_start;
    at_line_start = absl::EndsWith(piece, "\n");
    double btime = 0;
    if (starts_line && absl::ConsumePrefix(&piece, "btime ") &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(piece), &btime)) {
      result = btime;
      break;
    }
  }
  std::fclose(file);
  return result;
}

absl::StatusOr<ProcStats> ReadProcStats(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("pid must be positive, got ", pid));
  ProcStats stats;
  for (auto* read : {&ReadStat, &ReadStatm, &ReadLimits, &CountFds}) {
    absl::Status status = read(pid, &stats);
    if (!status.ok()) return status;
  }
  return stats;
}

}  // namespace det
