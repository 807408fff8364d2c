// S3Client: the S3 calls det-cpp makes (objects up and down, listing, batch
// delete, multipart upload), over libcurl with libcurl's own AWS Signature V4
// signer (CURLOPT_AWS_SIGV4) and expat for S3's XML replies (s3_xml.h).
//
// Contract: every request is signed with the x-amz-content-sha256 header set
// to the payload's SHA-256 (S3 requires it; libcurl signs the header's
// value); path-style (https://host/bucket/key) or virtual-hosted
// (https://bucket.host/key) addressing; HTTPS verified against the system's
// CAs or an operator's CA bundle (PEM text, CURLOPT_CAINFO_BLOB). Transient
// failures (5xx, 429, timeouts, connection reset or refused, a cut reply) are
// retried with jittered exponential backoff up to S3RetryPolicy::max_attempts
// tries in all; 4xx are not retried. (Within one try, libcurl itself re-sends
// once a request whose reused keep-alive connection was closed before any
// reply, on a fresh connection, as HTTP clients do.) Every reply body det-cpp keeps in memory
// is capped (S3Limits::max_reply_bytes) and the XML parse is bounded
// (s3_xml.h), so a hostile endpoint cannot make the caller allocate without
// bound. Errors name the operation, bucket/key and S3's error code.
//
// The credentials live only in this object's memory; they never appear in a
// URL, an error message or a log line.
//
// Thread-compatible: one S3Client per thread (it owns a curl handle).
#ifndef DET_COMMON_S3_S3_CLIENT_H_
#define DET_COMMON_S3_S3_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::s3 {

enum class Addressing { kPath, kVirtual };

struct S3Endpoint {
  // scheme://host[:port], no path; empty: https://s3.<region>.amazonaws.com.
  std::string endpoint_url;
  std::string region = "us-east-1";
  Addressing addressing = Addressing::kPath;
  // PEM text of the CA certificates to trust for https (empty: the system's).
  std::string ca_pem;
  // CURLOPT_RESOLVE entries "host:port:address" (tests map *.localhost to
  // 127.0.0.1 for virtual-hosted addressing). Not settable from a config.
  std::vector<std::string> resolve;
};

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // optional (x-amz-security-token)
};

struct S3RetryPolicy {
  int max_attempts = 5;  // tries in all, 1..20
  std::chrono::milliseconds base_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::seconds connect_timeout{10};
  // A request making less than 1 byte/s progress for this long is cut
  // (CURLOPT_LOW_SPEED_TIME) and retried.
  std::chrono::seconds stall_timeout{60};
  // Each try's whole request, connect to last byte (CURLOPT_TIMEOUT_MS);
  // 0: none (det-trial's uploads and downloads, bounded by stall_timeout).
  // The master's clients set it (master/core/s3_profiles.h). 0..3600 s.
  std::chrono::seconds total_timeout{0};
};

struct S3Limits {
  int64_t max_reply_bytes = int64_t{4} << 20;  // XML and GetObjectToString bodies
  int64_t part_size = int64_t{8} << 20;         // multipart part size (>= 5 MiB but tests)
  int64_t multipart_threshold = int64_t{8} << 20;  // files larger than this go multipart
  int max_parts = 10000;                       // S3's own limit
  int64_t max_object_bytes = int64_t{5} << 40;  // 5 TiB, S3's own limit
  int max_key_bytes = 1024;                    // S3's own limit
  int max_list_keys = 100000;                  // ListObjects stops with an error beyond
  int list_page_keys = 1000;    // max-keys of each ListObjectsV2 request, 1..1000 (tests page with fewer)
  int delete_batch_keys = 1000;  // keys of each DeleteObjects request, 1..1000 (S3's own limit)
};

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // without quotes
  // Uploads only: the hex MD5 of the bytes sent (S3 checked each PUT's and
  // part's Content-MD5). Empty from HeadObject and ListObjects.
  std::string md5;
};

// The parts of a multipart upload of `size` bytes: part_size each, the last
// smaller; when that would exceed limits.max_parts, the part size grows
// (rounded up to a MiB) so that it does not, as boto3 does. InvalidArgument
// when size > limits.max_object_bytes. Pure.
struct PartPlan {
  int64_t part_size = 0;
  int parts = 0;
};
absl::StatusOr<PartPlan> PlanParts(int64_t size, const S3Limits& limits);

