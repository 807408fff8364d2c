#include "master/core/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "common/sha256.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

class AuthCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_ / "det.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    auth_ = Make();
  }
  std::unique_ptr<AuthCore> Make(std::string secret = "", std::function<void()> after_token_read = nullptr) {
    AuthOptions o;
    o.after_token_read_for_testing = std::move(after_token_read);
    o.pbkdf2_iterations = 1000;  // fast tests
    o.token_ttl_ms = 60000;
    o.cluster_secret = std::move(secret);
    o.now_ms = [this] { return now_ms_; };
    auto a = AuthCore::Create(store_.get(), o);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? std::move(*a) : nullptr;
  }
  ::det::api::v1::User Admin() {
    auto login = auth_->Login("admin", "");
    EXPECT_TRUE(login.ok()) << login.status();
    return login->user();
  }

  det::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<AuthCore> auth_;
  int64_t now_ms_ = 1700000000000;
};

TEST_F(AuthCoreTest, BootstrapsAdminAndDeterminedOnce) {
  auto users = auth_->GetUsers({});
  ASSERT_TRUE(users.ok());
  ASSERT_EQ(users->users_size(), 2);
  EXPECT_EQ(users->users(0).username(), "admin");
  EXPECT_TRUE(users->users(0).admin());
  EXPECT_EQ(users->users(1).username(), "determined");
  EXPECT_FALSE(users->users(1).admin());
  auto again = Make();  // a restart adds nobody
  EXPECT_EQ(again->GetUsers({})->users_size(), 2);
}

