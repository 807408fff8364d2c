// REST routes of users and tokens (rest_routes.h). Login and logout also
// set and clear the dashboard's det_token cookie (HttpOnly, SameSite=Strict).
#include "absl/strings/str_cat.h"
#include "det/api/v1/user.pb.h"
#include "master/http/rest_routes.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

void SetTokenCookie(const google::protobuf::Message& response, RestHeaders* headers) {
  const auto* login = google::protobuf::DynamicCastToGenerated<::det::api::v1::LoginResponse>(&response);
  if (login == nullptr) return;
  headers->emplace_back("Set-Cookie",
                        absl::StrCat(kTokenCookie, "=", login->token(), "; Path=/; HttpOnly; SameSite=Strict"));
}

void ClearTokenCookie(const google::protobuf::Message&, RestHeaders* headers) {
  headers->emplace_back("Set-Cookie", absl::StrCat(kTokenCookie, "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"));
}

}  // namespace

std::vector<RestRoute> AuthRoutes() {
  return {
      {"POST", "/api/v1/auth/login", "Login", RestBody::kJson, "", SetTokenCookie},
      {"POST", "/api/v1/auth/logout", "Logout", RestBody::kNone, "", ClearTokenCookie},
      {"GET", "/api/v1/me", "GetMe"},
      {"GET", "/api/v1/users", "GetUsers"},
      {"POST", "/api/v1/users", "PostUser", RestBody::kJson},
      {"PATCH", "/api/v1/users/{user_id}", "PatchUser", RestBody::kJson},
  };
}

}  // namespace det::master
