// S3DeleteRetries without S3: bounded (the oldest dropped when full), one
// entry per uuid, at most `max` taken per pass, backoff 1 min doubling to 1 h.
#include "master/core/s3_delete_retries.h"

#include <gtest/gtest.h>

namespace det::master {
namespace {

CheckpointRow Row(const std::string& uuid) {
  CheckpointRow row;
  row.uuid = uuid;
  row.storage_path = "s3://b/p/" + uuid;
  return row;
}

TEST(S3DeleteRetriesTest, BoundedOnePerUuidAndTakenWhenDue) {
  S3DeleteRetries retries(2);
  CheckpointStorageConfig storage;
  storage.type = "s3";
  retries.Add(Row("a"), storage, "ws", 0);
  retries.Add(Row("a"), storage, "ws", 0);  // listed: ignored
  retries.Add(Row("b"), storage, "ws", 10);
  retries.Add(Row("c"), storage, "ws", 20);  // full: a is dropped
  EXPECT_EQ(retries.size(), 2u);
  EXPECT_TRUE(retries.TakeDue(60'000 + 9, 100).empty());  // b is due at 60'010
  auto due = retries.TakeDue(60'000 + 20, 1);              // both due, one per pass
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].row.uuid, "b");
  EXPECT_EQ(due[0].workspace, "ws");
  EXPECT_EQ(retries.size(), 1u);
  due = retries.TakeDue(60'000 + 20, 100);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].row.uuid, "c");
  EXPECT_EQ(retries.size(), 0u);
  retries.Restore(std::move(due[0]));  // not tried: still due
  EXPECT_EQ(retries.TakeDue(60'000 + 20, 100).size(), 1u);
}

TEST(S3DeleteRetriesTest, BackoffDoublesUpToAnHour) {
  S3DeleteRetries retries;
  retries.Add(Row("a"), CheckpointStorageConfig(), "ws", 0);
  int64_t now = 60'000;
  std::vector<int64_t> backoffs;
  for (int i = 0; i < 8; ++i) {
    auto due = retries.TakeDue(now, 100);
    ASSERT_EQ(due.size(), 1u) << i;
    int64_t backoff = retries.Again(std::move(due[0]), now);
    backoffs.push_back(backoff / 60'000);
    EXPECT_TRUE(retries.TakeDue(now + backoff - 1, 100).empty());
    now += backoff;
  }
  EXPECT_EQ(backoffs, (std::vector<int64_t>{2, 4, 8, 16, 32, 60, 60, 60}));
}

// A failure pauses every retry (review 2, A1): a store that hangs costs the
// background thread one request's deadline per pause, however many entries
// are due; the pause doubles with each failure in a row and a success resets it.
TEST(S3DeleteRetriesTest, AFailurePausesEveryRetryAndTheSuccessResetsThePause) {
  S3DeleteRetries retries;
  for (const char* uuid : {"a", "b", "c"}) retries.Add(Row(uuid), CheckpointStorageConfig(), "ws", 0);
  auto due = retries.TakeDue(60'000, 1);
  ASSERT_EQ(due.size(), 1u);
  retries.Again(std::move(due[0]), 60'000);  // a: due at 3 min; all paused for 1 min
  EXPECT_TRUE(retries.TakeDue(60'000, 100).empty());
  EXPECT_TRUE(retries.TakeDue(119'999, 100).empty());  // b and c are due, but paused
  due = retries.TakeDue(120'000, 1);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].row.uuid, "b");
  retries.Again(std::move(due[0]), 120'000);  // the second failure in a row: paused for 2 min
  EXPECT_TRUE(retries.TakeDue(239'999, 100).empty());
  due = retries.TakeDue(240'000, 1);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].row.uuid, "c");
  retries.Succeeded();  // c deleted: the next failure pauses for 1 min again
  due = retries.TakeDue(240'000, 1);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].row.uuid, "a");
  retries.Again(std::move(due[0]), 240'000);
  EXPECT_TRUE(retries.TakeDue(299'999, 100).empty());
  EXPECT_EQ(retries.TakeDue(300'000, 100).size(), 1u);  // b, due since 4 min
}

}  // namespace
}  // namespace det::master
