#include "common/s3/s3_client.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_storage_config.h"
#include "common/s3/s3_http.h"
#include "common/s3/s3_xml.h"
#include "common/sha256.h"

namespace det::s3 {
namespace {

using internal::HttpRequest;
using internal::HttpResponse;
using internal::HttpTransport;
using internal::UriEncode;

constexpr int64_t kMiB = int64_t{1} << 20;

// Incremental MD5 over OpenSSL's EVP interface.
class Md5 {
 public:
  Md5() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_md5(), nullptr); }
  ~Md5() { EVP_MD_CTX_free(ctx_); }
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;
  void Update(absl::string_view d) { EVP_DigestUpdate(ctx_, d.data(), d.size()); }
  std::string Binary() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, out, &n);
    return std::string(reinterpret_cast<char*>(out), n);
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string Hex(absl::string_view bin) { return absl::BytesToHexString(bin); }

std::string S3Path(const std::string& bucket, const std::string& key) {
  return absl::StrCat("s3://", bucket, "/", key);
}

// Digests of bytes [offset, offset+len) of fd: binary MD5 and hex SHA-256.
// `whole` (optional) is updated with the same bytes.
absl::Status DigestRange(int fd, int64_t offset, int64_t len, std::string* md5_bin, std::string* sha_hex,
                         Md5* whole = nullptr) {
  Md5 md5;
  Sha256 sha;
  std::string buf(static_cast<size_t>(std::min<int64_t>(len, kMiB)), '\0');
  int64_t done = 0;
  while (done < len) {
    size_t want = static_cast<size_t>(std::min<int64_t>(len - done, static_cast<int64_t>(buf.size())));
    ssize_t n = pread(fd, buf.data(), want, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::DataLossError("the file got shorter while it was being uploaded");
    md5.Update(absl::string_view(buf.data(), static_cast<size_t>(n)));
    sha.Update(absl::string_view(buf.data(), static_cast<size_t>(n)));
    if (whole != nullptr) whole->Update(absl::string_view(buf.data(), static_cast<size_t>(n)));
    done += n;
  }
  *md5_bin = md5.Binary();
  *sha_hex = sha.HexDigest();
  return absl::OkStatus();
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status ValidateLimits(const S3RetryPolicy& retry, const S3Limits& l) {
  if (retry.max_attempts < 1 || retry.max_attempts > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("S3RetryPolicy::max_attempts is ", retry.max_attempts, "; it must be 1..20"));
  }
  if (retry.base_backoff.count() < 0 || retry.max_backoff < retry.base_backoff ||
      retry.max_backoff.count() > 600000 || retry.connect_timeout.count() < 1 || retry.stall_timeout.count() < 1 ||
      retry.total_timeout.count() < 0 || retry.total_timeout.count() > 3600) {
    return absl::InvalidArgumentError(
        "S3RetryPolicy: backoffs must be 0 <= base <= max <= 600 s, timeouts at least 1 s, total_timeout 0..3600 s");
  }
  if (l.max_reply_bytes < 1024 || l.part_size < kMiB || l.multipart_threshold < 0 || l.max_parts < 1 ||
      l.max_parts > 10000 || l.max_object_bytes < 1 || l.max_key_bytes < 1 || l.max_key_bytes > 1024 ||
      l.max_list_keys < 1 || l.list_page_keys < 1 || l.list_page_keys > 1000 || l.delete_batch_keys < 1 ||
      l.delete_batch_keys > 1000) {
    return absl::InvalidArgumentError(
        "S3Limits: max_reply_bytes >= 1 KiB, part_size >= 1 MiB, max_parts 1..10000, max_key_bytes 1..1024, "
        "list_page_keys and delete_batch_keys 1..1000, the others positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PartPlan> PlanParts(int64_t size, const S3Limits& limits) {
  if (size < 0 || size > limits.max_object_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("an object of ", size, " bytes is larger than S3 allows (",
                                                   limits.max_object_bytes, " bytes, S3Limits::max_object_bytes)"));
  }
  PartPlan plan;
  plan.part_size = std::max<int64_t>(limits.part_size, 1);
  if (size > plan.part_size * limits.max_parts) {
    int64_t min_part = (size + limits.max_parts - 1) / limits.max_parts;
    plan.part_size = (min_part + kMiB - 1) / kMiB * kMiB;
  }
  plan.parts = size == 0 ? 1 : static_cast<int>((size + plan.part_size - 1) / plan.part_size);
  return plan;
}

std::string MultipartEtag(const std::vector<std::string>& part_md5_hex) {
  Md5 md5;
  for (const std::string& h : part_md5_hex) md5.Update(absl::HexStringToBytes(h));
  return absl::StrCat(Hex(md5.Binary()), "-", part_md5_hex.size());
}

std::string Md5Hex(absl::string_view data) {
  Md5 md5;
  md5.Update(data);
  return Hex(md5.Binary());
}

absl::StatusOr<std::string> FileMd5Hex(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  Md5 md5;
  std::string buf(kMiB, '\0');
  for (;;) {
    ssize_t n = read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    if (n == 0) break;
    md5.Update(absl::string_view(buf.data(), static_cast<size_t>(n)));
  }
  return Hex(md5.Binary());
}

bool ValidBucketName(absl::string_view b) { return ValidS3BucketName(std::string_view(b.data(), b.size())); }

struct S3Client::Impl {
  std::unique_ptr<HttpTransport> http;
  S3Limits limits;

  absl::Status Check(const std::string& bucket, const std::string& key, bool key_required) const;
  absl::StatusOr<ObjectInfo> PutPart(HttpRequest& req, const std::string& what, const std::string& md5_bin);
  absl::StatusOr<std::string> Multipart(const std::string& bucket, const std::string& key, int fd,
                                        int64_t size, std::string* whole_md5_hex);
  absl::StatusOr<std::string> Complete(const std::string& bucket, const std::string& key, const std::string& id_query,
                                       const std::vector<std::string>& md5s, const std::string& whole_md5_hex,
                                       int64_t size, bool etags_not_md5);
  absl::Status StreamGet(const std::string& bucket, const std::string& key, int64_t offset, int64_t length,
                         const std::function<absl::Status(absl::string_view)>& sink);
};

absl::Status S3Client::Impl::Check(const std::string& bucket, const std::string& key, bool key_required) const {
  if (!ValidBucketName(bucket)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 bucket '", bucket.substr(0, 64), "' is not a valid bucket name (3..63 of a-z 0-9 . -, starting and "
        "ending with a letter or digit, no '..', '.-' or '-.', not an IP address); fix checkpoint_storage.bucket"));
  }
  if (key_required && key.empty()) return absl::InvalidArgumentError("S3 object key is empty");
  if (static_cast<int64_t>(key.size()) > limits.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("S3 object key '", key.substr(0, 64), "...' is ", key.size(),
                                                   " bytes; S3 allows at most ", limits.max_key_bytes,
                                                   " (shorten checkpoint_storage.prefix or the file names)"));
  }
  if (key.find('\0') != std::string::npos) return absl::InvalidArgumentError("S3 object key contains a NUL byte");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3Endpoint endpoint, S3Credentials credentials,
                                                           S3RetryPolicy retry, S3Limits limits) {
  if (credentials.access_key_id.empty() || credentials.access_key_id.size() > 256) {
    return absl::InvalidArgumentError("S3 credentials: aws_access_key_id is empty or longer than 256 bytes");
  }
  if (credentials.secret_access_key.empty() || credentials.secret_access_key.size() > 256) {
    return absl::InvalidArgumentError("S3 credentials: aws_secret_access_key is empty or longer than 256 bytes");
  }
  if (endpoint.region.empty() || endpoint.region.size() > 64 ||
      !std::all_of(endpoint.region.begin(), endpoint.region.end(),
                   [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; })) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_storage.region '", endpoint.region.substr(0, 64),
                                                   "' must be 1..64 of [A-Za-z0-9_-], e.g. us-east-1"));
  }
  if (auto s = ValidateLimits(retry, limits); !s.ok()) return s;
  auto http = HttpTransport::Create(endpoint, credentials, retry, limits);
  if (!http.ok()) return http.status();
  auto impl = std::make_unique<Impl>();
  impl->http = std::move(http).value();
  impl->limits = limits;
  return std::unique_ptr<S3Client>(new S3Client(std::move(impl)));
}

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3Client::~S3Client() = default;
const S3Limits& S3Client::limits() const { return impl_->limits; }
int64_t S3Client::requests_sent() const { return impl_->http->requests_sent(); }

