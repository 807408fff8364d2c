// The same-origin rule for cookie-authenticated writes (csrf.h): which
// requests it checks, what it accepts and the errors it gives.
#include "master/http/csrf.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace det::master {
namespace {

// A cookie-authenticated POST from the dashboard's own origin.
CsrfHeaders SameOriginCookiePost() {
  CsrfHeaders h;
  h.method = "POST";
  h.cookie = "theme=dark; det_token=t0k";
  h.origin = "http://127.0.0.1:8080";
  h.content_type = "application/json";
  h.host = "127.0.0.1:8080";
  return h;
}

TEST(CsrfTest, SameOriginJsonCookieWriteIsAllowed) {
  EXPECT_TRUE(CheckCookieWrite(SameOriginCookiePost()).ok());
  CsrfHeaders h = SameOriginCookiePost();
  h.content_type = "Application/JSON; charset=utf-8";
  h.host = "LOCALHOST:8080";
  h.origin = "http://localhost:8080";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
  // A TLS-terminating proxy: the browser's origin is https.
  h.origin = "https://localhost:8080";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
}

TEST(CsrfTest, CrossOriginCookieWriteIsRefusedWithTheReason) {
  CsrfHeaders h = SameOriginCookiePost();
  h.origin = "http://127.0.0.1:5555";
  absl::Status st = CheckCookieWrite(h);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "cookie-authenticated POST from origin http://127.0.0.1:5555 refused: cross-origin (the master is "
            "http://127.0.0.1:8080); send Authorization: Bearer <token> (det-cli and the dashboard do)");
  for (const char* origin : {"null", "http://127.0.0.1", "http://127.0.0.1:8080/", "ftp://127.0.0.1:8080",
                             "http://127.0.0.1:80800", "http://evil.127.0.0.1:8080"}) {
    h.origin = origin;
    EXPECT_EQ(CheckCookieWrite(h).code(), absl::StatusCode::kPermissionDenied) << origin;
  }
  // Served over HTTPS: an http origin is another origin.
  h = SameOriginCookiePost();
  h.tls = true;
  EXPECT_EQ(CheckCookieWrite(h).code(), absl::StatusCode::kPermissionDenied);
  h.origin = "https://127.0.0.1:8080";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
}

TEST(CsrfTest, FormContentTypesAreRefusedEvenFromTheSameOrigin) {
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
                           "application/jsonx", "text/plain; a=application/json"}) {
    CsrfHeaders h = SameOriginCookiePost();
    h.content_type = type;
    absl::Status st = CheckCookieWrite(h);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << type;
    EXPECT_TRUE(absl::StrContains(st.message(), "is not application/json")) << st;
  }
}

TEST(CsrfTest, WithoutOriginOnlySecFetchSiteSameOriginPasses) {
  CsrfHeaders h = SameOriginCookiePost();
  h.origin.clear();
  absl::Status st = CheckCookieWrite(h);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(st.message(), "neither an Origin header naming http://127.0.0.1:8080 nor "
                                              "Sec-Fetch-Site: same-origin"))
      << st;
  for (const char* site : {"same-site", "cross-site", "none"}) {
    h.sec_fetch_site = site;
    EXPECT_EQ(CheckCookieWrite(h).code(), absl::StatusCode::kPermissionDenied) << site;
  }
  h.sec_fetch_site = "same-origin";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
}

TEST(CsrfTest, BearerSafeMethodsAndCookielessRequestsAreNotChecked) {
  CsrfHeaders h = SameOriginCookiePost();
  h.origin = "http://127.0.0.1:5555";
  h.content_type = "text/plain";
  for (const char* m : {"GET", "HEAD", "OPTIONS"}) {
    h.method = m;
    EXPECT_TRUE(CheckCookieWrite(h).ok()) << m;
  }
  h.method = "DELETE";
  EXPECT_FALSE(CheckCookieWrite(h).ok());
  h.authorization = "Bearer abc";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
  h.authorization = "Basic abc";  // not a user token: the cookie authenticates
  EXPECT_FALSE(CheckCookieWrite(h).ok());
  h.authorization.clear();
  h.cookie = "theme=dark";
  EXPECT_TRUE(CheckCookieWrite(h).ok());
}

TEST(CsrfTest, QuotedHeadersAreBoundedAndPrintable) {
  CsrfHeaders h = SameOriginCookiePost();
  h.origin = "http://a\x1b[2J" + std::string(1000, 'x');
  absl::Status st = CheckCookieWrite(h);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_LT(st.message().size(), 400u) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "http://a?[2Jxxx")) << st;
}

}  // namespace
}  // namespace det::master
