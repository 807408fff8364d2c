// A process's CPU time, resident memory, open file descriptors and start
// time, read from Linux's /proc: the standard process_* series of the
// master's and the agent's /metrics, and the agent's per-trial series.
#ifndef DET_COMMON_PROC_STATS_H_
#define DET_COMMON_PROC_STATS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace det {

struct ProcStats {
  double cpu_seconds = 0;         // user + system CPU time (/proc/PID/stat utime + stime)
  uint64_t rss_bytes = 0;         // resident set size (/proc/PID/statm resident * page size)
  int64_t open_fds = -1;          // entries of /proc/PID/fd; -1 when that directory is not readable
  int64_t max_fds = -1;           // soft "Max open files" of /proc/PID/limits; -1 when unlimited or unreadable
  double start_time_seconds = 0;  // start time, seconds since the Unix epoch
  char state = '?';               // /proc/PID/stat field 3: R, S, D, T, Z (zombie), X (dead), ...

  // The process has exited but is not yet reaped (Z) or is being torn down
  // (X): its memory is gone (statm reads 0), so it is no running process.
  bool exited() const { return state == 'Z' || state == 'X'; }
};

// The stats of process `pid`. Every /proc file is read with a bound (4 KiB
// each; at most 1,048,576 fd entries are counted). NotFound naming the pid
// when no such process exists (or it exited during the read);
// InvalidArgument for pid <= 0; Internal when a /proc file cannot be parsed.
// Thread-safe (reads files only).
absl::StatusOr<ProcStats> ReadProcStats(pid_t pid);

// At most this many bytes of /proc/stat are read for its btime line (a
// large host's per-CPU and interrupt lines come before it; 16 KiB is not
// enough on 128 cores).
inline constexpr size_t kMaxProcStatBytes = 1 << 20;

// The "btime" (boot time, seconds since the epoch) of `stat_path`, a
// /proc/stat text, read line by line up to kMaxProcStatBytes. NotFound
// naming the file when it cannot be opened or has no btime line in that
// bound. ReadProcStats uses /proc/stat's (read once per process).
absl::StatusOr<double> ReadBootTimeSeconds(const std::string& stat_path);

}  // namespace det

#endif  // DET_COMMON_PROC_STATS_H_