TEST_F(AuthCoreTest, LoginAuthenticateLogout) {
  EXPECT_EQ(auth_->Login("determined", "x").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_->Login("nobody", "").status().code(), absl::StatusCode::kUnauthenticated);
  // The same message whether the user exists or not.
  EXPECT_EQ(auth_->Login("nobody", "").status().message(), auth_->Login("determined", "x").status().message());
  // It says where the first password is written (issue 45).
  const std::string wrong(auth_->Login("nobody", "").status().message());
  EXPECT_THAT(wrong, ::testing::HasSubstr("det-cluster/master/initial-admin-password (deploy/cluster.sh)")) << wrong;
  EXPECT_THAT(wrong, ::testing::HasSubstr("/etc/det/initial-admin-password (deploy/install.sh)")) << wrong;
  auto login = auth_->Login("determined", "");
  ASSERT_TRUE(login.ok()) << login.status();
  EXPECT_EQ(login->token().size(), 64u);
  auto user = auth_->Authenticate(login->token());
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ(user->username(), "determined");
  EXPECT_EQ(auth_->Authenticate("").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_->Authenticate("nope").status().code(), absl::StatusCode::kUnauthenticated);
  // Tokens are stored hashed.
  EXPECT_EQ(store_->GetUserToken(login->token()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->GetUserToken(Sha256Hex(login->token())).ok());
  ASSERT_TRUE(auth_->Logout(login->token()).ok());
  EXPECT_EQ(auth_->Authenticate(login->token()).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthCoreTest, TokensExpire) {
  auto login = auth_->Login("determined", "");
  ASSERT_TRUE(login.ok());
  now_ms_ += 59999;
  EXPECT_TRUE(auth_->Authenticate(login->token()).ok());
  now_ms_ += 1;
  EXPECT_EQ(auth_->Authenticate(login->token()).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthCoreTest, PasswordsAreSaltedAndVerified) {
  std::string a = AuthCore::HashPassword("pw", 1000);
  std::string b = AuthCore::HashPassword("pw", 1000);
  EXPECT_NE(a, b);
  EXPECT_TRUE(AuthCore::VerifyPassword("pw", a));
  EXPECT_FALSE(AuthCore::VerifyPassword("pW", a));
  EXPECT_FALSE(AuthCore::VerifyPassword("pw", "garbage"));
}

// det-cli user link-with-agent-user (issue 46): only an admin links a user
// to a Unix uid/gid; both are needed, never root, never another user's uid.
TEST_F(AuthCoreTest, LinkingAUserToAUnixUidNeedsAnAdmin) {
  ::det::api::v1::PostUserRequest post;
  post.mutable_user()->set_username("alice");
  post.set_password("s3cret");
  auto alice = auth_->PostUser(Admin(), post);
  ASSERT_TRUE(alice.ok()) << alice.status();
  auto login = auth_->Login("alice", "s3cret");
  ASSERT_TRUE(login.ok());
  ::det::api::v1::PatchUserRequest link;
  link.set_user_id(alice->id());
  link.set_agent_uid(5000);
  link.set_agent_gid(5000);
  EXPECT_EQ(auth_->PatchUser(login->user(), login->token(), link).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto linked = auth_->PatchUser(Admin(), "", link);
  ASSERT_TRUE(linked.ok()) << linked.status();
  EXPECT_EQ(linked->agent_uid(), 5000);
  EXPECT_EQ(linked->agent_gid(), 5000);
  link.set_user_id(Admin().id());
  EXPECT_EQ(auth_->PatchUser(Admin(), "", link).status().code(), absl::StatusCode::kAlreadyExists);
  for (const auto& [uid, gid] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {999, 5}, {5001, 0}, {1LL << 32, 5}}) {
    link.set_agent_uid(uid);
    link.set_agent_gid(gid);
    EXPECT_EQ(auth_->PatchUser(Admin(), "", link).status().code(), absl::StatusCode::kInvalidArgument) << uid;
  }
  link.clear_agent_gid();
  link.set_agent_uid(5001);
  EXPECT_EQ(auth_->PatchUser(Admin(), "", link).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AuthCoreTest, UserManagementNeedsAdmin) {
  auto det_login = auth_->Login("determined", "");
  ASSERT_TRUE(det_login.ok());
  ::det::api::v1::PostUserRequest req;
  req.mutable_user()->set_username("alice");
  req.set_password("s3cret");
  EXPECT_EQ(auth_->PostUser(det_login->user(), req).status().code(), absl::StatusCode::kPermissionDenied);
  auto alice = auth_->PostUser(Admin(), req);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(auth_->PostUser(Admin(), req).status().code(), absl::StatusCode::kAlreadyExists);
  req.mutable_user()->set_username("bad/name");
  EXPECT_EQ(auth_->PostUser(Admin(), req).status().code(), absl::StatusCode::kInvalidArgument);

  auto a1 = auth_->Login("alice", "s3cret");
  auto a2 = auth_->Login("alice", "s3cret");
  ASSERT_TRUE(a1.ok() && a2.ok());
  // Alice may change her password (her other tokens are revoked) but not
  // make herself admin, nor touch other users.
  ::det::api::v1::PatchUserRequest patch;
  patch.set_user_id(alice->id());
  patch.set_admin(true);
  EXPECT_EQ(auth_->PatchUser(a1->user(), a1->token(), patch).status().code(), absl::StatusCode::kPermissionDenied);
  patch.clear_admin();
  patch.set_password("new");
  patch.set_old_password("s3cret");
  ASSERT_TRUE(auth_->PatchUser(a1->user(), a1->token(), patch).ok());
  EXPECT_TRUE(auth_->Authenticate(a1->token()).ok());
  EXPECT_EQ(auth_->Authenticate(a2->token()).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(auth_->Login("alice", "new").ok());
  patch.set_user_id(det_login->user().id());
  EXPECT_EQ(auth_->PatchUser(a1->user(), a1->token(), patch).status().code(), absl::StatusCode::kPermissionDenied);

  // Deactivating a user revokes their tokens; the last admin stays.
  ::det::api::v1::PatchUserRequest off;
  off.set_user_id(alice->id());
  off.set_active(false);
  ASSERT_TRUE(auth_->PatchUser(Admin(), "", off).ok());
  EXPECT_EQ(auth_->Authenticate(a1->token()).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_->Login("alice", "new").status().code(), absl::StatusCode::kUnauthenticated);
  off.set_user_id(Admin().id());
  EXPECT_EQ(auth_->PatchUser(Admin(), "", off).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(AuthCoreTest, ClusterSecret) {
  EXPECT_TRUE(auth_->CheckClusterSecret("").ok());  // none configured
  auto with = Make("s3cret");
  EXPECT_TRUE(with->CheckClusterSecret("s3cret").ok());
  EXPECT_EQ(with->CheckClusterSecret("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(with->CheckClusterSecret("s3cre").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(with->CheckClusterSecret("s3cret ").code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthLoopbackTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "127.0.0.256", "127.0.0", "128.0.0.1", "example.com", "",
                        "127.0.0.1.evil.com"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

TEST_F(AuthCoreTest, BuiltinEmptyPasswordsAreReportedUntilSet) {
  absl::Status st = auth_->RequireBuiltinPasswords();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("admin, determined"));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("--allow-empty-passwords"));
  EXPECT_EQ(auth_->SetInitialPasswords("").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(auth_->SetInitialPasswords("first").ok());
  EXPECT_TRUE(auth_->RequireBuiltinPasswords().ok());
  EXPECT_EQ(auth_->Login("admin", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(auth_->Login("admin", "first").ok());
  EXPECT_TRUE(auth_->Login("determined", "first").ok());
  // A later start with another file changes nothing: the passwords are set.
  ASSERT_TRUE(auth_->SetInitialPasswords("second").ok());
  EXPECT_TRUE(auth_->Login("admin", "first").ok());
  EXPECT_EQ(auth_->Login("admin", "second").status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthCoreTest, OwnPasswordChangeNeedsTheOldOne) {
  auto det = auth_->Login("determined", "");
  ASSERT_TRUE(det.ok());
  ::det::api::v1::PatchUserRequest patch;
  patch.set_user_id(det->user().id());
  patch.set_password("n3w");
  absl::Status st = auth_->PatchUser(det->user(), det->token(), patch).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("old_password"));
  patch.set_old_password("wrong");
  st = auth_->PatchUser(det->user(), det->token(), patch).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("old_password"));
  EXPECT_TRUE(auth_->Login("determined", "").ok());  // unchanged
  patch.set_old_password("");
  ASSERT_TRUE(auth_->PatchUser(det->user(), det->token(), patch).ok());
  EXPECT_TRUE(auth_->Login("determined", "n3w").ok());
  // An admin changing their own password needs it too; another user's not.
  auto admin = auth_->Login("admin", "");
  ASSERT_TRUE(admin.ok());
  ::det::api::v1::PatchUserRequest own;
  own.set_user_id(admin->user().id());
  own.set_password("adm1n");
  EXPECT_EQ(auth_->PatchUser(admin->user(), admin->token(), own).status().code(),
            absl::StatusCode::kInvalidArgument);
  patch.clear_old_password();
  patch.set_password("reset");
  ASSERT_TRUE(auth_->PatchUser(admin->user(), admin->token(), patch).ok());
  EXPECT_TRUE(auth_->Login("determined", "reset").ok());
}

TEST_F(AuthCoreTest, FailedLoginsAreThrottledPerUserAndAddress) {
  // Five failures are allowed; the sixth attempt is refused without a check
  // even with the right password, and the backoff doubles.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(auth_->Login("determined", "x", "10.0.0.1").status().code(), absl::StatusCode::kUnauthenticated);
  }
  EXPECT_EQ(auth_->Login("determined", "x", "10.0.0.2").status().code(), absl::StatusCode::kUnauthenticated);
  auto refused = auth_->Login("determined", "", "10.0.0.3");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("too many failed logins, retry in 1 s"));
  now_ms_ += 1000;
  EXPECT_TRUE(auth_->Login("determined", "", "10.0.0.3").ok());  // a success clears the user's count
  EXPECT_TRUE(auth_->Login("determined", "", "10.0.0.3").ok());
  // Unknown names are throttled alike (no enumeration by the answer).
  for (int i = 0; i < 6; ++i) auth_->Login("nobody", "x", "10.0.0.4").IgnoreError();
  EXPECT_EQ(auth_->Login("nobody", "x", "10.0.0.5").status().code(), absl::StatusCode::kResourceExhausted);
  // Per address: over 20 failures across many names block the address only.
  for (int i = 0; i < 21; ++i) auth_->Login(absl::StrCat("u", i), "x", "10.0.0.9").IgnoreError();
  EXPECT_EQ(auth_->Login("admin", "", "10.0.0.9").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(auth_->Login("admin", "", "10.0.0.10").ok());
  // Backoff doubles: 1 s, 2 s, 4 s...
  for (int i = 0; i < 5; ++i) auth_->Login("admin", "x", "").IgnoreError();
  now_ms_ += 60 * 1000;  // still inside the window
  EXPECT_EQ(auth_->Login("admin", "x", "").status().code(), absl::StatusCode::kUnauthenticated);  // 6th: 1 s
  now_ms_ += 1000;
  EXPECT_EQ(auth_->Login("admin", "x", "").status().code(), absl::StatusCode::kUnauthenticated);  // 7th: 2 s
  EXPECT_THAT(std::string(auth_->Login("admin", "", "").status().message()), ::testing::HasSubstr("retry in 2 s"));
  // After the backoff and a quiet window, the count starts again.
  now_ms_ += 16 * 60 * 1000;
  EXPECT_TRUE(auth_->Login("admin", "", "").ok());
}

// A stolen token is no password oracle: wrong old passwords count as failed
// logins of that user, and past the limit even the right one waits.
TEST_F(AuthCoreTest, WrongOldPasswordsAreThrottledLikeLogins) {
  auto det = auth_->Login("determined", "");
  ASSERT_TRUE(det.ok());
  ::det::api::v1::PatchUserRequest patch;
  patch.set_user_id(det->user().id());
  patch.set_password("n3w");
  patch.set_old_password("guess");
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(auth_->PatchUser(det->user(), det->token(), patch).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(auth_->PatchUser(det->user(), det->token(), patch).status().code(), absl::StatusCode::kPermissionDenied);
  patch.set_old_password("");
  absl::Status st = auth_->PatchUser(det->user(), det->token(), patch).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("retry in 1 s"));
  EXPECT_EQ(auth_->Login("determined", "", "10.0.0.1").status().code(), absl::StatusCode::kResourceExhausted);
  now_ms_ += 1000;
  EXPECT_TRUE(auth_->PatchUser(det->user(), det->token(), patch).ok());
  EXPECT_TRUE(auth_->Login("determined", "n3w").ok());
}

TEST_F(AuthCoreTest, UnknownNamesCostOneHashLikeKnownOnes) {
  int64_t before = AuthCore::Pbkdf2RunsForTesting();
  auth_->Login("determined", "wrong").IgnoreError();
  const int64_t known = AuthCore::Pbkdf2RunsForTesting() - before;
  before = AuthCore::Pbkdf2RunsForTesting();
  auth_->Login("nobody", "wrong").IgnoreError();
  const int64_t unknown = AuthCore::Pbkdf2RunsForTesting() - before;
  EXPECT_EQ(known, 1);
  EXPECT_EQ(unknown, known);
}

// A token read just before its revocation must not be cached after it:
// Logout (and a password change) run between Authenticate's read of the
// token row and its cache insert.
TEST_F(AuthCoreTest, RevocationWinsTheRaceWithTheTokenCache) {
  std::string victim;
  std::function<void()> revoke;
  bool armed = false;
  auth_ = Make("", [&] {
    if (!armed) return;
    armed = false;
    revoke();
  });
  auto login = auth_->Login("determined", "");
  ASSERT_TRUE(login.ok());
  revoke = [&] { ASSERT_TRUE(auth_->Logout(login->token()).ok()); };
  armed = true;
  auth_->Authenticate(login->token()).IgnoreError();  // read, then revoked, then (not) cached
  EXPECT_FALSE(armed);
  EXPECT_EQ(auth_->Authenticate(login->token()).status().code(), absl::StatusCode::kUnauthenticated);

  // The same with a password change revoking the user's other tokens.
  auto a = auth_->Login("determined", "");
  auto b = auth_->Login("determined", "");
  ASSERT_TRUE(a.ok() && b.ok());
  revoke = [&] {
    ::det::api::v1::PatchUserRequest patch;
    patch.set_user_id(a->user().id());
    patch.set_password("n3w");
    patch.set_old_password("");
    ASSERT_TRUE(auth_->PatchUser(a->user(), a->token(), patch).ok());
  };
  armed = true;
  auth_->Authenticate(b->token()).IgnoreError();
  EXPECT_FALSE(armed);
  EXPECT_EQ(auth_->Authenticate(b->token()).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(auth_->Authenticate(a->token()).ok());
}

}  // namespace
}  // namespace det::master
