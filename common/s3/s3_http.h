// The S3 client's transport (internal to det_s3): one libcurl easy handle,
// each request signed by libcurl's AWS Signature V4 (CURLOPT_AWS_SIGV4) with
// the x-amz-content-sha256 header the caller computed, and the retry policy
// of s3_client.h (transient failures retried with jittered exponential
// backoff; 4xx never). Reply bodies that are kept are capped at
// S3Limits::max_reply_bytes. Thread-compatible.
#ifndef DET_COMMON_S3_S3_HTTP_H_
#define DET_COMMON_S3_S3_HTTP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/s3/s3_client.h"

namespace det::s3::internal {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string bucket;
  std::string key;    // may be empty (bucket-level calls)
  std::string query;  // canonical: sorted, encoded, without '?'
  std::vector<std::pair<std::string, std::string>> headers;  // signed
  // The body: `data`, or `body_size` bytes of descriptor `fd` from `fd_offset`.
  absl::string_view data;
  int fd = -1;
  int64_t fd_offset = 0;
  int64_t body_size = 0;
  std::string payload_sha256;  // hex; empty: the empty payload's
  // A 2xx reply's body goes to `sink` as it arrives when set (a non-OK
  // status stops the transfer, not retried); else it is kept, capped.
  std::function<absl::Status(absl::string_view)> sink;
};

struct HttpResponse {
  long status = 0;
  std::string body;  // kept bodies and error bodies, capped
  std::string etag;  // without quotes
  int64_t content_length = -1;
  // S3 said the object is encrypted with SSE-KMS (x-amz-server-side-encryption:
  // aws:kms or aws:kms:dsse) or SSE-C (x-amz-server-side-encryption-customer-
  // algorithm): its ETag is then not the MD5 of the bytes.
  bool etag_not_md5 = false;
};

// S3's URI encoding: every byte except A-Z a-z 0-9 - _ . ~ (and '/' when
// keep_slash) as %XX.
std::string UriEncode(absl::string_view s, bool keep_slash);

class HttpTransport {
 public:
  static absl::StatusOr<std::unique_ptr<HttpTransport>> Create(const S3Endpoint& endpoint,
                                                               const S3Credentials& credentials,
                                                               const S3RetryPolicy& retry, const S3Limits& limits);
  ~HttpTransport();

  // Sends `req` with retries; `before_retry` (optional) runs before each
  // retry (a resumed GET moves its Range there). A 2xx reply is returned;
  // any other is an error naming `what` (e.g. "PUT s3://b/k"), the HTTP
  // status and S3's error code: NotFound (404), PermissionDenied (403),
  // FailedPrecondition (other 4xx), Unavailable (5xx, 429 and transport
  // errors after the last try), ResourceExhausted (a reply over the cap).
  // A 200 reply to a POST whose body is an <Error> with Code InternalError,
  // SlowDown or ServiceUnavailable (CompleteMultipartUpload may answer so)
  // is retried like a 5xx.
  absl::StatusOr<HttpResponse> Send(const std::string& what, HttpRequest& req,
                                    const std::function<void()>& before_retry = nullptr);

  // The number of HTTP requests sent so far (tries included).
  int64_t requests_sent() const { return requests_sent_; }

 private:
  struct Attempt;
  HttpTransport() = default;
  std::string Url(const HttpRequest& req) const;
  Attempt Perform(HttpRequest& req);

  void* curl_ = nullptr;
  void* resolve_ = nullptr;  // curl_slist*
  S3Endpoint endpoint_;
  S3Credentials credentials_;
  S3RetryPolicy retry_;
  S3Limits limits_;
  std::string scheme_, host_;  // host with its port
  int64_t requests_sent_ = 0;
};

}  // namespace det::s3::internal

#endif  // DET_COMMON_S3_S3_HTTP_H_
