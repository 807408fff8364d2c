// Mixed precision through the TrialContext (CPU: bfloat16 autocast; the loss
// scaler's algorithm is device independent and is exercised on CPU too).
#include "det/context.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "trial_runtime/sdk/phase_hook.h"

namespace det {
namespace {

TrialInfo CpuInfo() {
  TrialInfo info;
  info.trial_seed = 3;
  info.global_batch_size = 8;
  return info;
}

TEST(MixedPrecisionTest, CpuDefaultsToBfloat16WithoutLossScaling) {
  TrialContext context(CpuInfo());
  EXPECT_FALSE(context.mixed_precision());
  context.configure_mixed_precision();
  EXPECT_TRUE(context.mixed_precision());
  EXPECT_EQ(context.autocast_dtype(), torch::kBFloat16);
  EXPECT_EQ(context.grad_scaler(), nullptr);
}

TEST(MixedPrecisionTest, UnsupportedSettingsNameTheOption) {
  TrialContext context(CpuInfo());
  try {
    context.configure_mixed_precision(MixedPrecisionOptions().dtype(torch::kHalf));
    FAIL() << "float16 autocast on CPU accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dtype Half is not supported by autocast on cpu"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(context.configure_mixed_precision(MixedPrecisionOptions().dtype(torch::kDouble)),
               std::invalid_argument);
  EXPECT_THROW(context.configure_mixed_precision(MixedPrecisionOptions().backoff_factor(1.5)), std::invalid_argument);
  EXPECT_THROW(context.configure_mixed_precision(MixedPrecisionOptions().growth_interval(0)), std::invalid_argument);
  EXPECT_FALSE(context.mixed_precision());
}

TEST(MixedPrecisionTest, AutocastGuardCastsInsideAndRestoresAfter) {
  TrialContext plain(CpuInfo());
  TrialContext amp(CpuInfo());
  amp.configure_mixed_precision();
  torch::nn::Linear linear(4, 2);
  const torch::Tensor x = torch::ones({3, 4});
  {
    AutocastGuard guard(plain);  // no mixed precision: no-op
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
  }
  {
    AutocastGuard guard(amp);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard off(amp, /*enabled=*/false);
      EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
    }
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
}

// A tiny regression model stepped through the context.
struct Model {
  explicit Model(TrialContext& context) {
    torch::manual_seed(11);
    linear = context.wrap_model(torch::nn::Linear(4, 1));
    opt = context.wrap_optimizer(
        std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1)));
  }
  torch::Tensor Loss() {
    const torch::Tensor x = torch::linspace(-1, 1, 32).reshape({8, 4});
    return (linear->forward(x) - 0.5).pow(2).mean();
  }
  torch::nn::Linear linear{nullptr};
  std::shared_ptr<torch::optim::SGD> opt;
};

TEST(MixedPrecisionTest, LossScalingGivesTheUnscaledStep) {
  TrialContext plain(CpuInfo());
  Model a(plain);
  TrialContext scaled(CpuInfo());
  scaled.configure_mixed_precision(MixedPrecisionOptions().loss_scaling(true).init_scale(1024));
  Model b(scaled);
  ASSERT_NE(scaled.grad_scaler(), nullptr);
  for (int i = 0; i < 3; ++i) {
    plain.backward(a.Loss());
    plain.step_optimizer(*a.opt);
    scaled.backward(b.Loss());  // float32 forward: only the scaling differs
    scaled.step_optimizer(*b.opt);
    scaled.grad_scaler()->update();
  }
  // A power-of-two scale is exact: the same parameters to the last bit.
  EXPECT_TRUE(torch::equal(a.linear->weight, b.linear->weight));
  EXPECT_TRUE(torch::equal(a.linear->bias, b.linear->bias));
  EXPECT_EQ(scaled.grad_scaler()->skipped_steps(), 0);
}

TEST(MixedPrecisionTest, NonFiniteGradientSkipsTheStepAndBacksOff) {
  TrialContext context(CpuInfo());
  context.configure_mixed_precision(
      MixedPrecisionOptions().loss_scaling(true).init_scale(256).growth_interval(2).growth_factor(2).backoff_factor(
          0.25));
  Model m(context);
  GradScaler& scaler = *context.grad_scaler();
  const torch::Tensor before = m.linear->weight.clone();

  context.backward(m.Loss() * std::numeric_limits<float>::infinity());
  context.step_optimizer(*m.opt);
  scaler.update();
  EXPECT_TRUE(torch::equal(before, m.linear->weight)) << "a step with inf gradients was taken";
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_DOUBLE_EQ(scaler.scale(), 64);
  EXPECT_FALSE(m.linear->weight.grad().defined() && m.linear->weight.grad().abs().sum().item<double>() != 0)
      << "gradients of the skipped step were kept";

  for (int i = 0; i < 2; ++i) {
    context.backward(m.Loss());
    context.step_optimizer(*m.opt);
    scaler.update();
  }
  EXPECT_FALSE(torch::equal(before, m.linear->weight));
  EXPECT_DOUBLE_EQ(scaler.scale(), 128);  // grown after growth_interval finite steps
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // A batch without an optimizer step (gradient accumulation) leaves it be.
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.scale(), 128);

