// Where a request's credentials are and how a user token is read from them,
// shared by the gRPC services (metadata) and the REST server (HTTP headers),
// so the two transports cannot disagree. Users are authenticated with it by
// ApiHandlers::Authenticate (api_handlers.h), for both transports.
//
// Credentials:
//   users   `authorization: Bearer <token>` (gRPC metadata or HTTP header),
//           or the `det_token` cookie (the dashboard);
//   agents  `x-det-cluster-secret: <secret>` on every det.agent.v1 call;
//   trials  `x-det-allocation-token: <token>` on every det.trial.v1 call,
//           checked against the allocation the request names.
//
// The only det.api.v1 calls that need no token are the kPublic ones of
// method_access.h.
#ifndef DET_MASTER_SERVICE_REQUEST_AUTH_H_
#define DET_MASTER_SERVICE_REQUEST_AUTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "det/api/v1/user.pb.h"
#include "master/core/auth.h"

namespace det::master {

// Whether det.api.v1.Determined `method` is callable without a token: Login,
// and GetMaster (version checks by clients before they log in; it reveals
// only the version, ids and whether auth is required). The table of who may
// call what is method_access.h.
bool IsUnauthenticatedMethod(absl::string_view method);

inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kClusterSecretKey[] = "x-det-cluster-secret";
inline constexpr char kAllocationTokenKey[] = "x-det-allocation-token";
inline constexpr char kTokenCookie[] = "det_token";

// The user token of a request: "Bearer <t>" in `authorization`, else the
// det_token cookie in `cookie` (a Cookie header), else "".
std::string UserToken(absl::string_view authorization, absl::string_view cookie);

// The IP address of a gRPC peer URI ("ipv4:10.0.0.1:5000" -> "10.0.0.1",
// "ipv6:%5B::1%5D:5000" or "ipv6:[::1]:5000" -> "::1"); the input without
// its scheme when it has no port.
std::string PeerAddress(absl::string_view peer);

// Whether gRPC peer URI `peer` is on this host: ipv4 127.0.0.0/8, ipv6 ::1
// or ::ffff:127.x.x.x, unix: or unix-abstract:.
bool IsLoopbackPeer(absl::string_view peer);

// For a reply that holds a secret (GetCheckpointStorageCredentials): OK when
// the connection is TLS (`tls`) or `peer` is on this host; otherwise
// FailedPrecondition naming --tls-cert, since plaintext gRPC can be read by
// anyone on the network path.
absl::Status CheckSecretChannel(bool tls, absl::string_view peer);

// Unauthenticated when `token` (x-det-allocation-token) is empty; the token's
// match with the named allocation is checked by MasterCore (PermissionDenied).
absl::Status RequireAllocationToken(absl::string_view token);

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_REQUEST_AUTH_H_
