// Store: the users and user_tokens tables.
#include "master/store/store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;
using store_internal::ColText;

#define DET_USER_COLUMNS \
  "id, username, display_name, password_hash, admin, active, created_ms, modified_ms, agent_uid, agent_gid"
constexpr char kInsertUser[] =
    "INSERT INTO users(username, display_name, password_hash, admin, active, created_ms, modified_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateUser[] =
    "UPDATE users SET display_name = ?, password_hash = ?, admin = ?, active = ?, modified_ms = ? WHERE id = ?";
constexpr char kGetUser[] = "SELECT " DET_USER_COLUMNS " FROM users WHERE id = ?";
constexpr char kGetUserByName[] = "SELECT " DET_USER_COLUMNS " FROM users WHERE username = ?";
constexpr char kListUsers[] = "SELECT " DET_USER_COLUMNS " FROM users ORDER BY id";
// agent_uids_given (migration 14, filled by a trigger) keeps every uid ever
// recorded for a user, so its highest uid in a range never goes down: a
// relinked user's old uid is never handed to a new user.
constexpr char kMaxAgentUidIn[] = "SELECT COALESCE(MAX(uid), 0) FROM agent_uids_given WHERE uid BETWEEN ? AND ?";
constexpr char kUidOwner[] = "SELECT id FROM users WHERE agent_uid = ? AND id != ?";
constexpr char kLinkAgentIds[] = "UPDATE users SET agent_uid = ?, agent_gid = ? WHERE id = ?";
constexpr char kSetAgentIds[] = "UPDATE users SET agent_uid = ?, agent_gid = ? WHERE id = ? AND agent_uid = 0";
constexpr char kInsertUserToken[] =
    "INSERT INTO user_tokens(token_hash, user_id, created_ms, expires_ms) VALUES (?, ?, ?, ?)";
constexpr char kGetUserToken[] =
    "SELECT token_hash, user_id, created_ms, expires_ms FROM user_tokens WHERE token_hash = ?";
constexpr char kDeleteUserToken[] = "DELETE FROM user_tokens WHERE token_hash = ?";
constexpr char kDeleteUserTokens[] = "DELETE FROM user_tokens WHERE user_id = ? AND token_hash != ?";
constexpr char kDeleteExpiredUserTokens[] = "DELETE FROM user_tokens WHERE expires_ms <= ?";

UserRow ReadUser(sqlite3_stmt* s) {
  UserRow u;
  u.id = ColInt(s, 0);
  u.username = ColText(s, 1);
  u.display_name = ColText(s, 2);
  u.password_hash = ColText(s, 3);
  u.admin = ColInt(s, 4) != 0;
  u.active = ColInt(s, 5) != 0;
  u.created_ms = ColInt(s, 6);
  u.modified_ms = ColInt(s, 7);
  u.agent_uid = ColInt(s, 8);
  u.agent_gid = ColInt(s, 9);
  return u;
}

// Refuses ids a trial must never run as: root's, and the master's own
// (its uid owns the data dir and secrets; its group, usually the daemons'
// group, owns every checkpoint).
absl::Status CheckNotPrivilegedIds(int64_t uid, int64_t gid) {
  if (uid == 0 || gid == 0) {
    return absl::InvalidArgumentError(absl::StrCat("agent_uid ", uid, " / agent_gid ", gid,
                                                   ": trials never run as root's uid or group (0)"));
  }
  if (uid == static_cast<int64_t>(geteuid()) || gid == static_cast<int64_t>(getegid())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "agent_uid ", uid, " / agent_gid ", gid, ": det-master runs as uid ", geteuid(), " gid ", getegid(),
        " (the daemons' account and group, which own the data dir and every checkpoint): link the user to a uid "
        "and gid no account or group uses"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- Users and tokens ----

absl::StatusOr<int64_t> Store::InsertUser(const UserRow& row) {
  return Write([&]() -> absl::StatusOr<int64_t> {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertUser));
    Binder b(st.get());
    b.Text(row.username)
        .Text(row.display_name)
        .Text(row.password_hash)
        .Int(row.admin ? 1 : 0)
        .Int(row.active ? 1 : 0)
        .Int(row.created_ms)
        .Int(row.modified_ms);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return absl::AlreadyExistsError(absl::StrCat("user '", row.username, "' already exists"));
    }
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert user ", row.username));
    return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  });
}

absl::Status Store::UpdateUser(const UserRow& row) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateUser));
    Binder b(st.get());
    b.Text(row.display_name)
        .Text(row.password_hash)
        .Int(row.admin ? 1 : 0)
        .Int(row.active ? 1 : 0)
        .Int(row.modified_ms)
        .Int(row.id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update user ", row.id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("user ", row.id, " not found"));
    return absl::OkStatus();
  });
}

