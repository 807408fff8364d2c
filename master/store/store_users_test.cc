// Store: the Unix uid/gid recorded per det user (det-master
// --trial-uid-range; issue 46, tenants).
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

class StoreUsersTest : public TempStoreTest {
 protected:
  StoreUsersTest() : TempStoreTest("det_store_users_test") {}
  void AddUser(const std::string& name) {
    UserRow u;
    u.username = name;
    u.password_hash = "pbkdf2-sha256$1$00$00";
    ASSERT_TRUE(store_->InsertUser(u).ok());
  }
};

// Each user gets the next uid of the range when first asked, keeps it, and
// no two users share one; gid = uid.
TEST_F(StoreUsersTest, EachUserGetsTheirOwnUidFromTheRange) {
  AddUser("alice");
  AddUser("bob");
  AddUser("carol");
  auto alice = store_->AgentIdsOfUser("alice", 200000, 200001);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->first, 200000);
  EXPECT_EQ(alice->second, 200000);
  auto bob = store_->AgentIdsOfUser("bob", 200000, 200001);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->first, 200001);
  // Asked again: the same uid, recorded (also in ListUsers).
  EXPECT_EQ(store_->AgentIdsOfUser("alice", 200000, 200001)->first, 200000);
  EXPECT_EQ(store_->GetUserByName("bob")->agent_uid, 200001);
  EXPECT_EQ(store_->GetUserByName("bob")->agent_gid, 200001);
  // The range is used up: a clear error, nothing recorded.
  auto carol = store_->AgentIdsOfUser("carol", 200000, 200001);
  EXPECT_EQ(carol.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(carol.status().message()).find("--trial-uid-range 200000-200001"), std::string::npos)
      << carol.status();
  EXPECT_EQ(store_->GetUserByName("carol")->agent_uid, 0);
  // A recorded uid survives a narrower range, and is not handed out again
  // from a wider one.
  auto carol_wider = store_->AgentIdsOfUser("carol", 200000, 200009);
  ASSERT_TRUE(carol_wider.ok());
  EXPECT_EQ(carol_wider->first, 200002);
  EXPECT_EQ(store_->AgentIdsOfUser("unknown", 200000, 200009).status().code(), absl::StatusCode::kNotFound);
}

// An admin's link: recorded, used from then on instead of the range, and
// refused for a uid another user has.
TEST_F(StoreUsersTest, ALinkedUidIsTheUsersOwn) {
  AddUser("alice");
  AddUser("bob");
  const int64_t alice = store_->GetUserByName("alice")->id;
  const int64_t bob = store_->GetUserByName("bob")->id;
  ASSERT_TRUE(store_->LinkUserAgentIds(alice, 5001, 5002).ok());
  auto ids = store_->AgentIdsOfUser("alice", 200000, 200009);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->first, 5001);
  EXPECT_EQ(ids->second, 5002);
  EXPECT_EQ(store_->LinkUserAgentIds(bob, 5001, 5001).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(store_->LinkUserAgentIds(alice, 5001, 5003).ok()) << "relinking one's own uid";
  EXPECT_EQ(store_->LinkUserAgentIds(999, 6000, 6000).code(), absl::StatusCode::kNotFound);
}

// A uid once given is never given again, even after its user is relinked
// away from it (the highest uid given in the range never goes down).
TEST_F(StoreUsersTest, ARelinkedUsersOldUidIsNeverHandedOutAgain) {
  AddUser("alice");
  AddUser("bob");
  AddUser("carol");
  ASSERT_EQ(store_->AgentIdsOfUser("alice", 200000, 200009)->first, 200000);
  ASSERT_TRUE(store_->LinkUserAgentIds(store_->GetUserByName("alice")->id, 5001, 5001).ok());
  auto bob = store_->AgentIdsOfUser("bob", 200000, 200009);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->first, 200001) << "alice's old uid 200000 handed to bob";
  // A linked uid inside the range counts as given too.
  ASSERT_TRUE(store_->LinkUserAgentIds(store_->GetUserByName("alice")->id, 200005, 200005).ok());
  ASSERT_TRUE(store_->LinkUserAgentIds(store_->GetUserByName("alice")->id, 5001, 5001).ok());
  EXPECT_EQ(store_->AgentIdsOfUser("carol", 200000, 200009)->first, 200006);
}

// Links to root's ids or the master's own euid/egid (the daemons' account
// and group: the data dir, every checkpoint) are refused.
TEST_F(StoreUsersTest, LinksToRootOrTheMastersOwnIdsAreRefused) {
  AddUser("alice");
  const int64_t alice = store_->GetUserByName("alice")->id;
  EXPECT_EQ(store_->LinkUserAgentIds(alice, 0, 5001).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->LinkUserAgentIds(alice, 5001, 0).code(), absl::StatusCode::kInvalidArgument);
  // As root, take another effective gid for a moment (as a master running
  // as det:det would have).
  const gid_t daemon_gid = geteuid() == 0 ? 4242 : getegid();
  ASSERT_TRUE(geteuid() != 0 || setegid(daemon_gid) == 0);
  const absl::Status by_gid = store_->LinkUserAgentIds(alice, 5001, daemon_gid);
  const absl::Status by_uid = store_->LinkUserAgentIds(alice, geteuid(), 5001);
  ASSERT_TRUE(geteuid() != 0 || setegid(0) == 0);
  EXPECT_EQ(by_gid.code(), absl::StatusCode::kInvalidArgument) << by_gid;
  EXPECT_NE(std::string(by_gid.message()).find("det-master runs as"), std::string::npos) << by_gid;
  EXPECT_EQ(by_uid.code(), absl::StatusCode::kInvalidArgument) << by_uid;
  EXPECT_EQ(store_->GetUserByName("alice")->agent_uid, 0);
}

// Without a range (or with one below 1000, where system users live) no uid
// is recorded: the agent falls back to its --trial-user.
TEST_F(StoreUsersTest, NoRangeNoUid) {
  AddUser("alice");
  EXPECT_EQ(store_->AgentIdsOfUser("alice", 0, 0)->first, 0);
  EXPECT_EQ(store_->AgentIdsOfUser("alice", 0, 999)->first, 0);
  EXPECT_EQ(store_->GetUserByName("alice")->agent_uid, 0);
}

// A refusal inside a Transaction does not fail the Transaction.
TEST_F(StoreUsersTest, RefusalInsideATransactionKeepsIt) {
  AddUser("alice");
  Store::Transaction txn(store_.get());
  EXPECT_EQ(store_->AgentIdsOfUser("nobody", 200000, 200009).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->AgentIdsOfUser("alice", 200000, 200009)->first, 200000);
  ASSERT_TRUE(txn.Commit().ok());
  EXPECT_EQ(store_->GetUserByName("alice")->agent_uid, 200000);
}

}  // namespace
}  // namespace master
}  // namespace det