absl::StatusOr<ObjectInfo> S3Client::Impl::PutPart(HttpRequest& req, const std::string& what,
                                                   const std::string& md5_bin) {
  req.method = "PUT";
  req.headers.emplace_back("Content-MD5", absl::Base64Escape(md5_bin));
  auto resp = http->Send(what, req);
  if (!resp.ok()) return resp.status();
  // With SSE-KMS or SSE-C S3's ETag is not the MD5; S3 checked Content-MD5.
  if (resp->etag != Hex(md5_bin) && !(resp->etag_not_md5 && !resp->etag.empty())) {
    return absl::DataLossError(absl::StrCat("S3 ", what, ": the ETag S3 returned (", resp->etag.substr(0, 80),
                                            ") is not the MD5 of the bytes sent (", Hex(md5_bin),
                                            ") and the reply does not say the object is SSE-KMS or SSE-C encrypted"));
  }
  ObjectInfo info;
  info.etag = resp->etag;
  info.md5 = Hex(md5_bin);
  return info;
}

absl::StatusOr<ObjectInfo> S3Client::PutObject(const std::string& bucket, const std::string& key,
                                               absl::string_view data) {
  if (auto s = impl_->Check(bucket, key, true); !s.ok()) return s;
  if (static_cast<int64_t>(data.size()) > std::max(impl_->limits.multipart_threshold, impl_->limits.part_size)) {
    return absl::InvalidArgumentError(absl::StrCat("PutObject of ", data.size(),
                                                   " bytes: larger than one PUT may be here; use PutObjectFromFile"));
  }
  HttpRequest req;
  req.bucket = bucket;
  req.key = key;
  req.data = data;
  req.payload_sha256 = Sha256Hex(data);
  Md5 md5;
  md5.Update(data);
  auto info = impl_->PutPart(req, "PUT " + S3Path(bucket, key), md5.Binary());
  if (!info.ok()) return info.status();
  info->key = key;
  info->size = static_cast<int64_t>(data.size());
  return info;
}

