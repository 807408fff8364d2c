// TrialHandle's setup errors (issue 45): an exception from the trial's
// constructor or a data loader builder is marked IsTrialSetupError, and
// stays marked through TrialController::Create, so det-trial exits
// kExitTrialSetupError; exceptions from other methods are not. And
// ReportableMessage, which bounds what det-trial reports to the master.
#include "trial_runtime/runtime/trial_loader.h"

#include <memory>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "trial_runtime/runtime/process_setup.h"
#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {
namespace {

class Items final : public det::Dataset {
 public:
  size_t size() const override { return 8; }
  det::Batch get(size_t i) override { return det::Batch({torch::full({1}, static_cast<double>(i))}); }
};

// Throws "missing data file" from the method its hparam throw_in names.
class ThrowingTrial final : public det::Trial {
 public:
  explicit ThrowingTrial(det::TrialContext& ctx) : where_(ctx.hparams().value("throw_in", std::string())) {
    MaybeThrow("constructor");
  }
  det::DataLoader build_training_data_loader() override {
    MaybeThrow("build_training_data_loader");
    return det::DataLoader(std::make_shared<Items>(), det::DataLoaderOptions(4));
  }
  det::DataLoader build_validation_data_loader() override {
    MaybeThrow("build_validation_data_loader");
    return det::DataLoader(std::make_shared<Items>(), det::DataLoaderOptions(4));
  }
  det::Metrics train_batch(det::Batch&, int64_t, int64_t) override {
    MaybeThrow("train_batch");
    return {{"loss", 0.0}};
  }
  det::Metrics evaluate_batch(det::Batch&, int64_t) override {
    MaybeThrow("evaluate_batch");
    return {{"loss", 0.0}};
  }

 private:
  void MaybeThrow(const std::string& here) const {
    if (where_ == here) throw std::runtime_error("missing data file in " + here);
  }
  std::string where_;
};

const DetTrialPlugin kPlugin = det::internal::PluginAdapter<ThrowingTrial>::Make("ThrowingTrial");

TrialInfo InfoThrowingIn(const std::string& where) {
  TrialInfo info;
  info.hparams = {{"throw_in", where}};
  return info;
}

class NoReports final : public Reporter {
 public:
  absl::Status ReportTrainingMetrics(int64_t, double, const MetricsMap&) override { return absl::OkStatus(); }
  absl::Status ReportValidationMetrics(int64_t, double, const MetricsMap&) override { return absl::OkStatus(); }
  absl::Status ReportCheckpoint(const SavedCheckpoint&, int64_t) override { return absl::OkStatus(); }
};

class NeverPreempt final : public PreemptionSource {
 public:
  bool ShouldPreempt() override { return false; }
};

TEST(TrialSetupErrorTest, ConstructorExceptionIsASetupError) {
  TrialContext context(InfoThrowingIn("constructor"));
  auto handle = TrialHandle::Create(&kPlugin, &context);
  ASSERT_FALSE(handle.ok());
  EXPECT_TRUE(IsTrialSetupError(handle.status())) << handle.status();
  EXPECT_EQ(handle.status().message(),
            "trial ThrowingTrial failed in its constructor: missing data file in constructor");
}

// Through TrialController::Create, as det-trial builds a trial.
TEST(TrialSetupErrorTest, LoaderBuilderExceptionsAreSetupErrors) {
  for (const std::string where : {"build_training_data_loader", "build_validation_data_loader"}) {
    TrialContext context(InfoThrowingIn(where));
    auto handle = TrialHandle::Create(&kPlugin, &context);
    ASSERT_TRUE(handle.ok()) << handle.status();
    NoReports reporter;
    NeverPreempt preemption;
    TrainingPlan plan;
    plan.max_length = Length{Length::Unit::kBatches, 2};
    auto controller = TrialController::Create(handle->get(), &context, &reporter, &preemption, plan);
    ASSERT_FALSE(controller.ok()) << where;
    EXPECT_TRUE(IsTrialSetupError(controller.status())) << controller.status();
    EXPECT_EQ(controller.status().message(),
              "trial ThrowingTrial failed in " + where + ": missing data file in " + where);
  }
}

TEST(TrialSetupErrorTest, OtherMethodsAndStatusesAreNotSetupErrors) {
  TrialContext context(InfoThrowingIn("train_batch"));
  auto handle = TrialHandle::Create(&kPlugin, &context);
  ASSERT_TRUE(handle.ok()) << handle.status();
  det::Batch batch({torch::zeros({4, 1})});
  auto trained = (*handle)->TrainBatch(batch, 0, 0);
  ASSERT_FALSE(trained.ok());
  EXPECT_FALSE(IsTrialSetupError(trained.status())) << trained.status();
  EXPECT_FALSE(IsTrialSetupError(absl::InternalError("trial T failed in its constructor: text alone")));
  EXPECT_FALSE(IsTrialSetupError(absl::OkStatus()));
}

TEST(ReportableMessageTest, ShortValidUtf8IsKept) {
  EXPECT_EQ(ReportableMessage("cannot open 'données.bin'"), "cannot open 'données.bin'");
  EXPECT_EQ(ReportableMessage(""), "");
}

TEST(ReportableMessageTest, InvalidBytesBecomeQuestionMarks) {
  // A Latin-1 file name, a lone continuation byte, a truncated sequence, an
  // overlong '/' and a surrogate.
  // (The expected text is split: "??!" would be a trigraph.)
  EXPECT_EQ(ReportableMessage("caf\xe9 \x80 \xe2\x82 \xc0\xaf \xed\xa0\x80!"), "caf? ? ?? ?? ??" "?!");
}

TEST(ReportableMessageTest, LongMessagesAreCutAtACharacterBoundaryAndMarked) {
  const std::string mark = " ... (truncated)";
  EXPECT_EQ(ReportableMessage(std::string(100, 'x'), 40), std::string(40 - mark.size(), 'x') + mark);
  // "é" is 2 bytes: 40 - 16 = 24 bytes leave 12 of them whole.
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "é";
  const std::string cut = ReportableMessage(accents, 40);
  EXPECT_EQ(cut, accents.substr(0, 24) + mark);
  std::string odd = "a" + accents;  // 25 bytes would split an "é": 23 kept
  EXPECT_EQ(ReportableMessage(odd, 40), odd.substr(0, 23) + mark);
  EXPECT_EQ(ReportableMessage(std::string(kMaxReportedErrorBytes, 'y')).size(), kMaxReportedErrorBytes);
  EXPECT_LE(ReportableMessage(std::string(1 << 20, 'y')).size(), kMaxReportedErrorBytes);
}

}  // namespace
}  // namespace det::runtime
