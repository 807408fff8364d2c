#include "master/service/request_auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

bool IsLoopbackPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return true;
  if (peer.size() > 256) return false;
  const std::string address = PeerAddress(peer);
  if (absl::StartsWith(peer, "ipv4:")) {
    in_addr a{};
    return inet_pton(AF_INET, address.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
  }
  in6_addr a6{};
  if (!absl::StartsWith(peer, "ipv6:") || inet_pton(AF_INET6, address.c_str(), &a6) != 1) return false;
  return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
}

absl::Status CheckSecretChannel(bool tls, absl::string_view peer) {
  if (tls || IsLoopbackPeer(peer)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "det-master sends S3 credentials only over TLS (--tls-cert) or to a trial on its own host; this call came "
      "over plaintext gRPC from ",
      PeerAddress(peer).substr(0, 64),
      ": start det-master with --tls-cert/--tls-key (and the agents with --tls-ca), or use shared_fs storage"));
}

absl::Status RequireAllocationToken(absl::string_view token) {
  if (token.empty()) return absl::UnauthenticatedError("missing allocation token (x-det-allocation-token)");
  return absl::OkStatus();
}

}  // namespace det::master
