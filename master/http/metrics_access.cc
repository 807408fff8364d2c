#include "master/http/metrics_access.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/secret_token_file.h"
#include "master/core/auth.h"

namespace det::master {

absl::StatusOr<std::string> ReadMetricsTokenFile(const std::string& path, absl::string_view flag) {
  return ReadSecretTokenFile(path, flag);
}

absl::StatusOr<MetricsListen> ParseMetricsListen(absl::string_view spec, bool has_token) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-listen '", spec.substr(0, 256), "': ", why));
  };
  const size_t colon = spec.rfind(':');
  if (colon == absl::string_view::npos) return bad("expected HOST:PORT (e.g. 127.0.0.1:9091)");
  absl::string_view host = spec.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) return bad("unbalanced '[' in HOST");
  if (host.empty()) return bad("HOST is empty; use 127.0.0.1 (loopback) or an address and a --metrics-token-file");
  int port = -1;
  if (!absl::SimpleAtoi(spec.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return bad("PORT must be 0 (any free port) to 65535");
  }
  if (!IsLoopbackHost(host) && !has_token) {
    return bad(absl::StrCat(host, " is not a loopback address, so anyone who reaches it could read the cluster's "
                                  "metrics: give --metrics-token-file too, or listen on 127.0.0.1"));
  }
  return MetricsListen{std::string(host), port};
}

}  // namespace det::master
