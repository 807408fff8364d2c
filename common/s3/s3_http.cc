#include "common/s3/s3_http.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/s3/s3_xml.h"
#include "common/sha256.h"

namespace det::s3::internal {
namespace {

constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

CURL* Handle(void* p) { return static_cast<CURL*>(p); }

struct BodyReader {
  const HttpRequest* req;
  int64_t pos = 0;
  bool short_read = false;
};

size_t ReadBody(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* r = static_cast<BodyReader*>(userdata);
  const HttpRequest& req = *r->req;
  int64_t total = req.fd >= 0 ? req.body_size : static_cast<int64_t>(req.data.size());
  size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(size * nitems), total - r->pos));
  if (want == 0) return 0;
  if (req.fd < 0) {
    std::copy_n(req.data.data() + r->pos, want, buf);
    r->pos += static_cast<int64_t>(want);
    return want;
  }
  ssize_t n = pread(req.fd, buf, want, req.fd_offset + r->pos);
  if (n <= 0) {
    r->short_read = true;
    return CURL_READFUNC_ABORT;
  }
  r->pos += n;
  return static_cast<size_t>(n);
}

int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* r = static_cast<BodyReader*>(userdata);
  if (origin != SEEK_SET) return CURL_SEEKFUNC_CANTSEEK;
  r->pos = offset;
  return CURL_SEEKFUNC_OK;
}

struct ReplyState {
  CURL* curl = nullptr;
  const HttpRequest* req = nullptr;
  int64_t cap = 0;
  HttpResponse resp;
  bool overflow = false;
  absl::Status sink_error;
};

size_t WriteReply(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* s = static_cast<ReplyState*>(userdata);
  size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
  if (s->req->sink && status >= 200 && status < 300) {
    s->sink_error = s->req->sink(absl::string_view(ptr, n));
    return s->sink_error.ok() ? n : 0;
  }
  if (static_cast<int64_t>(s->resp.body.size() + n) > s->cap) {
    s->overflow = true;
    return 0;
  }
  s->resp.body.append(ptr, n);
  return n;
}

size_t OnHeader(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* s = static_cast<ReplyState*>(userdata);
  size_t n = size * nitems;
  absl::string_view line(buf, n);
  if (absl::StartsWith(line, "HTTP/")) {  // a new reply (after 100 Continue)
    s->resp.etag.clear();
    s->resp.content_length = -1;
    s->resp.etag_not_md5 = false;
    return n;
  }
  size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return n;
  absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
  absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (absl::EqualsIgnoreCase(name, "etag")) s->resp.etag = Unquote(value.substr(0, 256));
  if ((absl::EqualsIgnoreCase(name, "x-amz-server-side-encryption") &&
       (absl::EqualsIgnoreCase(value, "aws:kms") || absl::EqualsIgnoreCase(value, "aws:kms:dsse"))) ||
      absl::EqualsIgnoreCase(name, "x-amz-server-side-encryption-customer-algorithm")) {
    s->resp.etag_not_md5 = true;
  }
  if (absl::EqualsIgnoreCase(name, "content-length")) {
    int64_t v;
    if (absl::SimpleAtoi(value, &v)) s->resp.content_length = v;
  }
  return n;
}

