// Whether the master is serving, for a load balancer, systemd or a
// Kubernetes probe. Unauthenticated and cheap: no token is read, no table is
// scanned, and each check's probe runs at most once per cache window, however
// many requests come.
//
// Readiness: GET /api/v1/health and GET /healthz (the same answer; HEAD too):
//   200 {"status":"ok"}
//   503 {"status":"unavailable","reason":"..."}  the reason names what failed
//       and how to fix it: the master is shutting down; its core does not
//       answer (its lock held past kCoreWaitMs); the database file was
//       deleted or replaced under the running master; the database does not
//       answer (an SQLite error, or still busy after the stall bound).
// Liveness: GET /livez: the same answers, but only the core is probed (not
// the database, and not shutting down): a restart cannot fix a deleted or
// replaced det.db, and would lose what the running master still holds of it.
// Another method on /healthz or /livez: 405 (Allow: GET, HEAD); on
// /api/v1/health it is an API path like the rest (401 without a token).
//
// The gRPC port answers the standard grpc.health.v1.Health service (gRPC's
// default health check service): SERVING while the master serves, NOT_SERVING
// once it is shutting down; it does not probe the database.
#ifndef DET_MASTER_HTTP_HEALTH_H_
#define DET_MASTER_HTTP_HEALTH_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "master/core/clock.h"

namespace det::master {

class MasterCore;
class Store;

// The health routes: kHealthPath is listed in GET /api/v1/routes as a public
// route; kHealthzPath is the conventional alias outside /api/.
inline constexpr char kHealthPath[] = "/api/v1/health";
inline constexpr char kHealthzPath[] = "/healthz";
inline constexpr char kLivezPath[] = "/livez";

// How long a probe waits for the master core's lock before it says the core
// does not answer.
inline constexpr int64_t kCoreWaitMs = 2000;

// Whether `method` `path` is a health request (GET or HEAD of one of the
// three paths; the query is not part of `path`).
bool IsHealthRequest(const std::string& method, const std::string& path);

// Whether `method` `path` is another method on /healthz or /livez (answered
// 405 before its body is read).
bool IsHealthPathWithOtherMethod(const std::string& method, const std::string& path);

struct HealthOptions {
  // A probe's result is reused for this long (a flood of probes costs one
  // database query per window).
  int64_t cache_ms = 1000;
  // A request that finds another request's probe running waits for it until
  // the probe has run this long, then answers 503 (the database does not
  // answer); so does every request while that probe goes on.
  int64_t stall_ms = 5000;
};

// Thread-safe.
class HealthCheck {
 public:
  // Returns OK when the master's state can be served, else why not (any
  // code; the message is the reason). Called without locks held, at most one
  // call at a time.
  using Probe = std::function<absl::Status()>;

  // `clock` null: SystemClock.
  HealthCheck(Probe probe, std::shared_ptr<const Clock> clock = nullptr, HealthOptions options = {});

  // OK when serving; Unavailable with the reason otherwise. Runs the probe
  // when the cached result is older than options.cache_ms and no other call
  // is running it; waits up to options.stall_ms for a running probe.
  absl::Status Check();

  // From now on Check answers "the master is shutting down" (SIGTERM).
  void SetShuttingDown();

  // How many times the probe has run (tests).
  int64_t probes() const;

 private:
  const Probe probe_;
  const std::shared_ptr<const Clock> clock_;
  const HealthOptions options_;
  mutable std::mutex mu_;
  std::condition_variable probed_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  bool have_result_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  int64_t checked_ms_ ABSL_GUARDED_BY(mu_) = 0;  // clock_->MonotonicMs() of result_
  int64_t probe_started_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t probes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The probe of the master's core: OK when it answers (MasterCore::Ping takes
// and releases its lock within `wait_ms`), else Unavailable saying so.
// `core` must outlive the probe.
HealthCheck::Probe CoreHealthProbe(MasterCore* core, int64_t wait_ms = kCoreWaitMs);

// The probes in order; the first failure is the answer.
HealthCheck::Probe AllProbes(std::vector<HealthCheck::Probe> probes);

// The probe of the master's database: the file at store->path() is still the
// one open (stat: same device and inode as when this was called, so not
// deleted, moved or replaced under the master) and the store answers a
// trivial query (its schema version). `store` must outlive the probe.
HealthCheck::Probe StoreHealthProbe(Store* store);

// The answer to a health request: HTTP status and JSON body.
struct HealthReply {
  int status = 200;
  std::string body;
};
HealthReply HealthAnswer(const absl::Status& health);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_HEALTH_H_
