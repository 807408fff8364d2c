// det-master's /metrics access flags: --metrics-token-file (the scrape
// token) and --metrics-listen ADDR:PORT (a plain-HTTP listener serving GET
// /metrics only). Pure functions (and one bounded file read); thread-safe.
#ifndef DET_MASTER_HTTP_METRICS_ACCESS_H_
#define DET_MASTER_HTTP_METRICS_ACCESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::master {

inline constexpr int64_t kMaxMetricsTokenBytes = 4096;

// The scrape token in `path` without surrounding whitespace: the checks and
// errors of common/secret_token_file.h (the agent's metrics-token-file uses
// the same), each naming `flag` and the fix; a symbolic link is followed and
// its target checked: not a regular file (a FIFO), owned by neither
// det-master's user nor root, open to others, writable by its group,
// readable by a group other than root or det-master's, larger than
// kMaxMetricsTokenBytes, empty, or not one word of printable ASCII.
absl::StatusOr<std::string> ReadMetricsTokenFile(const std::string& path, absl::string_view flag);

struct MetricsListen {
  std::string host;  // without brackets ("::1")
  int port = 0;      // 0: any free port
};

// `spec` of --metrics-listen: HOST:PORT or [IPV6]:PORT, PORT 0..65535.
// Refused (InvalidArgument naming the flag and the fix) when malformed, or
// when HOST is not a loopback address and `has_token` is false: anyone who
// reaches it could read the cluster's metrics.
absl::StatusOr<MetricsListen> ParseMetricsListen(absl::string_view spec, bool has_token);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_METRICS_ACCESS_H_
