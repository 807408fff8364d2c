#include "master/core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <regex>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <spdlog/spdlog.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;
using google::protobuf::util::TimeUtil;

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    // RAND_bytes only fails when the OS has no entropy source: never go on
    // with predictable tokens.
    spdlog::critical("OpenSSL RAND_bytes failed");
    std::abort();
  }
  return out;
}

std::atomic<int64_t> pbkdf2_runs{0};

// Most throttling entries kept; when full, the one whose window began first
// is dropped.
constexpr size_t kMaxThrottled = 10000;

std::string Pbkdf2(const std::string& password, const std::string& salt, int iterations) {
  pbkdf2_runs.fetch_add(1, std::memory_order_relaxed);
  unsigned char out[32];
  PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                    reinterpret_cast<const unsigned char*>(salt.data()), static_cast<int>(salt.size()), iterations,
                    EVP_sha256(), sizeof(out), out);
  return std::string(reinterpret_cast<char*>(out), sizeof(out));
}

absl::Status ValidUsername(const std::string& name) {
  static const std::regex* const kRe = new std::regex("[a-zA-Z0-9_.-]{1,64}");
  if (!std::regex_match(name, *kRe)) {
    return absl::InvalidArgumentError(
        absl::StrCat("user.username: '", name, "' must be 1-64 characters of [a-zA-Z0-9_.-]"));
  }
  return absl::OkStatus();
}

// The same for an unknown user and a wrong password (no user enumeration);
// it names where the first password is written (gRPC and REST share it).
absl::Status Unauthenticated() {
  return absl::UnauthenticatedError(
      "invalid credentials (wrong username or password); the first password of admin and determined is in "
      "det-cluster/master/initial-admin-password (deploy/cluster.sh) or /etc/det/initial-admin-password "
      "(deploy/install.sh)");
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  std::vector<std::string> octets = absl::StrSplit(host, '.');
  if (octets.size() != 4 || octets[0] != "127") return false;
  for (const std::string& o : octets) {
    int v = -1;
    if (o.empty() || o.size() > 3 || !absl::SimpleAtoi(o, &v) || v < 0 || v > 255) return false;
  }
  return true;
}

int64_t AuthCore::Pbkdf2RunsForTesting() { return pbkdf2_runs.load(); }

apiv1::User UserProto(const UserRow& row) {
  apiv1::User u;
  u.set_id(row.id);
  u.set_username(row.username);
  u.set_display_name(row.display_name);
  u.set_admin(row.admin);
  u.set_active(row.active);
  *u.mutable_created_time() = TimeUtil::MillisecondsToTimestamp(row.created_ms);
  *u.mutable_modified_time() = TimeUtil::MillisecondsToTimestamp(row.modified_ms);
  u.set_agent_uid(row.agent_uid);
  u.set_agent_gid(row.agent_gid);
  return u;
}

std::string AuthCore::HashPassword(const std::string& password, int iterations) {
  std::string salt = RandomBytes(16);
  return absl::StrCat("pbkdf2-sha256$", iterations, "$", absl::BytesToHexString(salt), "$",
                      absl::BytesToHexString(Pbkdf2(password, salt, iterations)));
}

bool AuthCore::VerifyPassword(const std::string& password, const std::string& stored_hash) {
  std::vector<std::string> parts = absl::StrSplit(stored_hash, '$');
  int iterations = 0;
  if (parts.size() != 4 || parts[0] != "pbkdf2-sha256" || !absl::SimpleAtoi(parts[1], &iterations) ||
      iterations <= 0) {
    return false;
  }
  std::string salt = absl::HexStringToBytes(parts[2]);
  std::string expected = absl::HexStringToBytes(parts[3]);
  return ConstantTimeEquals(Pbkdf2(password, salt, iterations), expected);
}

bool AuthCore::ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

AuthCore::AuthCore(Store* store, AuthOptions options)
    : store_(store),
      options_(std::move(options)),
      dummy_hash_(HashPassword(RandomBytes(16), options_.pbkdf2_iterations)) {}

int64_t AuthCore::Now() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<AuthCore>> AuthCore::Create(Store* store, AuthOptions options) {
  std::unique_ptr<AuthCore> auth(new AuthCore(store, std::move(options)));
  DET_RETURN_IF_ERROR(auth->Bootstrap());
  DET_RETURN_IF_ERROR(store->DeleteExpiredUserTokens(auth->Now()));
  return auth;
}