absl::StatusOr<std::string> S3Client::Impl::Multipart(const std::string& bucket, const std::string& key, int fd,
                                                      int64_t size, std::string* whole_md5_hex) {
  auto plan = PlanParts(size, limits);
  if (!plan.ok()) return plan.status();
  const std::string path = S3Path(bucket, key);
  HttpRequest init;
  init.method = "POST";
  init.bucket = bucket;
  init.key = key;
  init.query = "uploads=";
  auto created = http->Send("CreateMultipartUpload " + path, init);
  if (!created.ok()) return created.status();
  auto upload_id = ParseUploadId(created->body);
  if (!upload_id.ok()) return upload_id.status();
  const std::string id_query = "uploadId=" + UriEncode(*upload_id, false);
  auto abort = [&](absl::Status s) -> absl::Status {
    HttpRequest del;
    del.method = "DELETE";
    del.bucket = bucket;
    del.key = key;
    del.query = id_query;
    (void)http->Send("AbortMultipartUpload " + path, del);
    return s;
  };
  std::vector<std::string> md5s;
  bool etags_not_md5 = false;  // S3 said SSE-KMS/SSE-C
  Md5 whole;
  for (int i = 0; i < plan->parts; ++i) {
    int64_t off = plan->part_size * i;
    int64_t len = std::min(plan->part_size, size - off);
    std::string md5_bin;
    HttpRequest part;
    if (auto s = DigestRange(fd, off, len, &md5_bin, &part.payload_sha256, &whole); !s.ok()) {
      return abort(s);
    }
    part.bucket = bucket;
    part.key = key;
    part.query = absl::StrCat("partNumber=", i + 1, "&", id_query);
    part.fd = fd;
    part.fd_offset = off;
    part.body_size = len;
    auto put = PutPart(part, absl::StrCat("UploadPart ", i + 1, " of ", plan->parts, " ", path), md5_bin);
    if (!put.ok()) return abort(put.status());
    md5s.push_back(Hex(md5_bin));
    etags_not_md5 |= put->etag != md5s.back();
  }
  *whole_md5_hex = Hex(whole.Binary());
  auto etag = Complete(bucket, key, id_query, md5s, *whole_md5_hex, size, etags_not_md5);
  if (!etag.ok()) return abort(etag.status());
  return etag;
}

