#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace det {
namespace {

TEST(GrpcStatusTest, OkStaysOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "Call").ok());
}

TEST(GrpcStatusTest, CodesAndMessagesCarryOver) {
  grpc::Status g = ToGrpcStatus(absl::NotFoundError("experiment 7 not found"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "experiment 7 not found");

  absl::Status a = FromGrpcStatus(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "agent 'x' is already connected"));
  EXPECT_EQ(a.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(a.message(), "agent 'x' is already connected");
}

TEST(GrpcStatusTest, WhatPrefixesTheMessage) {
  absl::Status a =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), "ReportCheckpoint");
  EXPECT_EQ(a.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.message(), "ReportCheckpoint: connection refused");
}

TEST(GrpcStatusTest, EveryCanonicalCodeRoundTrips) {
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    absl::Status back = FromGrpcStatus(ToGrpcStatus(absl::Status(code, "m")));
    EXPECT_EQ(back.code(), code) << c;
    EXPECT_EQ(back.message(), "m") << c;
  }
}

}  // namespace
}  // namespace det