absl::Status AuthCore::Bootstrap() {
  DET_ASSIGN_OR_RETURN(std::vector<UserRow> users, store_->ListUsers());
  if (!users.empty()) return absl::OkStatus();
  Store::Transaction txn(store_);
  for (const char* name : {"admin", "determined"}) {
    UserRow row;
    row.username = name;
    row.password_hash = HashPassword("", options_.pbkdf2_iterations);
    row.admin = std::string(name) == "admin";
    row.created_ms = row.modified_ms = Now();
    DET_RETURN_IF_ERROR(store_->InsertUser(row).status());
  }
  DET_RETURN_IF_ERROR(txn.Commit());
  spdlog::warn("created users 'admin' and 'determined' with empty passwords; set passwords with "
               "`det-cli user change-password`");
  return absl::OkStatus();
}

absl::Status AuthCore::CheckThrottle(const std::string& key, int64_t now) {
  auto it = failures_.find(key);
  if (it == failures_.end() || it->second.blocked_until_ms <= now) return absl::OkStatus();
  const int64_t secs = (it->second.blocked_until_ms - now + 999) / 1000;
  return absl::ResourceExhaustedError(absl::StrCat("too many failed logins, retry in ", secs, " s"));
}

void AuthCore::RecordFailure(const std::string& key, int allowed, int64_t now) {
  auto it = failures_.find(key);
  if (it == failures_.end()) {
    if (failures_.size() >= kMaxThrottled) {
      failures_.erase(std::min_element(failures_.begin(), failures_.end(), [](const auto& a, const auto& b) {
        return a.second.first_ms < b.second.first_ms;
      }));
    }
    it = failures_.emplace(key, Failures{0, now, 0}).first;
  }
  Failures& f = it->second;
  // A quiet window (no failure for a whole window, no backoff running)
  // starts the count again.
  if (now - f.first_ms > options_.login_failure_window_ms && f.blocked_until_ms <= now) f = Failures{0, now, 0};
  ++f.count;
  const int over = f.count - allowed;
  if (over > 0) {
    const int64_t backoff = std::min<int64_t>(options_.login_backoff_max_ms, int64_t{1000} << std::min(over - 1, 20));
    f.blocked_until_ms = now + backoff;
    f.first_ms = now;  // the window runs on while failures continue
  }
}

absl::StatusOr<apiv1::LoginResponse> AuthCore::Login(const std::string& username, const std::string& password,
                                                     const std::string& client_address) {
  const std::string user_key = absl::StrCat("user:", username.substr(0, 128));
  const std::string addr_key = absl::StrCat("addr:", client_address);
  {
    const int64_t now = Now();
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(CheckThrottle(user_key, now));
    if (!client_address.empty()) DET_RETURN_IF_ERROR(CheckThrottle(addr_key, now));
  }
  auto row = store_->GetUserByName(username);
  if (!row.ok() && row.status().code() != absl::StatusCode::kNotFound) return row.status();
  // An unknown name costs one hash, like a known one, so that timing does
  // not reveal which usernames exist.
  const bool verified = VerifyPassword(password, row.ok() ? row->password_hash : dummy_hash_);
  if (!row.ok() || !verified || !row->active) {
    const int64_t now = Now();
    std::lock_guard<std::mutex> l(mu_);
    RecordFailure(user_key, options_.login_failures_allowed, now);
    if (!client_address.empty()) RecordFailure(addr_key, options_.login_address_failures_allowed, now);
    return Unauthenticated();
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    failures_.erase(user_key);
  }
  std::string token = absl::BytesToHexString(RandomBytes(32));
  UserTokenRow t;
  t.token_hash = Sha256Hex(token);
  t.user_id = row->id;
  t.created_ms = Now();
  t.expires_ms = t.created_ms + options_.token_ttl_ms;
  DET_RETURN_IF_ERROR(store_->InsertUserToken(t));
  apiv1::LoginResponse resp;
  resp.set_token(token);
  *resp.mutable_user() = UserProto(*row);
  *resp.mutable_expires_time() = TimeUtil::MillisecondsToTimestamp(t.expires_ms);
  return resp;
}