absl::StatusOr<std::string> S3Client::Impl::Complete(const std::string& bucket, const std::string& key,
                                                     const std::string& id_query,
                                                     const std::vector<std::string>& md5s,
                                                     const std::string& whole_md5_hex, int64_t size,
                                                     bool etags_not_md5) {
  const std::string path = S3Path(bucket, key);
  std::string body = CompleteMultipartXml(md5s);
  HttpRequest done;
  done.method = "POST";
  done.bucket = bucket;
  done.key = key;
  done.query = id_query;
  done.data = body;
  done.payload_sha256 = Sha256Hex(body);
  done.headers.emplace_back("Content-Type", "application/xml");
  auto completed = http->Send("CompleteMultipartUpload " + path, done);
  auto proven = [&](const std::string& e) { return e == MultipartEtag(md5s) || e == whole_md5_hex; };
  if (absl::IsNotFound(completed.status()) && absl::StrContains(completed.status().message(), "NoSuchUpload")) {
    // A retry after S3 completed the upload but its reply was lost: the
    // object is there when it has the file's size and the parts' ETag.
    HttpRequest head_req;
    head_req.method = "HEAD";
    head_req.bucket = bucket;
    head_req.key = key;
    auto head = http->Send("HEAD " + path, head_req);
    if (head.ok() && head->content_length == size &&
        (proven(head->etag) || ((etags_not_md5 || head->etag_not_md5) && !head->etag.empty()))) {
      return head->etag;
    }
    return completed.status();
  }
  if (!completed.ok()) return completed.status();
  auto etag = ParseCompleteMultipart(completed->body);
  if (!etag.ok()) return etag.status();
  // S3 and MinIO answer MD5-of-the-parts'-MD5s "-N"; some S3-compatible
  // servers (s3rver) the whole object's MD5. Either proves the bytes. With
  // SSE-KMS/SSE-C it is neither (S3 checked each part's Content-MD5).
  if (!proven(*etag) && !((completed->etag_not_md5 || etags_not_md5) && !etag->empty())) {
    return absl::DataLossError(absl::StrCat("S3 CompleteMultipartUpload ", path, ": ETag ", etag->substr(0, 80),
                                            " is neither the parts' ", MultipartEtag(md5s),
                                            " nor the object's MD5, and S3 did not say the object is SSE-KMS "
                                            "or SSE-C encrypted"));
  }
  return *etag;
}

absl::StatusOr<ObjectInfo> S3Client::PutObjectFromFile(const std::string& bucket, const std::string& key,
                                                       const std::string& path) {
  if (auto s = impl_->Check(bucket, key, true); !s.ok()) return s;
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, " for upload: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  const int64_t size = st.st_size;
  ObjectInfo info;
  info.key = key;
  info.size = size;
  if (size <= impl_->limits.multipart_threshold) {
    HttpRequest req;
    std::string md5_bin;
    if (auto s = DigestRange(fd.get(), 0, size, &md5_bin, &req.payload_sha256); !s.ok()) return s;
    req.bucket = bucket;
    req.key = key;
    req.fd = fd.get();
    req.body_size = size;
    auto put = impl_->PutPart(req, "PUT " + S3Path(bucket, key), md5_bin);
    if (!put.ok()) return put.status();
    info.etag = put->etag;
    info.md5 = put->md5;
  } else {
    auto etag = impl_->Multipart(bucket, key, fd.get(), size, &info.md5);
    if (!etag.ok()) return etag.status();
    info.etag = *etag;
  }
  if (fstat(fd.get(), &st) != 0 || st.st_size != size) {
    return absl::DataLossError(absl::StrCat(path, " changed size while it was uploaded to ", S3Path(bucket, key)));
  }
  return info;
}

