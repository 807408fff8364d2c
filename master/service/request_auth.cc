#include "master/service/request_auth.h"

#include "absl/strings/match.h"
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

absl::Status RequireAllocationToken(absl::string_view token) {
  if (token.empty()) return absl::UnauthenticatedError("missing allocation token (x-det-allocation-token)");
  return absl::OkStatus();
}

}  // namespace det::master
