// On-disk cache of content-addressed artifacts (trial.so files):
// <dir>/<sha256>.so, downloaded to <sha256>.so.tmp, verified, made read-only
// (0444) and fsynced, then renamed (and the directory fsynced). A cached
// file is hashed again on every use: one that changed is deleted and
// fetched again.
#ifndef DET_AGENT_ARTIFACT_CACHE_H_
#define DET_AGENT_ARTIFACT_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace det::agent {

class ArtifactCache {
 public:
  // Receives one chunk of the artifact at byte `offset`.
  using ChunkSink = std::function<absl::Status(int64_t offset, absl::string_view data)>;
  // Downloads the artifact `sha256`, passing every chunk in order to `sink`.
  using Fetcher = std::function<absl::Status(const std::string& sha256, const ChunkSink& sink)>;

  // `dir` is created on first use.
  explicit ArtifactCache(std::string dir);

  // Where the artifact lives once cached. Requires a well-formed hash
  // (IsSha256Hex, common/sha256.h); Get checks it.
  std::string PathFor(const std::string& sha256) const;

  // Returns the path of the cached artifact after checking its hash,
  // fetching it with `fetch` on a miss or when the cached file no longer
  // hashes to `sha256` (it is deleted first, and the event logged). `sha256` comes from the master: it must be 64 lower-case hex digits
  // and its file must stay inside the cache directory (common/safe_path.h).
  // Concurrent calls for one hash share one download (later callers wait for
  // it; no lock is held during the fetch). Errors: InvalidArgument naming
  // "sha256" for a malformed hash or a path leading outside the cache;
  // DataLoss the fetched bytes hash differently; the fetcher's error;
  // Internal on I/O failures. Thread-safe.
  absl::StatusOr<std::string> Get(const std::string& sha256, const Fetcher& fetch);

 private:
  absl::StatusOr<std::string> UseOrDownload(const std::string& sha256, const std::string& path,
                                            const Fetcher& fetch);
  absl::StatusOr<std::string> Download(const std::string& sha256, const Fetcher& fetch);

  const std::string dir_;
  absl::Mutex mu_;
  // Hashes being downloaded now.
  std::map<std::string, bool> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::agent

#endif  // DET_AGENT_ARTIFACT_CACHE_H_