absl::StatusOr<ObjectInfo> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  if (auto s = impl_->Check(bucket, key, true); !s.ok()) return s;
  HttpRequest req;
  req.method = "HEAD";
  req.bucket = bucket;
  req.key = key;
  auto resp = impl_->http->Send("HEAD " + S3Path(bucket, key), req);
  if (!resp.ok()) return resp.status();
  if (resp->content_length < 0) {
    return absl::InvalidArgumentError(absl::StrCat("S3 HEAD ", S3Path(bucket, key), ": no Content-Length"));
  }
  return ObjectInfo{key, resp->content_length, resp->etag, ""};
}

absl::Status S3Client::Impl::StreamGet(const std::string& bucket, const std::string& key, int64_t offset,
                                       int64_t length, const std::function<absl::Status(absl::string_view)>& sink) {
  if (auto s = Check(bucket, key, true); !s.ok()) return s;
  if (offset < 0 || length < -1) return absl::InvalidArgumentError("S3 GET: negative offset or length");
  const std::string what = "GET " + S3Path(bucket, key);
  int64_t done = 0;
  bool ranged = false;
  HttpRequest req;
  req.bucket = bucket;
  req.key = key;
  req.sink = [&](absl::string_view chunk) -> absl::Status {
    if (length >= 0 && done + static_cast<int64_t>(chunk.size()) > length) {
      return absl::DataLossError(absl::StrCat("more bytes than the ", length, " asked for"));
    }
    done += static_cast<int64_t>(chunk.size());
    return sink(chunk);
  };
  auto set_range = [&] {
    req.headers.clear();
    ranged = length >= 0 || offset + done > 0;
    if (length >= 0) {
      req.headers.emplace_back("Range", absl::StrCat("bytes=", offset + done, "-", offset + length - 1));
    } else if (ranged) {
      req.headers.emplace_back("Range", absl::StrCat("bytes=", offset + done, "-"));
    }
  };
  set_range();
  auto resp = http->Send(what, req, set_range);
  if (!resp.ok()) return resp.status();
  if (ranged && resp->status != 206) {
    return absl::InvalidArgumentError(absl::StrCat("S3 ", what, ": HTTP ", resp->status, " to a ranged GET"));
  }
  if (length >= 0 && done != length) {
    return absl::OutOfRangeError(absl::StrCat("S3 ", what, ": ", done, " of the ", length, " bytes asked for"));
  }
  return absl::OkStatus();
}