bool RetryableCurlError(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

absl::Status StatusFor(const std::string& what, const HttpResponse& resp) {
  S3ErrorInfo info = ParseS3Error(resp.body);
  std::string msg = absl::StrCat("S3 ", what, ": HTTP ", resp.status);
  if (!info.code.empty()) absl::StrAppend(&msg, " ", info.code);
  if (!info.message.empty()) absl::StrAppend(&msg, ": ", info.message);
  if (resp.status == 404) return absl::NotFoundError(msg);
  if (resp.status == 403) return absl::PermissionDeniedError(msg);
  if (resp.status >= 500 || resp.status == 429) return absl::UnavailableError(msg);
  return absl::FailedPreconditionError(msg);
}

// A 200 reply that is really a transient error: S3 may answer
// CompleteMultipartUpload 200 and then an <Error> body, with a code its docs
// say to retry.
bool RetryableErrorIn2xx(const HttpRequest& req, const HttpResponse& resp) {
  if (req.method != "POST" || req.sink || !absl::StrContains(resp.body.substr(0, 512), "<Error>")) return false;
  const std::string code = ParseS3Error(resp.body).code;
  return code == "InternalError" || code == "SlowDown" || code == "ServiceUnavailable";
}

// Splits scheme://host[:port] and refuses anything else.
absl::Status ParseEndpointUrl(const std::string& url, std::string* scheme, std::string* host) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_storage.endpoint_url '", url.substr(0, 256), "' ",
                                                   why, "; write scheme://host[:port], e.g. https://s3.example.com "
                                                   "or http://127.0.0.1:9000"));
  };
  if (url.size() > 512) return bad("is longer than 512 bytes");
  size_t sep = url.find("://");
  if (sep == std::string::npos) return bad("has no scheme");
  *scheme = absl::AsciiStrToLower(url.substr(0, sep));
  if (*scheme != "http" && *scheme != "https") return bad("has a scheme other than http or https");
  *host = url.substr(sep + 3);
  if (!host->empty() && host->back() == '/') host->pop_back();
  if (host->empty()) return bad("has no host");
  for (char c : *host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '[' &&
        c != ']' && c != '_') {
      return bad("may not have a path, a query or user info");
    }
  }
  return absl::OkStatus();
}

bool HeaderSafe(absl::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

std::string UriEncode(absl::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

struct HttpTransport::Attempt {
  absl::StatusOr<HttpResponse> result;
  bool retryable = false;
};

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(const S3Endpoint& endpoint,
                                                                     const S3Credentials& credentials,
                                                                     const S3RetryPolicy& retry,
                                                                     const S3Limits& limits) {
  std::unique_ptr<HttpTransport> t(new HttpTransport());
  t->endpoint_ = endpoint;
  if (t->endpoint_.endpoint_url.empty()) {
    t->endpoint_.endpoint_url = absl::StrCat("https://s3.", endpoint.region, ".amazonaws.com");
  }
  if (auto s = ParseEndpointUrl(t->endpoint_.endpoint_url, &t->scheme_, &t->host_); !s.ok()) return s;
  if (!credentials.session_token.empty() &&
      (credentials.session_token.size() > 8192 || !HeaderSafe(credentials.session_token))) {
    return absl::InvalidArgumentError("S3 credentials: the session token must be at most 8192 printable bytes");
  }
  t->credentials_ = credentials;
  t->retry_ = retry;
  t->limits_ = limits;
  static const bool kGlobalInit = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!kGlobalInit) return absl::InternalError("S3 client: curl_global_init failed");
  t->curl_ = curl_easy_init();
  if (t->curl_ == nullptr) return absl::ResourceExhaustedError("S3 client: curl_easy_init failed");
  curl_slist* resolve = nullptr;
  for (const std::string& r : endpoint.resolve) resolve = curl_slist_append(resolve, r.c_str());
  t->resolve_ = resolve;
  return t;
}

HttpTransport::~HttpTransport() {
  if (curl_ != nullptr) curl_easy_cleanup(Handle(curl_));
  curl_slist_free_all(static_cast<curl_slist*>(resolve_));
}

std::string HttpTransport::Url(const HttpRequest& req) const {
  std::string url;
  if (endpoint_.addressing == Addressing::kVirtual) {
    url = absl::StrCat(scheme_, "://", req.bucket, ".", host_, "/", UriEncode(req.key, true));
  } else {
    url = absl::StrCat(scheme_, "://", host_, "/", req.bucket);
    if (!req.key.empty()) absl::StrAppend(&url, "/", UriEncode(req.key, true));
  }
  if (!req.query.empty()) absl::StrAppend(&url, "?", req.query);
  return url;
}

HttpTransport::Attempt HttpTransport::Perform(HttpRequest& req) {
  CURL* c = Handle(curl_);
  curl_easy_reset(c);
  std::string url = Url(req);
  std::string sigv4 = absl::StrCat("aws:amz:", endpoint_.region, ":s3");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERNAME, credentials_.access_key_id.c_str());
  curl_easy_setopt(c, CURLOPT_PASSWORD, credentials_.secret_access_key.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(retry_.connect_timeout.count() * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(retry_.stall_timeout.count()));
  if (retry_.total_timeout.count() > 0) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(retry_.total_timeout.count() * 1000));
  }
  curl_easy_setopt(c, CURLOPT_USERAGENT, "det-cpp");
  // Never through a proxy from http_proxy/https_proxy/ALL_PROXY: signed
  // requests (with the session token) go to the profile's endpoint only.
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  if (resolve_ != nullptr) curl_easy_setopt(c, CURLOPT_RESOLVE, static_cast<curl_slist*>(resolve_));
  curl_blob ca{};
  if (!endpoint_.ca_pem.empty()) {
    ca.data = endpoint_.ca_pem.data();
    ca.len = endpoint_.ca_pem.size();
    ca.flags = CURL_BLOB_NOCOPY;
    curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca);
  }
  curl_slist* headers = nullptr;
  auto add = [&headers](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
  add(absl::StrCat("x-amz-content-sha256: ", req.payload_sha256.empty() ? kEmptySha256 : req.payload_sha256));
  if (!credentials_.session_token.empty()) add("x-amz-security-token: " + credentials_.session_token);
  for (const auto& [name, value] : req.headers) add(absl::StrCat(name, ": ", value));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  BodyReader reader{&req};
  int64_t body_size = req.fd >= 0 ? req.body_size : static_cast<int64_t>(req.data.size());
  if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_size));
    curl_easy_setopt(c, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(c, CURLOPT_READDATA, &reader);
    curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(c, CURLOPT_SEEKDATA, &reader);
    if (req.method == "POST") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
  } else if (req.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  ReplyState reply;
  reply.curl = c;
  reply.req = &req;
  reply.cap = limits_.max_reply_bytes;
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, WriteReply);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &reply);
  ++requests_sent_;
  CURLcode rc = curl_easy_perform(c);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.resp.status);
  if (reply.overflow) {
    return {absl::ResourceExhaustedError(absl::StrCat("reply larger than ", limits_.max_reply_bytes,
                                                      " bytes (S3Limits::max_reply_bytes)")),
            false};
  }
  if (!reply.sink_error.ok()) return {reply.sink_error, false};
  if (reader.short_read) {
    return {absl::DataLossError("the file being uploaded got shorter (it must not change during the upload)"),
            false};
  }
  if (rc != CURLE_OK) {
    return {absl::UnavailableError(absl::StrCat("transport error: ", curl_easy_strerror(rc))),
            RetryableCurlError(rc)};
  }
  return {std::move(reply.resp), false};
}

