#include "master/service/request_auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "master/service/method_access.h"

namespace det::master {

bool IsUnauthenticatedMethod(absl::string_view method) { return AccessOf(method).access == Access::kPublic; }

std::string UserToken(absl::string_view authorization, absl::string_view cookie) {
  absl::string_view a = absl::StripAsciiWhitespace(authorization);
  if (absl::ConsumePrefix(&a, "Bearer ") || absl::ConsumePrefix(&a, "bearer ")) {
    return std::string(absl::StripAsciiWhitespace(a));
  }
  for (absl::string_view part : absl::StrSplit(cookie, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, kTokenCookie) && absl::ConsumePrefix(&part, "=")) return std::string(part);
  }
  return "";
}

std::string PeerAddress(absl::string_view peer) {
  std::string p = absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}});
  absl::string_view v = p;
  if (!absl::ConsumePrefix(&v, "ipv4:") && !absl::ConsumePrefix(&v, "ipv6:")) return std::string(v);
  if (absl::ConsumePrefix(&v, "[")) return std::string(v.substr(0, v.find(']')));
  size_t colon = v.rfind(':');
  return std::string(colon == absl::string_view::npos ? v : v.substr(0, colon));
}

absl::Status RequireAllocationToken(absl::string_view token) {
  if (token.empty()) return absl::UnauthenticatedError("missing allocation token (x-det-allocation-token)");
  return absl::OkStatus();
}

}  // namespace det::master