// The ETag S3 gives an object uploaded in parts: hex MD5 of the
// concatenated binary MD5s of the parts, "-", the number of parts. Pure.
std::string MultipartEtag(const std::vector<std::string>& part_md5_hex);

// Lowercase hex MD5 of `data` / of file `path` (IO error: Internal).
std::string Md5Hex(absl::string_view data);
absl::StatusOr<std::string> FileMd5Hex(const std::string& path);

// An S3 bucket name that S3 accepts: det::ValidS3BucketName
// (common/checkpoint_storage_config.h), the one validator. Pure.
bool ValidBucketName(absl::string_view bucket);

class S3Client {
 public:
  // InvalidArgument naming the field when the endpoint is malformed (scheme
  // other than http/https, a path, user info) or a credential is empty.
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(S3Endpoint endpoint, S3Credentials credentials,
                                                          S3RetryPolicy retry = {}, S3Limits limits = {});
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Limits& limits() const;
  // Tries made so far, retries included (tests count them).
  int64_t requests_sent() const;

  // Uploads file `path` to `key`: one PUT up to multipart_threshold, else a
  // multipart upload of PlanParts parts (each part's ETag checked against
  // its MD5; the upload aborted when it fails). The returned ETag is checked
  // against the file's MD5 (or MultipartEtag) before returning. The file
  // must not change meanwhile (DataLoss when its size does).
  //
  // ETag rule: every PUT and part carries Content-MD5, so S3 itself refuses
  // a corrupt body (400 BadDigest). An ETag that is not the MD5 is accepted
  // only when the reply says the object is SSE-KMS or SSE-C encrypted
  // (x-amz-server-side-encryption: aws:kms / aws:kms:dsse, or
  // x-amz-server-side-encryption-customer-algorithm), where S3's ETag is not
  // an MD5; otherwise it is DataLoss. A CompleteMultipartUpload answered 404
  // NoSuchUpload (a retry after S3 had completed it but the reply was lost)
  // is accepted when a HEAD shows the object with the file's size and the
  // parts' ETag (or the whole MD5, as s3rver gives).
  absl::StatusOr<ObjectInfo> PutObjectFromFile(const std::string& bucket, const std::string& key,
                                               const std::string& path);
  // One PUT of `data` (at most multipart_threshold); ETag checked.
  absl::StatusOr<ObjectInfo> PutObject(const std::string& bucket, const std::string& key, absl::string_view data);

  // NotFound when there is no such object.
  absl::StatusOr<ObjectInfo> HeadObject(const std::string& bucket, const std::string& key);

  // The whole object, at most `max_bytes` (FailedPrecondition when larger).
  absl::StatusOr<std::string> GetObjectToString(const std::string& bucket, const std::string& key,
                                                int64_t max_bytes);
  // Writes the object to `path` (created/truncated, 0600), streaming; then
  // checks its size and, when `md5_hex` is non-empty, its MD5 (DataLoss
  // naming the key otherwise; the file is removed).
  absl::Status GetObjectToFile(const std::string& bucket, const std::string& key, const std::string& path,
                               int64_t expected_size, const std::string& md5_hex);
  // Bytes [offset, offset+length) of the object, passed to `sink` as they
  // arrive (a ranged GET; retried from the first byte not yet passed on).
  absl::Status GetObjectRange(const std::string& bucket, const std::string& key, int64_t offset, int64_t length,
                              const std::function<void(absl::string_view)>& sink);

  // Every object under `prefix` (ListObjectsV2, paged), in key order; at most
  // limits.max_list_keys (FailedPrecondition beyond).
  absl::StatusOr<std::vector<ObjectInfo>> ListObjects(const std::string& bucket, const std::string& prefix);

  // Deletes `keys` with DeleteObjects (at most 1000 a request, Quiet). An
  // error names the first key S3 would not delete.
  absl::Status DeleteObjects(const std::string& bucket, const std::vector<std::string>& keys);

 private:
  struct Impl;
  explicit S3Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace det::s3

#endif  // DET_COMMON_S3_S3_CLIENT_H_