  GradScaler restored{MixedPrecisionOptions()};
  restored.load_state_dict(scaler.state_dict());
  EXPECT_DOUBLE_EQ(restored.scale(), 128);
  EXPECT_EQ(restored.skipped_steps(), 1);
  EXPECT_THROW(restored.load_state_dict(nlohmann::json{{"growth_tracker", 1}}), std::exception);
}

TEST(MixedPrecisionTest, Bfloat16TrainingStillLearns) {
  TrialContext context(CpuInfo());
  context.configure_mixed_precision();
  Model m(context);
  double first = 0, last = 0;
  for (int i = 0; i < 50; ++i) {
    AutocastGuard autocast(context);
    torch::Tensor loss = m.Loss();
    if (i == 0) first = loss.item<double>();
    last = loss.item<double>();
    context.backward(loss);
    context.step_optimizer(*m.opt);
  }
  EXPECT_EQ(m.linear->weight.scalar_type(), torch::kFloat);  // master weights stay float32
  EXPECT_LT(last, first * 0.5);
}

}  // namespace
}  // namespace det

namespace det {
namespace {

TrialInfo HparamInfo() {
  TrialInfo info;
  info.hparams = nlohmann::json::parse(R"({"hidden_size": 64.5, "units": 64, "units_f": 64.0, "big": 3e10,
    "big_int": 30000000000, "lr": 0.01, "lr_text": "0.01", "flag": true, "neg": -1, "name": "adam",
    "huge": 9007199254740993, "opt": {"momentum": 0.9}})");
  return info;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// get_hparam<T>(name) with an expected error: the hparam, its value, T and why.
std::string HparamError(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GetHparamTest, LosslessConversionsWork) {
  TrialContext ctx(HparamInfo());
  EXPECT_EQ(ctx.get_hparam<int64_t>("units"), 64);
  EXPECT_EQ(ctx.get_hparam<int>("units_f"), 64);  // an integral float: the master may store ints as doubles
  EXPECT_EQ(ctx.get_hparam<int64_t>("big"), 30000000000);
  EXPECT_EQ(ctx.get_hparam<uint32_t>("units"), 64u);
  EXPECT_EQ(ctx.get_hparam<double>("units"), 64.0);
  EXPECT_EQ(ctx.get_hparam<double>("lr"), 0.01);
  EXPECT_FLOAT_EQ(ctx.get_hparam<float>("lr"), 0.01f);
  EXPECT_EQ(ctx.get_hparam<double>("opt.momentum"), 0.9);
  EXPECT_TRUE(ctx.get_hparam<bool>("flag"));
  EXPECT_EQ(ctx.get_hparam<std::string>("name"), "adam");
  EXPECT_EQ(ctx.get_hparam<int64_t>("neg"), -1);
  EXPECT_EQ(ctx.get_hparam<int8_t>("units_f"), 64);
  EXPECT_EQ(ctx.get_hparam<int64_t>("huge"), 9007199254740993);
}

TEST(GetHparamTest, LossyConversionsNameTheHparamValueAndType) {
  TrialContext ctx(HparamInfo());
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<int64_t>("hidden_size"); }),
            "hyperparameter 'hidden_size' has value 64.5, which get_hparam<int64_t> cannot convert without loss: "
            "it has a fractional part (read it as double, or make the hyperparameter an integer)");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<double>("lr_text"); }),
            "hyperparameter 'lr_text' has value \"0.01\", which get_hparam<double> cannot convert without loss: "
            "it is a string, not a number (write it unquoted in the config, or read it as std::string)");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<int32_t>("big"); }),
            "hyperparameter 'big' has value 30000000000.0, which get_hparam<int32_t> cannot convert without loss: "
            "it is outside int32_t's range -2147483648..2147483647");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<int32_t>("big_int"); }),
            "hyperparameter 'big_int' has value 30000000000, which get_hparam<int32_t> cannot convert without loss: "
            "it is outside int32_t's range -2147483648..2147483647");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<int>("flag"); }),
            "hyperparameter 'flag' has value true, which get_hparam<int32_t> cannot convert without loss: "
            "it is a bool, not a number (read it as get_hparam<bool>)");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<bool>("units"); }),
            "hyperparameter 'units' has value 64, which get_hparam<bool> cannot convert without loss: "
            "it is not true or false");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<double>("flag"); }),
            "hyperparameter 'flag' has value true, which get_hparam<double> cannot convert without loss: "
            "it is a bool, not a number (read it as get_hparam<bool>)");
  EXPECT_EQ(HparamError([&] { ctx.get_hparam<uint64_t>("neg"); }),
            "hyperparameter 'neg' has value -1, which get_hparam<uint64_t> cannot convert without loss: "
            "it is outside uint64_t's range 0..18446744073709551615");
  EXPECT_PRED2(Contains, HparamError([&] { ctx.get_hparam<double>("huge"); }), "integers beyond 2^53");
  EXPECT_PRED2(Contains, HparamError([&] { ctx.get_hparam<std::string>("units"); }),
                  "hyperparameter 'units' has value 64 of the wrong type");
  EXPECT_PRED2(Contains, HparamError([&] { ctx.get_hparam<double>("missing"); }),
                  "hyperparameter 'missing' is not defined");
}

