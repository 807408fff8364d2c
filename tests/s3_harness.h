// The S3 tests' peers (issue 49):
//  - S3Server: npm's s3rver (tests/s3/node_modules, installed by
//    tests/s3/setup.sh) on loopback at an OS-chosen port, in its own process
//    group, killed on destruction. It does not verify V4 signatures but wants
//    the access key id S3RVER; each server gets a random secret, so tests can
//    look for it where it must never appear.
//  - WriteS3CredentialsFile: an operator's credentials file (AWS's shared
//    credentials format, mode 0600) for a server.
//  - RunBoto3: Debian's boto3 (/usr/bin/python3, tests/s3/s3check.py), the
//    independent client that checks what det-cpp wrote.
//  - S3FaultProxy: an in-process TCP proxy in front of a server that cuts
//    chosen requests (a multipart upload's part k) or answers them with an
//    error, deterministically (it parses HTTP/1.1 request boundaries).
#ifndef DET_TESTS_S3_HARNESS_H_
#define DET_TESTS_S3_HARNESS_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace det::test {

struct S3ServerOptions {
  // --service-endpoint localhost: host <bucket>.s3.localhost:PORT addresses
  // bucket <bucket> (virtual-hosted style; resolve it with CURLOPT_RESOLVE).
  bool vhost_localhost = false;
  // PEM files: serve HTTPS with this key and certificate.
  std::string tls_key, tls_cert;
};

class S3Server {
 public:
  // Starts s3rver with data under `dir` (the caller's temp dir; s3rver's
  // files go to dir/s3rver-data, its output to dir/s3rver.{out,err}) and
  // `buckets` created. Fails (never skips) when node or tests/s3/node_modules
  // is missing, or when s3rver does not listen within 60 s.
  static absl::StatusOr<std::unique_ptr<S3Server>> Start(const std::string& dir,
                                                         std::vector<std::string> buckets = {"det-test"},
                                                         S3ServerOptions options = {});
  ~S3Server();  // kills s3rver's process group
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;

  static constexpr char kAccessKeyId[] = "S3RVER";
  int port() const { return port_; }
  // http://127.0.0.1:PORT (https:// with TLS).
  std::string endpoint_url() const;
  const std::string& secret() const { return secret_; }
  const std::string& dir() const { return dir_; }
  bool tls() const { return !options_.tls_cert.empty(); }
  const S3ServerOptions& options() const { return options_; }
  pid_t pid() const { return pid_; }
  std::string Log() const;  // s3rver's stdout and stderr

 private:
  S3Server() = default;
  std::string dir_, secret_;
  S3ServerOptions options_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// Writes dir/s3-credentials-<profile> (mode 0600): profile `profile` with
// the server's key and secret, endpoint_url (default s.endpoint_url()),
// region us-east-1, det_workspaces `workspaces` and, with TLS, ca_bundle =
// the server's certificate. Returns its path.
std::string WriteS3CredentialsFile(const std::string& dir, const S3Server& s, const std::string& profile = "default",
                                   const std::string& workspaces = "*", const std::string& endpoint_url = "");

// Runs `/usr/bin/python3 tests/s3/s3check.py --endpoint URL --access-key
// S3RVER --secret-key-file FILE <args>` (the secret in a 0600 file under the
// server's dir, never in argv) and parses its JSON stdout. Commands:
//   list BUCKET PREFIX      -> [{"key", "size", "etag"}] in key order
//   get BUCKET KEY OUT_FILE -> {"size", "md5"}
//   put BUCKET KEY IN_FILE  -> {"etag"}
//   delete BUCKET KEY       -> {}
//   head BUCKET KEY         -> {"size", "etag"}
// An error (boto3's, or a missing /usr/bin/python3 or boto3) names the
// command and carries s3check's output.
absl::StatusOr<nlohmann::json> RunBoto3(const S3Server& s, const std::vector<std::string>& args);

// A loopback TCP proxy (127.0.0.1, OS-chosen port) to 127.0.0.1:upstream.
// Each client connection gets its own upstream connection; requests are
// found by their request line and Content-Length (keep-alive connections
// carry several), so faults hit exactly the chosen requests.
class S3FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<S3FaultProxy>> Start(int upstream_port);
  ~S3FaultProxy();  // closes every connection and joins its threads
  S3FaultProxy(const S3FaultProxy&) = delete;
  S3FaultProxy& operator=(const S3FaultProxy&) = delete;

  int port() const { return port_; }
  std::string endpoint_url() const;  // http://127.0.0.1:PORT

  // The next `times` requests whose request target has "partNumber=<n>&" or
  // ends with "partNumber=<n>" are cut: their headers and half their body
  // are forwarded, then the client's connection is reset (RST). Cutting
  // starts only once `after_manifests` more PUTs of a ".../det-manifest.json"
  // (checkpoints completed) have passed, so a test can aim at "the part of
  // the checkpoint after the first" without racing the trial. Once one
  // request is cut, only that object's parts (the same path) are cut after
  // it: a later checkpoint (a new uuid) is never hit by the leftover count.
  void CutUploadPart(int part_number, int times, int after_manifests = 0);
  // The request targets of the manifest PUTs seen so far, in order.
  std::vector<std::string> manifest_puts() const;
  // The next `n` requests are answered with `http_status` and an S3 XML
  // error without contacting the server (0: the connection is reset).
  // Checked before CutUploadPart.
  void FailNextRequests(int n, int http_status);
  int cuts() const { return cuts_.load(); }      // requests cut so far
  int failed() const { return failed_.load(); }  // requests failed so far
  int requests() const { return requests_.load(); }  // requests seen so far
  // Lets everything through from now on.
  void Reset();

 private:
  struct Conn;
  enum class Action { kForward, kCut, kFail };
  S3FaultProxy() = default;
  void AcceptLoop();
  void Serve(const std::shared_ptr<Conn>& conn);
  Action Decide(const std::string& request_line, int* status);
  void Finish(const std::shared_ptr<Conn>& conn, bool reset);

  int listen_fd_ = -1, port_ = 0, upstream_port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> cuts_{0}, failed_{0}, requests_{0};
  mutable std::mutex mu_;  // guards the fields below and Conn's fds
  std::vector<std::shared_ptr<Conn>> conns_;
  int cut_part_ = 0, cut_times_ = 0, fail_n_ = 0, fail_status_ = 0;
  int cut_after_manifests_ = 0;  // manifest PUTs still to pass before cutting
  std::string cut_path_;         // the object being cut (empty: none yet)
  std::vector<std::string> manifest_puts_;
};

}  // namespace det::test

#endif  // DET_TESTS_S3_HARNESS_H_
