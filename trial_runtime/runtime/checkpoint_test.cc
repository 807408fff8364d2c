#include "trial_runtime/runtime/checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trial_runtime/runtime/warm_start.h"

namespace det::runtime {
namespace {
namespace fs = std::filesystem;

class CounterCallback final : public Callback {
 public:
  nlohmann::json state_dict() override { return {{"n", n}}; }
  void load_state_dict(const nlohmann::json& s) override { n = s.at("n").get<int>(); }
  int n = 0;
};

struct Fixture {
  explicit Fixture(uint64_t seed) : context(Info(seed)) {
    torch::manual_seed(seed);
    model = context.wrap_model(torch::nn::Linear(4, 3));
    opt = context.wrap_optimizer(
        std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.1)));
    sched = context.wrap_lr_scheduler(std::make_shared<torch::optim::StepLR>(*opt, 2, 0.5),
                                      LRSchedulerStepMode::kStepEveryBatch);
    callbacks["counter"] = counter;
  }
  static TrialInfo Info(uint64_t seed) {
    TrialInfo i;
    i.trial_seed = seed;
    i.global_batch_size = 4;
    return i;
  }
  void Step() {
    auto loss = model->forward(torch::linspace(-1, 1, 32).reshape({8, 4})).pow(2).mean();
    context.backward(loss);
    context.step_optimizer(*opt);
    sched->step();
  }
  TrialContext context;
  torch::nn::Linear model{nullptr};
  std::shared_ptr<torch::optim::Adam> opt;
  std::shared_ptr<torch::optim::StepLR> sched;
  std::shared_ptr<CounterCallback> counter = std::make_shared<CounterCallback>();
  CallbackMap callbacks;
};

TEST(CheckpointTest, RestoredStateContinuesBitForBit) {
  std::string dir = (fs::temp_directory_path() / ("det-ckpt-test-" + NewUuid())).string();
  Fixture a(5);
  for (int i = 0; i < 3; ++i) a.Step();
  a.counter->n = 17;
  a.context.random_engine()();
  auto saved = SaveCheckpoint(dir, a.context, a.callbacks, {{"batches_trained", 3}});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_TRUE(fs::exists(saved->path + "/metadata.json"));
  EXPECT_GT(saved->resources.at("model_0.pt"), 0);
  const torch::Tensor next_draw = torch::randn({3});  // what the saved torch RNG yields next
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().filename().string().rfind(".tmp", 0), 0u);

  Fixture b(99);  // different init, RNG and step count
  auto meta = LoadCheckpoint(saved->path, b.context, b.callbacks);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ((*meta)["batches_trained"], 3);
  EXPECT_EQ(b.counter->n, 17);
  EXPECT_TRUE(torch::equal(torch::randn({3}), next_draw));
  EXPECT_EQ(GetSchedulerStepCount(*b.sched), GetSchedulerStepCount(*a.sched));
  EXPECT_EQ(b.context.random_engine()(), a.context.random_engine()());
  a.Step();
  b.Step();
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
  EXPECT_EQ(a.opt->param_groups()[0].options().get_lr(), b.opt->param_groups()[0].options().get_lr());
  fs::remove_all(dir);
}

TEST(CheckpointTest, LossScalerStateIsRestored) {
  std::string dir = (fs::temp_directory_path() / ("det-ckpt-test-" + NewUuid())).string();
  auto amp = MixedPrecisionOptions().loss_scaling(true).init_scale(512).growth_interval(3);
  Fixture a(5);
  a.context.configure_mixed_precision(amp);
  for (int i = 0; i < 2; ++i) {
    a.Step();
    a.context.grad_scaler()->update();
  }
  ASSERT_EQ(a.context.grad_scaler()->growth_tracker(), 2);
  auto saved = SaveCheckpoint(dir, a.context, a.callbacks, {{"batches_trained", 2}});
  ASSERT_TRUE(saved.ok()) << saved.status();
  Fixture b(99);
  b.context.configure_mixed_precision(amp);
  auto meta = LoadCheckpoint(saved->path, b.context, b.callbacks);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ((*meta)["autocast_dtype"], "BFloat16");
  EXPECT_EQ(b.context.grad_scaler()->growth_tracker(), 2);
  for (Fixture* f : {&a, &b}) {
    f->Step();
    f->context.grad_scaler()->update();
  }
  EXPECT_DOUBLE_EQ(b.context.grad_scaler()->scale(), 1024);  // grown on the third finite step
  EXPECT_DOUBLE_EQ(a.context.grad_scaler()->scale(), b.context.grad_scaler()->scale());
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
  fs::remove_all(dir);
}