absl::Status S3Client::GetObjectRange(const std::string& bucket, const std::string& key, int64_t offset,
                                      int64_t length, const std::function<void(absl::string_view)>& sink) {
  if (length == 0) return impl_->Check(bucket, key, true);
  if (length < 0) return absl::InvalidArgumentError("GetObjectRange: negative length");
  return impl_->StreamGet(bucket, key, offset, length, [&](absl::string_view c) {
    sink(c);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> S3Client::GetObjectToString(const std::string& bucket, const std::string& key,
                                                        int64_t max_bytes) {
  std::string out;
  auto s = impl_->StreamGet(bucket, key, 0, -1, [&](absl::string_view c) {
    if (static_cast<int64_t>(out.size() + c.size()) > max_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("the object is larger than ", max_bytes, " bytes"));
    }
    out.append(c.data(), c.size());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status S3Client::GetObjectToFile(const std::string& bucket, const std::string& key, const std::string& path,
                                       int64_t expected_size, const std::string& md5_hex) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  Md5 md5;
  int64_t written = 0;
  const std::string where = S3Path(bucket, key);
  absl::Status s = impl_->StreamGet(bucket, key, 0, -1, [&](absl::string_view c) -> absl::Status {
    if (written + static_cast<int64_t>(c.size()) > expected_size) {
      return absl::DataLossError(absl::StrCat("the object is larger than the expected ", expected_size, " bytes"));
    }
    for (size_t off = 0; off < c.size();) {
      ssize_t n = write(fd.get(), c.data() + off, c.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      off += static_cast<size_t>(n);
    }
    md5.Update(c);
    written += static_cast<int64_t>(c.size());
    return absl::OkStatus();
  });
  if (s.ok() && written != expected_size) {
    s = absl::DataLossError(absl::StrCat("S3 object ", where, " has ", written, " bytes, expected ", expected_size));
  }
  if (s.ok() && !md5_hex.empty() && Hex(md5.Binary()) != absl::AsciiStrToLower(md5_hex)) {
    s = absl::DataLossError(absl::StrCat("S3 object ", where, ": MD5 mismatch (expected ", md5_hex, ")"));
  }
  if (s.ok() && fsync(fd.get()) != 0) {
    s = absl::InternalError(absl::StrCat("cannot sync ", path, ": ", std::strerror(errno)));
  }
  if (!s.ok()) unlink(path.c_str());
  return s;
}

absl::StatusOr<std::vector<ObjectInfo>> S3Client::ListObjects(const std::string& bucket, const std::string& prefix) {
  if (auto s = impl_->Check(bucket, prefix, false); !s.ok()) return s;
  std::vector<ObjectInfo> all;
  std::string token;
  int empty_pages = 0;
  for (;;) {
    HttpRequest req;
    req.bucket = bucket;
    if (!token.empty()) req.query = absl::StrCat("continuation-token=", UriEncode(token, false), "&");
    // encoding-type=url: a key with a character XML 1.0 cannot carry (U+000B,
    // written by another tool) still lists (ParseListObjectsV2 decodes).
    absl::StrAppend(&req.query, "encoding-type=url&list-type=2&max-keys=", impl_->limits.list_page_keys,
                    "&prefix=", UriEncode(prefix, false));
    auto resp = impl_->http->Send("ListObjectsV2 " + S3Path(bucket, prefix), req);
    if (!resp.ok()) return resp.status();
    auto page = ParseListObjectsV2(resp->body);
    if (!page.ok()) return page.status();
    for (ObjectInfo& o : page->objects) all.push_back(std::move(o));
    if (static_cast<int64_t>(all.size()) > impl_->limits.max_list_keys) {
      return absl::FailedPreconditionError(absl::StrCat("S3 ListObjectsV2 ", S3Path(bucket, prefix),
                                                        ": more than ", impl_->limits.max_list_keys,
                                                        " keys (S3Limits::max_list_keys)"));
    }
    empty_pages = page->objects.empty() ? empty_pages + 1 : 0;
    if (!page->truncated) break;
    if (empty_pages >= 3 || page->next_token.size() > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("S3 ListObjectsV2 ", S3Path(bucket, prefix),
                                                     ": truncated pages without keys or an oversized token"));
    }
    token = page->next_token;
  }
  std::sort(all.begin(), all.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return all;
}

absl::Status S3Client::DeleteObjects(const std::string& bucket, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (auto s = impl_->Check(bucket, k, true); !s.ok()) return s;
  }
  const size_t batch = static_cast<size_t>(impl_->limits.delete_batch_keys);
  for (size_t start = 0; start < keys.size(); start += batch) {
    std::vector<std::string> part(keys.begin() + start, keys.begin() + std::min(keys.size(), start + batch));
    std::string body = DeleteObjectsXml(part);
    Md5 md5;
    md5.Update(body);
    HttpRequest req;
    req.method = "POST";
    req.bucket = bucket;
    req.query = "delete=";
    req.data = body;
    req.payload_sha256 = Sha256Hex(body);
    req.headers.emplace_back("Content-MD5", absl::Base64Escape(md5.Binary()));
    req.headers.emplace_back("Content-Type", "application/xml");
    auto resp = impl_->http->Send(absl::StrCat("DeleteObjects s3://", bucket, " (", part.size(), " keys)"), req);
    if (!resp.ok()) return resp.status();
    auto errors = ParseDeleteResult(resp->body);
    if (!errors.ok()) return errors.status();
    if (!errors->empty()) {
      const DeleteError& e = errors->front();
      return absl::UnavailableError(absl::StrCat("S3 DeleteObjects: ", S3Path(bucket, e.key.substr(0, 1024)),
                                                 " was not deleted: ", e.code.substr(0, 128), ": ",
                                                 e.message.substr(0, 512), " (", errors->size(), " keys in all)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace det::s3