absl::StatusOr<apiv1::User> AuthCore::Authenticate(const std::string& token) {
  if (token.empty()) return absl::UnauthenticatedError("missing token: log in (det-cli user login) first");
  const std::string hash = Sha256Hex(token);
  const int64_t now = Now();
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    generation = generation_;
    auto it = cache_.find(hash);
    if (it != cache_.end()) {
      if (it->second.expires_ms > now) return it->second.user;
      cache_.erase(it);
    }
  }
  auto t = store_->GetUserToken(hash);
  if (!t.ok()) {
    if (t.status().code() == absl::StatusCode::kNotFound) {
      return absl::UnauthenticatedError("invalid or revoked token: log in again");
    }
    return t.status();
  }
  if (t->expires_ms <= now) return absl::UnauthenticatedError("token expired: log in again");
  auto row = store_->GetUser(t->user_id);
  if (!row.ok() || !row->active) return absl::UnauthenticatedError("invalid or revoked token: log in again");
  apiv1::User user = UserProto(*row);
  if (options_.after_token_read_for_testing) options_.after_token_read_for_testing();
  std::lock_guard<std::mutex> l(mu_);
  // A revocation since the row was read: answer from the row (it was valid
  // when read, as if this call had come first) but do not cache it.
  if (generation != generation_) return user;
  if (cache_.size() > 10000) cache_.clear();
  cache_[hash] = CachedToken{user, t->expires_ms};
  return user;
}

void AuthCore::RevokeCached() {
  std::lock_guard<std::mutex> l(mu_);
  ++generation_;
  cache_.clear();
}

absl::Status AuthCore::Logout(const std::string& token) {
  absl::Status st = store_->DeleteUserToken(Sha256Hex(token));
  // After the row is gone (see the file comment), even when deleting failed.
  RevokeCached();
  return st;
}

absl::StatusOr<apiv1::GetUsersResponse> AuthCore::GetUsers(const apiv1::GetUsersRequest& req) {
  if (req.offset() < 0) return absl::InvalidArgumentError("offset: must be >= 0");
  if (req.limit() < 0) return absl::InvalidArgumentError("limit: must be >= 0");
  DET_ASSIGN_OR_RETURN(std::vector<UserRow> rows, store_->ListUsers());
  apiv1::GetUsersResponse resp;
  int32_t end = req.limit() == 0 ? static_cast<int32_t>(rows.size())
                                 : std::min<int32_t>(static_cast<int32_t>(rows.size()), req.offset() + req.limit());
  for (int32_t i = req.offset(); i < end; ++i) *resp.add_users() = UserProto(rows[i]);
  auto* p = resp.mutable_pagination();
  p->set_offset(req.offset());
  p->set_limit(req.limit());
  p->set_start_index(std::min<int32_t>(req.offset(), static_cast<int32_t>(rows.size())));
  p->set_end_index(std::max(end, p->start_index()));
  p->set_total(static_cast<int32_t>(rows.size()));
  return resp;
}

absl::StatusOr<apiv1::User> AuthCore::PostUser(const apiv1::User& caller, const apiv1::PostUserRequest& req) {
  if (!caller.admin()) return absl::PermissionDeniedError("creating users needs an admin");
  DET_RETURN_IF_ERROR(ValidUsername(req.user().username()));
  UserRow row;
  row.username = req.user().username();
  row.display_name = req.user().display_name();
  row.password_hash = HashPassword(req.password(), options_.pbkdf2_iterations);
  row.admin = req.user().admin();
  row.active = true;
  row.created_ms = row.modified_ms = Now();
  DET_ASSIGN_OR_RETURN(row.id, store_->InsertUser(row));
  return UserProto(row);
}

absl::Status AuthCore::CheckOldPassword(const apiv1::User& caller, const apiv1::PatchUserRequest& req) {
  if (!req.has_old_password()) return absl::InvalidArgumentError("old_password: required to change your own password");
  // Guessing the old password is guessing a login: the same per-user count
  // and backoff (a stolen token must not become a password oracle).
  const std::string user_key = absl::StrCat("user:", caller.username().substr(0, 128));
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(CheckThrottle(user_key, Now()));
  }
  DET_ASSIGN_OR_RETURN(UserRow row, store_->GetUser(req.user_id()));
  if (VerifyPassword(req.old_password(), row.password_hash)) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  RecordFailure(user_key, options_.login_failures_allowed, Now());
  return absl::PermissionDeniedError("old_password: does not match the current password");
}