// The profiler's groups are the runtime's: report_metrics refuses them
// (issue 48), as it refuses training and validation.
TEST(ReportMetricsTest, TheProfilersGroupsAreRefused) {
  TrialContext context(CpuInfo());
  for (const char* group : {"profiling", "system", "training", "validation"}) {
    EXPECT_THROW(context.report_metrics(group, {{"wall_s", 1e9}}), std::invalid_argument) << group;
  }
  EXPECT_NO_THROW(context.report_metrics("inference", {{"latency_ms", 3}}));
}

// The profiler's hook sees backward and step_optimizer, each entered and
// exited once, and nothing when no hook is installed.
class RecordingHook final : public internal::PhaseHook {
 public:
  void Enter(internal::SdkPhase p) noexcept override { events.push_back("+" + std::to_string(static_cast<int>(p))); }
  void Exit(internal::SdkPhase p) noexcept override { events.push_back("-" + std::to_string(static_cast<int>(p))); }
  std::vector<std::string> events;
};

TEST(PhaseHookTest, BackwardAndStepAreTimedThroughTheHook) {
  TrialContext context(CpuInfo());
  auto model = context.wrap_model(torch::nn::Linear(2, 1));
  auto opt = context.wrap_optimizer(std::make_shared<torch::optim::SGD>(model->parameters(), 0.1));
  RecordingHook hook;
  internal::SetPhaseHook(&hook);
  context.backward(model->forward(torch::ones({1, 2})).sum());
  context.step_optimizer(*opt);
  internal::SetPhaseHook(nullptr);
  EXPECT_EQ(hook.events, (std::vector<std::string>{"+0", "-0", "+2", "-2"}));
  context.backward(model->forward(torch::ones({1, 2})).sum());
  EXPECT_EQ(hook.events.size(), 4u) << "no hook: nothing recorded";
}

}  // namespace
}  // namespace det
