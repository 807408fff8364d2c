#include "common/length.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;

TEST(LengthTest, ToStringNamesTheUnit) {
  EXPECT_EQ(ToString(Length{Length::Unit::kBatches, 937}), "937 batches");
  EXPECT_EQ(ToString(Length{Length::Unit::kRecords, 60000}), "60000 records");
  EXPECT_EQ(ToString(Length{Length::Unit::kEpochs, 3}), "3 epochs");
  EXPECT_EQ(ToString(Length{Length::Unit::kEpochs, 1}), "1 epoch");
  EXPECT_EQ(ToString(Length{Length::Unit::kBatches, 1}), "1 batch");
}

TEST(LengthTest, BatchesConvertAsIs) {
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kBatches, 937}, 32, 0), 937);
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kBatches, 0}, 0, 0), 0);
}

TEST(LengthTest, RecordsRoundUpToWholeBatches) {
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kRecords, 64}, 32, 0), 2);
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kRecords, 65}, 32, 0), 3);
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kRecords, 1}, 32, 0), 1);
}

TEST(LengthTest, RecordsNeedAPositiveBatchSize) {
  auto b = ToBatches(Length{Length::Unit::kRecords, 64}, 0, 0, "min_validation_period");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("'min_validation_period'"));
}

TEST(LengthTest, EpochsUseRecordsPerEpoch) {
  // 60000 records / 64 = 937.5 -> 938 batches per epoch.
  int64_t per_epoch = EpochLengthInBatches(64, 60000, 10);
  EXPECT_EQ(per_epoch, 938);
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kEpochs, 2}, 64, per_epoch), 1876);
}

TEST(LengthTest, EpochsFallBackToTheLoaderLength) {
  EXPECT_EQ(EpochLengthInBatches(64, 0, 10), 10);
  EXPECT_EQ(*ToBatches(Length{Length::Unit::kEpochs, 3}, 64, EpochLengthInBatches(64, 0, 10)), 30);
}

TEST(LengthTest, EpochsWithoutAnEpochLengthAreAFailedPrecondition) {
  EXPECT_EQ(EpochLengthInBatches(64, 0, 0), 0);
  auto b = ToBatches(Length{Length::Unit::kEpochs, 3}, 64, 0, "searcher.max_length");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("'searcher.max_length' (3 epochs)"));
  EXPECT_THAT(b.status().message(), HasSubstr("records_per_epoch"));
}

TEST(LengthTest, NegativeAndOverflowingLengthsAreRejected) {
  EXPECT_EQ(ToBatches(Length{Length::Unit::kBatches, -1}, 32, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToBatches(Length{Length::Unit::kEpochs, std::numeric_limits<int64_t>::max() / 2}, 32, 3)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LengthTest, JsonRoundTrip) {
  for (Length l : {Length{Length::Unit::kBatches, 5}, Length{Length::Unit::kRecords, 100},
                   Length{Length::Unit::kEpochs, 2}}) {
    nlohmann::json j = LengthToJson(l);
    EXPECT_EQ(j.size(), 1u);
    EXPECT_EQ(*LengthFromJson(j), l);
  }
  EXPECT_EQ(LengthToJson(Length{Length::Unit::kEpochs, 2}), nlohmann::json::parse(R"({"epochs": 2})"));
  EXPECT_EQ(*LengthFromJson(nlohmann::json(7)), (Length{Length::Unit::kBatches, 7}));
}

TEST(LengthTest, JsonRejectsBadShapes) {
  for (const char* text : {R"({"batches": 1, "epochs": 2})", R"({"steps": 3})", R"({"batches": -1})", R"("10")",
                           R"({})", R"({"batches": 1.5})"}) {
    auto l = LengthFromJson(nlohmann::json::parse(text), "searcher.max_length");
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(l.status().message(), HasSubstr("'searcher.max_length'"));
  }
}

TEST(LengthTest, UnitNames) {
  EXPECT_EQ(*ParseLengthUnit("records"), Length::Unit::kRecords);
  EXPECT_FALSE(ParseLengthUnit("steps").ok());
  EXPECT_EQ(UnitName(Length::Unit::kEpochs), "epochs");
}

}  // namespace
}  // namespace det
