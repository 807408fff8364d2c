#include "master/core/auth.h"

#include <gtest/gtest.h>

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
  std::unique_ptr<AuthCore> Make(std::string secret = "") {
    AuthOptions o;
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

}  // namespace
}  // namespace det::master
