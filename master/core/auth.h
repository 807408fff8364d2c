// AuthCore: users, passwords, login tokens and the agents' cluster secret.
// The gRPC services and the REST server both call it (through
// master/service/auth_context.h), so the two transports cannot disagree about
// who may call what.
//
// Passwords are stored as PBKDF2-HMAC-SHA256 with a random 16-byte salt
// ("pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>"). Tokens are 32 random
// bytes in hex; only their SHA-256 is stored, with an expiry.
//
// On first start (no users in the database) Create adds `admin` (admin) and
// `determined` (not admin), both with an empty password, as Determined does;
// change them with PatchUser (`det-cli user change-password`), or set both
// with SetInitialPasswords (det-master --initial-admin-password-file). A
// master bound beyond loopback refuses to start while either is empty
// (RequireBuiltinPasswords) unless told --allow-empty-passwords.
//
// Logins are throttled per username and per client address: after
// `login_failures_allowed` failures within `login_failure_window_ms`, each
// further attempt is refused (ResourceExhausted, "retry in N s") until a
// backoff that doubles with every failure (capped) has passed. Unknown names
// are throttled and hashed like known ones, so neither the answer nor its
// timing reveals which names exist.
//
// Token revocation wins every race: Logout and PatchUser delete the rows
// first and then bump a generation under the cache mutex; Authenticate reads
// the generation before it reads the row and caches the token only when the
// generation is unchanged, so a token read just before its revocation is
// never cached after it.
//
// Thread-safe.
#ifndef DET_MASTER_CORE_AUTH_H_
#define DET_MASTER_CORE_AUTH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "det/api/v1/api.pb.h"
#include "master/store/store.h"

namespace det::master {

struct AuthOptions {
  // Lifetime of a login token.
  int64_t token_ttl_ms = int64_t{7} * 24 * 3600 * 1000;
  // PBKDF2 iterations for new password hashes (existing hashes keep theirs).
  int pbkdf2_iterations = 100000;
  // Agents must present this secret (constant-time compare); empty: agent
  // calls are not authenticated.
  std::string cluster_secret;
  // Unix milliseconds; tests inject a fake clock.
  std::function<int64_t()> now_ms;
  // Login throttling: failures allowed per username and per client address
  // (which many users may share) before backing off.
  int login_failures_allowed = 5;
  int login_address_failures_allowed = 20;
  int64_t login_failure_window_ms = 15 * 60 * 1000;
  int64_t login_backoff_max_ms = 15 * 60 * 1000;
  // Tests: runs in Authenticate between reading a token's row and caching it.
  std::function<void()> after_token_read_for_testing;
};

// Whether `host` (a --host value) is a loopback address: localhost,
// 127.0.0.0/8, ::1 (bracketed or not).
bool IsLoopbackHost(absl::string_view host);

class AuthCore {
 public:
  // Bootstraps `admin` and `determined` when the store has no users.
  static absl::StatusOr<std::unique_ptr<AuthCore>> Create(Store* store, AuthOptions options);

  // Checks the password and returns a new token. Unauthenticated with the same
  // message for an unknown user, a wrong password and an inactive user (and
  // the same work: one password hash). ResourceExhausted ("too many failed
  // logins ... retry in N s") while `username` or `client_address` (the
  // peer's IP, "" when unknown) is throttled; a success clears the
  // username's failures, not the address's.
  absl::StatusOr<::det::api::v1::LoginResponse> Login(const std::string& username, const std::string& password,
                                                      const std::string& client_address = "");

  // The active user owning `token`. Unauthenticated for an empty, unknown,
  // expired or revoked token, or an inactive user.
  absl::StatusOr<::det::api::v1::User> Authenticate(const std::string& token);

  // Revokes `token`. OK when it was unknown.
  absl::Status Logout(const std::string& token);