absl::StatusOr<UserRow> Store::GetUser(int64_t id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUser));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("user ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get user ", id));
  return ReadUser(st.get());
}

absl::StatusOr<UserRow> Store::GetUserByName(const std::string& username) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUserByName));
  Binder b(st.get());
  b.Text(username);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind username");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("user '", username, "' not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get user ", username));
  return ReadUser(st.get());
}

absl::StatusOr<std::vector<UserRow>> Store::ListUsers() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListUsers));
  std::vector<UserRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadUser(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list users");
  return out;
}

absl::StatusOr<std::pair<int64_t, int64_t>> Store::AgentIdsOfUser(const std::string& username, int64_t first,
                                                                   int64_t last) {
  // Only the UPDATE runs through Write: a refusal (an unknown user, a used-up
  // range) must not fail the caller's Transaction.
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(UserRow user, GetUserByName(username));
  if (user.agent_uid != 0) return std::make_pair(user.agent_uid, user.agent_gid);
  if (first < 1000 || first > last) return std::make_pair(int64_t{0}, int64_t{0});
  int64_t highest = 0;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kMaxAgentUidIn));
    Binder b(st.get());
    b.Int(first).Int(last);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind uid range");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_ROW) return Error(rc, "read the largest assigned uid");
    highest = ColInt(st.get(), 0);
  }
  const int64_t uid = highest == 0 ? first : highest + 1;
  if (uid > last) {
    return absl::ResourceExhaustedError(absl::StrCat("every uid of --trial-uid-range ", first, "-", last,
                                                     " is taken: widen the range to run trials of user '", username,
                                                     "'"));
  }
  DET_RETURN_IF_ERROR(Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSetAgentIds));
    Binder b(st.get());
    b.Int(uid).Int(uid).Int(user.id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent uid");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("record the uid of user ", username));
    return absl::OkStatus();
  }));
  return std::make_pair(uid, uid);
}

absl::Status Store::LinkUserAgentIds(int64_t user_id, int64_t uid, int64_t gid) {
  DET_RETURN_IF_ERROR(CheckNotPrivilegedIds(uid, gid));
  return Write([&]() -> absl::Status {
    {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUidOwner));
      Binder b(st.get());
      b.Int(uid).Int(user_id);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent uid");
      const int rc = sqlite3_step(st.get());
      if (rc == SQLITE_ROW) {
        return absl::AlreadyExistsError(absl::StrCat("agent_uid ", uid, " belongs to user ", ColInt(st.get(), 0),
                                                     ": each user needs a uid of their own"));
      }
      if (rc != SQLITE_DONE) return Error(rc, "look up agent uid");
    }
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kLinkAgentIds));
    Binder b(st.get());
    b.Int(uid).Int(gid).Int(user_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent uid");
    const int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("link user ", user_id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("user ", user_id, " not found"));
    return absl::OkStatus();
  });
}

absl::Status Store::InsertUserToken(const UserTokenRow& row) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertUserToken));
    Binder b(st.get());
    b.Text(row.token_hash).Int(row.user_id).Int(row.created_ms).Int(row.expires_ms);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user token");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(absl::StrCat("cannot store token: user ", row.user_id, " not found"));
    }
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY) return absl::AlreadyExistsError("token already exists");
    if (rc != SQLITE_DONE) return Error(rc, "insert user token");
    return absl::OkStatus();
  });
}

absl::StatusOr<UserTokenRow> Store::GetUserToken(const std::string& token_hash) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUserToken));
  Binder b(st.get());
  b.Text(token_hash);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind token hash");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError("token not found");
  if (rc != SQLITE_ROW) return Error(rc, "get user token");
  UserTokenRow t;
  t.token_hash = ColText(st.get(), 0);
  t.user_id = ColInt(st.get(), 1);
  t.created_ms = ColInt(st.get(), 2);
  t.expires_ms = ColInt(st.get(), 3);
  return t;
}

absl::Status Store::DeleteUserToken(const std::string& token_hash) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteUserToken));
    Binder b(st.get());
    b.Text(token_hash);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind token hash");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, "delete user token");
    return absl::OkStatus();
  });
}

absl::Status Store::DeleteUserTokens(int64_t user_id, const std::string& except_token_hash) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteUserTokens));
    Binder b(st.get());
    b.Int(user_id).Text(except_token_hash);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user id");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete tokens of user ", user_id));
    return absl::OkStatus();
  });
}

absl::Status Store::DeleteExpiredUserTokens(int64_t now_ms) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteExpiredUserTokens));
    Binder b(st.get());
    b.Int(now_ms);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind time");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, "delete expired user tokens");
    return absl::OkStatus();
  });
}

}  // namespace master
}  // namespace det