absl::StatusOr<HttpResponse> HttpTransport::Send(const std::string& what, HttpRequest& req,
                                                 const std::function<void()>& before_retry) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  absl::Status last;
  for (int attempt = 1; attempt <= retry_.max_attempts; ++attempt) {
    if (attempt > 1) {
      int64_t cap = retry_.max_backoff.count();
      int64_t base = std::min<int64_t>(cap, retry_.base_backoff.count() << std::min(attempt - 2, 20));
      std::uniform_int_distribution<int64_t> jitter(base / 2, std::max<int64_t>(base / 2, base));
      std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
      if (before_retry) before_retry();
    }
    Attempt a = Perform(req);
    if (!a.result.ok()) {
      last = absl::Status(a.result.status().code(), absl::StrCat("S3 ", what, ": ", a.result.status().message()));
      if (a.retryable) continue;
      return last;
    }
    if (a.result->status >= 200 && a.result->status < 300) {
      if (!RetryableErrorIn2xx(req, *a.result)) return std::move(a.result).value();
      last = StatusFor(what, *a.result);
      last = absl::UnavailableError(last.message());
      continue;
    }
    last = StatusFor(what, *a.result);
    if (a.result->status >= 500 || a.result->status == 429) continue;
    return last;
  }
  return absl::Status(last.code(), absl::StrCat(last.message(), " (after ", retry_.max_attempts, " tries)"));
}

}  // namespace det::s3::internal
