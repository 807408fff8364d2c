#include "master/http/health.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "master/core/master_core.h"
#include "master/store/store.h"
#include "nlohmann/json.hpp"

namespace det::master {

bool IsHealthRequest(const std::string& method, const std::string& path) {
  return (method == "GET" || method == "HEAD") && (path == kHealthPath || path == kHealthzPath || path == kLivezPath);
}

bool IsHealthPathWithOtherMethod(const std::string& method, const std::string& path) {
  return method != "GET" && method != "HEAD" && (path == kHealthzPath || path == kLivezPath);
}

HealthCheck::HealthCheck(Probe probe, std::shared_ptr<const Clock> clock, HealthOptions options)
    : probe_(std::move(probe)),
      clock_(clock ? std::move(clock) : std::make_shared<SystemClock>()),
      options_(options) {}

void HealthCheck::SetShuttingDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
}

int64_t HealthCheck::probes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probes_;
}

absl::Status HealthCheck::Check() {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return absl::UnavailableError("the master is shutting down");
  if (have_result_ && clock_->MonotonicMs() - checked_ms_ < options_.cache_ms) return result_;
  if (probing_) {
    // Another request runs the probe: its answer is this one's, unless the
    // probe has run past the stall bound (then every request answers at once).
    const int64_t left = options_.stall_ms - (clock_->MonotonicMs() - probe_started_ms_);
    if (left > 0 && probed_.wait_for(lock, std::chrono::milliseconds(left), [this] { return !probing_; })) {
      return result_;
    }
    return absl::UnavailableError(absl::StrCat("the database has not answered a health probe within ",
                                               options_.stall_ms, " ms (busy or stuck storage)"));
  }
  probing_ = true;
  probe_started_ms_ = clock_->MonotonicMs();
  ++probes_;
  lock.unlock();
  absl::Status st = probe_ ? probe_() : absl::UnavailableError("no health probe");
  if (!st.ok() && st.code() != absl::StatusCode::kUnavailable) st = absl::UnavailableError(st.message());
  lock.lock();
  probing_ = false;
  have_result_ = true;
  result_ = st;
  checked_ms_ = clock_->MonotonicMs();
  probed_.notify_all();
  return shutting_down_ ? absl::UnavailableError("the master is shutting down") : st;
}

HealthCheck::Probe CoreHealthProbe(MasterCore* core, int64_t wait_ms) {
  return [core, wait_ms]() -> absl::Status {
    if (core->Ping(std::chrono::milliseconds(wait_ms))) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "the master's core has not answered within ", wait_ms,
        " ms (an operation holds its lock that long: a deadlock or stuck storage); the master log says what it "
        "was doing; restart the master if this persists"));
  };
}

HealthCheck::Probe AllProbes(std::vector<HealthCheck::Probe> probes) {
  return [probes = std::move(probes)]() -> absl::Status {
    for (const HealthCheck::Probe& probe : probes) {
      if (absl::Status st = probe(); !st.ok()) return st;
    }
    return absl::OkStatus();
  };
}

HealthCheck::Probe StoreHealthProbe(Store* store) {
  const std::string path = store->path();
  struct stat opened {};
  const bool have_file = ::stat(path.c_str(), &opened) == 0;
  return [store, path, have_file, dev = opened.st_dev, ino = opened.st_ino]() -> absl::Status {
    if (have_file) {
      struct stat now {};
      if (::stat(path.c_str(), &now) != 0) {
        return absl::UnavailableError(absl::StrCat(
            "the database file ", path, " is gone (", std::strerror(errno),
            "): the master writes to a deleted file, which is lost once it stops; before stopping it, take a backup "
            "(det-cli master backup FILE) and restore that"));
      }
      if (now.st_dev != dev || now.st_ino != ino) {
        return absl::UnavailableError(absl::StrCat("the database file ", path,
                                                   " was replaced under the running master; restart the master to "
                                                   "serve the new file (or put the old one back)"));
      }
    }
    absl::StatusOr<int64_t> version = store->SchemaVersion();
    if (!version.ok()) {
      return absl::UnavailableError(absl::StrCat("the database does not answer: ", version.status().message()));
    }
    return absl::OkStatus();
  };
}

HealthReply HealthAnswer(const absl::Status& health) {
  if (health.ok()) return {200, nlohmann::json{{"status", "ok"}}.dump()};
  // The reason may name a path with any bytes: never throw on them.
  return {503, nlohmann::json{{"status", "unavailable"}, {"reason", std::string(health.message())}}.dump(
                   -1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

}  // namespace det::master
