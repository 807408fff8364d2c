#include "master/http/csrf.h"

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

constexpr size_t kMaxQuotedBytes = 128;

// `v` as it may appear in an error message: printable ASCII only (others
// become '?'), at most kMaxQuotedBytes, "(none)" when empty.
std::string Quoted(absl::string_view v) {
  if (v.empty()) return "(none)";
  std::string out;
  for (char c : v.substr(0, kMaxQuotedBytes)) out.push_back(absl::ascii_isprint(static_cast<unsigned char>(c)) ? c : '?');
  if (v.size() > kMaxQuotedBytes) out += "...";
  return out;
}

bool SafeMethod(absl::string_view m) { return m == "GET" || m == "HEAD" || m == "OPTIONS"; }

// Whether `origin` ("scheme://host[:port]", no path) names the master that
// the request's Host header names.
bool SameOrigin(absl::string_view origin, absl::string_view host, bool tls) {
  absl::string_view rest = origin;
  const bool https = absl::ConsumePrefix(&rest, "https://");
  if (!https && !absl::ConsumePrefix(&rest, "http://")) return false;
  if (tls && !https) return false;
  host = absl::StripAsciiWhitespace(host);
  return !host.empty() && absl::EqualsIgnoreCase(rest, host);
}

bool JsonContentType(absl::string_view content_type) {
  absl::string_view media = content_type.substr(0, content_type.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(media), "application/json");
}

}  // namespace

absl::Status CheckCookieWrite(const CsrfHeaders& h) {
  if (SafeMethod(h.method)) return absl::OkStatus();
  if (!UserToken(h.authorization, "").empty() || UserToken("", h.cookie).empty()) return absl::OkStatus();
  const std::string master = absl::StrCat(h.tls ? "https://" : "http://", Quoted(h.host));
  const std::string what = absl::StrCat("cookie-authenticated ", Quoted(h.method), " from origin ", Quoted(h.origin));
  const std::string fix = "; send Authorization: Bearer <token> (det-cli and the dashboard do)";
  if (!h.origin.empty()) {
    if (!SameOrigin(h.origin, h.host, h.tls)) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, " refused: cross-origin (the master is ", master, ")", fix));
    }
  } else if (h.sec_fetch_site != "same-origin") {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " refused: neither an Origin header naming ", master, " nor Sec-Fetch-Site: same-origin", fix));
  }
  if (!JsonContentType(h.content_type)) {
    return absl::PermissionDeniedError(absl::StrCat(what, " refused: Content-Type ", Quoted(h.content_type),
                                                    " is not application/json", fix));
  }
  return absl::OkStatus();
}

absl::Status CheckCookieWrite(const httplib::Request& req, bool tls) {
  CsrfHeaders h;
  h.method = req.method;
  h.authorization = req.get_header_value("Authorization");
  h.cookie = req.get_header_value("Cookie");
  h.origin = req.get_header_value("Origin");
  h.sec_fetch_site = req.get_header_value("Sec-Fetch-Site");
  h.content_type = req.get_header_value("Content-Type");
  h.host = req.get_header_value("Host");
  h.tls = tls;
  return CheckCookieWrite(h);
}

}  // namespace det::master