namespace {

// PatchUserRequest.agent_uid/agent_gid: both, an unprivileged uid (not a
// system account's, never root) and a gid other than root's.
absl::Status ValidateAgentIds(const apiv1::PatchUserRequest& req) {
  if (!req.has_agent_uid() || !req.has_agent_gid()) {
    return absl::InvalidArgumentError("agent_uid and agent_gid go together: link a user to both");
  }
  if (req.agent_uid() < 1000 || req.agent_uid() >= 4294967295LL) {
    return absl::InvalidArgumentError(absl::StrCat("agent_uid ", req.agent_uid(),
                                                   ": must be 1000..4294967294 (an unprivileged uid, the same on "
                                                   "every agent)"));
  }
  if (req.agent_gid() < 1 || req.agent_gid() >= 4294967295LL) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent_gid ", req.agent_gid(), ": must be 1..4294967294 (never root's group)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<apiv1::User> AuthCore::PatchUser(const apiv1::User& caller, const std::string& caller_token,
                                                const apiv1::PatchUserRequest& req) {
  const bool self = caller.id() == req.user_id();
  const bool link = req.has_agent_uid() || req.has_agent_gid();
  if (!caller.admin() && (!self || req.has_admin() || req.has_active() || link)) {
    return absl::PermissionDeniedError("changing another user, or admin/active/agent_uid, needs an admin");
  }
  if (link) DET_RETURN_IF_ERROR(ValidateAgentIds(req));
  if (req.has_password() && self) DET_RETURN_IF_ERROR(CheckOldPassword(caller, req));
  Store::Transaction txn(store_);
  DET_ASSIGN_OR_RETURN(UserRow row, store_->GetUser(req.user_id()));
  if (req.has_display_name()) row.display_name = req.display_name();
  if (req.has_password()) row.password_hash = HashPassword(req.password(), options_.pbkdf2_iterations);
  if (req.has_admin()) row.admin = req.admin();
  if (req.has_active()) row.active = req.active();
  if (!row.admin || !row.active) {
    DET_ASSIGN_OR_RETURN(std::vector<UserRow> users, store_->ListUsers());
    bool other_admin = std::any_of(users.begin(), users.end(),
                                   [&](const UserRow& u) { return u.id != row.id && u.admin && u.active; });
    if (!other_admin) return absl::FailedPreconditionError("the cluster needs at least one active admin");
  }
  row.modified_ms = Now();
  DET_RETURN_IF_ERROR(store_->UpdateUser(row));
  if (link) {
    DET_RETURN_IF_ERROR(store_->LinkUserAgentIds(row.id, req.agent_uid(), req.agent_gid()));
    row.agent_uid = req.agent_uid();
    row.agent_gid = req.agent_gid();
  }
  if (req.has_password() || !row.active) {
    DET_RETURN_IF_ERROR(store_->DeleteUserTokens(row.id, self && row.active ? Sha256Hex(caller_token) : ""));
  }
  DET_RETURN_IF_ERROR(txn.Commit());
  RevokeCached();
  return UserProto(row);
}

absl::Status AuthCore::SetInitialPasswords(const std::string& password) {
  if (password.empty()) return absl::InvalidArgumentError("initial admin password: empty");
  for (const char* name : {"admin", "determined"}) {
    auto row = store_->GetUserByName(name);
    if (!row.ok()) {
      if (row.status().code() == absl::StatusCode::kNotFound) continue;
      return row.status();
    }
    if (!VerifyPassword("", row->password_hash)) continue;
    row->password_hash = HashPassword(password, options_.pbkdf2_iterations);
    row->modified_ms = Now();
    DET_RETURN_IF_ERROR(store_->UpdateUser(*row));
    spdlog::info("set the initial password of '{}'", name);
  }
  RevokeCached();
  return absl::OkStatus();
}

absl::Status AuthCore::RequireBuiltinPasswords() {
  std::vector<std::string> empty;
  for (const char* name : {"admin", "determined"}) {
    auto row = store_->GetUserByName(name);
    if (!row.ok()) {
      if (row.status().code() == absl::StatusCode::kNotFound) continue;
      return row.status();
    }
    if (row->active && VerifyPassword("", row->password_hash)) empty.push_back(name);
  }
  if (empty.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "user(s) ", absl::StrJoin(empty, ", "),
      " have an empty password and the master listens beyond loopback: set passwords first (pass "
      "--initial-admin-password-file FILE, or start once on --host 127.0.0.1 and run `det-cli user "
      "change-password`), or pass --allow-empty-passwords to accept the risk"));
}

absl::Status AuthCore::CheckClusterSecret(absl::string_view presented) const {
  if (options_.cluster_secret.empty()) return absl::OkStatus();
  if (presented.empty()) return absl::UnauthenticatedError("missing cluster secret (x-det-cluster-secret)");
  // Compare digests so the comparison time does not depend on the length.
  if (!ConstantTimeEquals(Sha256Hex(presented), Sha256Hex(options_.cluster_secret))) {
    return absl::UnauthenticatedError("wrong cluster secret");
  }
  return absl::OkStatus();
}

}  // namespace det::master