TEST(CheckpointTest, MismatchedTrialIsRejected) {
  std::string dir = (fs::temp_directory_path() / ("det-ckpt-test-" + NewUuid())).string();
  Fixture a(1);
  auto saved = SaveCheckpoint(dir, a.context, a.callbacks, {{"batches_trained", 0}});
  ASSERT_TRUE(saved.ok());
  TrialContext other(Fixture::Info(1));
  auto meta = LoadCheckpoint(saved->path, other, {});
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadCheckpointMetadata(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

// The attack: a model built from other hparams (a PBT child that explored a
// width) restored a checkpoint of another shape; LibTorch's Module::load
// silently took the checkpoint's shapes, so the trial trained the parent's
// architecture under hparams that said another.
TEST(CheckpointTest, AModelOfAnotherShapeIsRefusedNamingTheTensor) {
  std::string dir = (fs::temp_directory_path() / ("det-ckpt-test-" + NewUuid())).string();
  Fixture a(1);
  auto saved = SaveCheckpoint(dir, a.context, a.callbacks, {{"batches_trained", 0}});
  ASSERT_TRUE(saved.ok()) << saved.status();
  TrialContext wider(Fixture::Info(1));
  auto model = wider.wrap_model(torch::nn::Linear(4, 5));  // 5 outputs, not 3
  wider.wrap_optimizer(std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.1)));
  wider.wrap_lr_scheduler(std::make_shared<torch::optim::StepLR>(*wider.optimizers()[0], 2, 0.5),
                          LRSchedulerStepMode::kStepEveryBatch);
  auto meta = LoadCheckpoint(saved->path, wider, {});
  ASSERT_FALSE(meta.ok());
  const std::string message(meta.status().message());
  EXPECT_NE(message.find("model_0.pt: 'weight' has shape [3, 4] there, the trial's model has [5, 4]"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("searcher.explore"), std::string::npos) << message;
  // Warm starts (model weights only) refuse it too (a fresh model: the
  // refused load left the first one partly loaded).
  TrialContext fresh(Fixture::Info(1));
  fresh.wrap_model(torch::nn::Linear(4, 5));
  absl::Status warm = LoadModelWeights(saved->path, fresh);
  ASSERT_FALSE(warm.ok());
  EXPECT_NE(std::string(warm.message()).find("'weight' has shape [3, 4] there"), std::string::npos) << warm;
  // The same shape still loads (the weights, bit for bit).
  Fixture same(2);
  ASSERT_TRUE(LoadModelWeights(saved->path, same.context).ok());
  EXPECT_TRUE(torch::equal(same.model->weight, a.model->weight));
  fs::remove_all(dir);
}

// Local mode's warm start: a uuid under the run's checkpoint root, never a
// path; a trial id needs a master.
TEST(CheckpointTest, LocalWarmStartFindsACheckpointByUuidUnderTheRootOnly) {
  const fs::path root = fs::temp_directory_path() / ("det_local_warm_" + std::to_string(::getpid()));
  fs::create_directories(root / "0f3c9a1e-5b2d-4c6e-8f10-112233445566");
  ExperimentConfig c;
  auto none = LocalWarmStartDir(c, root.string());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  c.searcher.source_checkpoint_uuid = "0f3c9a1e-5b2d-4c6e-8f10-112233445566";
  auto found = LocalWarmStartDir(c, root.string());
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(**found, (root / "0f3c9a1e-5b2d-4c6e-8f10-112233445566").string());
  c.searcher.source_checkpoint_uuid = "11111111-2222-4333-8444-555555555555";
  EXPECT_EQ(LocalWarmStartDir(c, root.string()).status().code(), absl::StatusCode::kNotFound);
  for (const char* attack : {"..", "../0f3c9a1e-5b2d-4c6e-8f10-112233445566", "/etc"}) {
    c.searcher.source_checkpoint_uuid = attack;
    auto refused = LocalWarmStartDir(c, root.string());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << attack;
    EXPECT_NE(refused.status().message().find("searcher.source_checkpoint_uuid"), std::string::npos) << attack;
  }
  c.searcher.source_checkpoint_uuid.reset();
  c.searcher.source_trial_id = 3;
  auto trial = LocalWarmStartDir(c, root.string());
  EXPECT_EQ(trial.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(trial.status().message().find("searcher.source_trial_id"), std::string::npos);
  fs::remove_all(root);
}


// Issue 46: temporary checkpoint directories left by a run that died
// mid-save are removed at the trial's next start, and only its own.
TEST(CheckpointTest, StaleTempDirsOfTheTrialAloneAreRemoved) {
  const fs::path root = fs::temp_directory_path() / ("det_ckpt_tmp_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "outside");
  std::ofstream(root / "outside" / "keep") << "x";
  TrialInfo info = Fixture::Info(3);
  info.trial_id = 7;
  TrialContext ctx(info);
  ctx.wrap_model(torch::nn::Linear(2, 1));
  auto saved = SaveCheckpoint(root.string(), ctx, {}, {{"batches_trained", 1}});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(CheckpointTempPrefix(7), ".tmp-t7-");
  for (const char* d : {".tmp-t7-dead1", ".tmp-t7-dead2/sub", ".tmp-t77-live", ".tmp-t8-live", ".tmp-live"}) {
    fs::create_directories(root / d);
    std::ofstream(root / d / "model_0.pt") << "partial";
  }
  fs::create_directory_symlink(root / "outside", root / ".tmp-t7-link");
  EXPECT_EQ(RemoveStaleCheckpointTemps(root.string(), 7), 3);
  EXPECT_FALSE(fs::exists(root / ".tmp-t7-dead1"));
  EXPECT_FALSE(fs::exists(root / ".tmp-t7-dead2"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / ".tmp-t7-link")));
  EXPECT_TRUE(fs::exists(root / "outside" / "keep")) << "a symlink is never followed";
  for (const char* d : {".tmp-t77-live", ".tmp-t8-live", ".tmp-live"}) EXPECT_TRUE(fs::exists(root / d / "model_0.pt")) << d;
  EXPECT_TRUE(fs::exists(fs::path(saved->path) / "metadata.json")) << "the saved checkpoint is untouched";
  EXPECT_EQ(RemoveStaleCheckpointTemps((root / "missing").string(), 7), 0);
  fs::remove_all(root);
}

// Another user's checkpoint (issue 46: a uid that may not open it) is an
// error naming it, not an uncaught std::filesystem exception that aborts
// det-trial. Checked in a child that drops to uid 65534 (needs root, as CI
// runs it).
TEST(CheckpointTest, AnUnreadableCheckpointIsAnErrorNotACrash) {
  ASSERT_EQ(geteuid(), 0u) << "needs root to read as another uid; CI runs trial_runtime_tests as root";
  const fs::path dir = fs::temp_directory_path() / ("det-ckpt-test-" + NewUuid());
  fs::create_directories(dir / "ck");
  std::ofstream(dir / "ck" / "metadata.json") << "{}";
  fs::permissions(dir, fs::perms::owner_all);  // 0700: nobody else passes
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto meta = ReadCheckpointMetadata((dir / "ck").string());
    _exit(meta.status().code() == absl::StatusCode::kPermissionDenied &&
                  meta.status().message().find((dir / "ck").string()) != absl::string_view::npos
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status) << " (an uncaught exception)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace det::runtime