  // Sorted by id; offset/limit as in the proto (limit 0: all).
  absl::StatusOr<::det::api::v1::GetUsersResponse> GetUsers(const ::det::api::v1::GetUsersRequest& req);

  // Admin only (PermissionDenied otherwise). InvalidArgument for a bad
  // username; AlreadyExists when taken. An empty password is allowed (as in
  // Determined) so that scripts can create users and set passwords later.
  absl::StatusOr<::det::api::v1::User> PostUser(const ::det::api::v1::User& caller,
                                                const ::det::api::v1::PostUserRequest& req);

  // A user may change their own display_name and password; anything else
  // needs admin. Changing one's own password (admins too) needs the current
  // one in old_password: InvalidArgument when missing, PermissionDenied when
  // wrong (both name old_password); an admin changing another user's
  // password needs none. Changing a password revokes the user's other tokens
  // (`caller_token` survives). FailedPrecondition when the change would leave
  // no active admin.
  absl::StatusOr<::det::api::v1::User> PatchUser(const ::det::api::v1::User& caller, const std::string& caller_token,
                                                 const ::det::api::v1::PatchUserRequest& req);

  // Sets the password of each built-in user (`admin`, `determined`) that
  // still has the empty password (first start) to `password`, as
  // Determined's initial_user_password does; users with a password keep it.
  // InvalidArgument for an empty `password`.
  absl::Status SetInitialPasswords(const std::string& password);

  // OK when neither built-in user (`admin`, `determined`) that still exists
  // and is active has the empty password; FailedPrecondition naming them and
  // how to fix it otherwise.
  absl::Status RequireBuiltinPasswords();

  // OK when no cluster secret is configured or `presented` equals it
  // (constant time); Unauthenticated otherwise.
  absl::Status CheckClusterSecret(absl::string_view presented) const;
  bool cluster_secret_required() const { return !options_.cluster_secret.empty(); }

  // Password hashing, exposed for tests.
  static std::string HashPassword(const std::string& password, int iterations);
  static bool VerifyPassword(const std::string& password, const std::string& stored_hash);
  // Constant-time equality (length leaks only).
  static bool ConstantTimeEquals(absl::string_view a, absl::string_view b);
  // PBKDF2 evaluations so far, process-wide (tests: a login of an unknown
  // name costs the same as a wrong password).
  static int64_t Pbkdf2RunsForTesting();

 private:
  AuthCore(Store* store, AuthOptions options);
  absl::Status Bootstrap();
  int64_t Now() const;
  // Throttling: ResourceExhausted while `key` is backing off.
  absl::Status CheckThrottle(const std::string& key, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A user changing their own password: InvalidArgument without
  // old_password, PermissionDenied when it is wrong (counted as a failed
  // login of `caller`), ResourceExhausted while that user is throttled.
  absl::Status CheckOldPassword(const ::det::api::v1::User& caller, const ::det::api::v1::PatchUserRequest& req);
  void RecordFailure(const std::string& key, int allowed, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every cached token and makes in-flight Authenticate calls skip
  // caching (see the file comment). Call after the store change.
  void RevokeCached();

  Store* const store_;
  const AuthOptions options_;

  // token hash -> (user, expires_ms): spares a SQLite lookup per call.
  // Cleared whenever a user or token changes.
  struct CachedToken {
    ::det::api::v1::User user;
    int64_t expires_ms = 0;
  };
  std::mutex mu_;
  std::map<std::string, CachedToken> cache_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // "user:<name>" / "addr:<ip>" -> recent failures (at most kMaxThrottled).
  struct Failures {
    int count = 0;
    int64_t first_ms = 0;       // start of the window
    int64_t blocked_until_ms = 0;
  };
  std::map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
  // Verified against for unknown names (the same work as a real check).
  const std::string dummy_hash_;
};

// Converts a stored row to the API message (no password hash).
::det::api::v1::User UserProto(const UserRow& row);

}  // namespace det::master

#endif  // DET_MASTER_CORE_AUTH_H_
