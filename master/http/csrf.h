// The same-origin rule for writes authenticated by the dashboard's det_token
// cookie (issue 46, finding 3). A browser attaches the cookie to a form POST
// from any page of the same site (SameSite=Strict does not help: another
// port of the master's host is same-site), so a request that the cookie
// alone authenticates may change state only when it says it comes from the
// master's own origin:
//   - GET, HEAD and OPTIONS are not checked (they change nothing);
//   - a request with `Authorization: Bearer <token>` is not checked (det-cli,
//     scripts, and the dashboard itself, which sends its token that way);
//   - a request without a det_token cookie is not checked (it has no ambient
//     credential to abuse);
//   - otherwise it must carry `Origin: SCHEME://HOST` where HOST equals the
//     request's Host header (case-insensitive) and SCHEME is https when the
//     master serves HTTPS, http or https otherwise (a TLS-terminating proxy),
//     or, without an Origin, `Sec-Fetch-Site: same-origin`; and it must
//     declare `Content-Type: application/json` (forms cannot send it without
//     a CORS preflight, which the master never grants: it sends no
//     Access-Control-* headers).
// Pure functions of the headers; thread-safe.
#ifndef DET_MASTER_HTTP_CSRF_H_
#define DET_MASTER_HTTP_CSRF_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace httplib {
struct Request;
}

namespace det::master {

// The headers the rule reads (values as sent; empty when absent).
struct CsrfHeaders {
  std::string method;
  std::string authorization;
  std::string cookie;
  std::string origin;
  std::string sec_fetch_site;
  std::string content_type;
  std::string host;
  bool tls = false;  // the master serves this request over HTTPS
};

// Ok when the request may go on; PermissionDenied saying why and how to fix
// it (e.g. "cookie-authenticated POST from origin http://127.0.0.1:5555
// refused: cross-origin (the master is http://127.0.0.1:8080); send
// Authorization: Bearer <token>") otherwise.
absl::Status CheckCookieWrite(const CsrfHeaders& h);

// CheckCookieWrite of an httplib request (`tls`: served over HTTPS).
absl::Status CheckCookieWrite(const httplib::Request& req, bool tls);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_CSRF_H_
