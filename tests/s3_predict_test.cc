// det::load_model_from_checkpoint on an S3 checkpoint (issue 49), the
// documented route end to end: a short real Fashion-MNIST training with S3
// storage on real det-master, det-agent and det-trial processes against
// npm's s3rver on loopback (tests/s3_harness.h); `det-cli checkpoint
// download UUID -o DIR` streams the best checkpoint from the bucket through
// the master, and examples/fashion_mnist's predictor (which loads the
// weights with det::load_model_from_checkpoint, no master) prints the
// validation accuracy stored with the checkpoint. The downloaded files are
// the bytes Debian's boto3 gets from the bucket, and the predictor given the
// s3:// URL itself fails naming `det-cli checkpoint download`.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/s3_e2e.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kPrefix[] = "predict";

// checkpoint_api_test's Fashion-MNIST predict experiment (60 batches, a
// validation and checkpoint every 30) with S3 storage under kPrefix.
std::string FashionOnS3(const TempDir& dir) {
  return absl::StrCat(R"(name: fashion-predict-s3
hyperparameters:
  global_batch_size: 64
  learning_rate: 0.001
  n_filters1: 16
  n_filters2: 32
  hidden_size: 128
  dropout: 0.25
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length:
    batches: 60
min_validation_period:
  batches: 30
scheduling_unit: 30
reproducibility:
  experiment_seed: 42
)", S3Storage(kPrefix, "default", "  save_trial_latest: 10\n"), R"(data:
  source_dir: /usr/share/datasets/fashion-mnist
  cache_dir: )", dir / "cache", "\n");
}

// The COMPLETED checkpoint with the highest searcher metric (accuracy).
json BestCheckpoint(TestCluster& cluster, int exp) {
  json best;
  for (const auto& c : ExperimentCheckpoints(cluster, exp, "CHECKPOINT_STATE_COMPLETED")) {
    if (c.contains("searcher_metric") && (best.is_null() || c["searcher_metric"] > best["searcher_metric"])) best = c;
  }
  return best;
}

TEST(S3PredictE2ETest, LoadModelFromCheckpointReadsADownloadedS3Checkpoint) {
  S3Cluster c(/*slots=*/1);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const int exp =
      cluster.CreateExperiment(FashionOnS3(c.dir), "fashion", std::string(DET_TRIALS_DIR) + "/fashion_mnist_trial.so");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", std::chrono::minutes(8))) << cluster.MasterLog();
  const json cp = BestCheckpoint(cluster, exp);
  ASSERT_FALSE(cp.is_null()) << ExperimentCheckpoints(cluster, exp).dump();
  const std::string uuid = cp["uuid"];
  const std::string url = absl::StrCat("s3://", kBucket, "/", kPrefix, "/", uuid);
  ASSERT_EQ(cp.value("storage_path", ""), url) << cp.dump();

  // The predictor given the S3 URL: the SDK's error names the route.
  const std::string predict = std::string(DET_BIN_DIR) + "/fashion_mnist_predict";
  std::string out, err;
  EXPECT_NE(RunProcess({predict, url, "--cache-dir", c.dir / "cache"}, &out, &err), 0) << out << err;
  EXPECT_THAT(err, HasSubstr("det-cli checkpoint download UUID --output DIR")) << out << err;

  // det-cli checkpoint download streams it from the bucket: boto3's bytes.
  const auto manifests = CompletedManifests(cluster, *c.s3, exp, kPrefix);
  ASSERT_EQ(manifests.count(uuid), 1u) << "no manifest of " << uuid << " in the bucket";
  const auto from_boto3 = Boto3CheckpointFiles(*c.s3, c.dir, kPrefix, uuid, manifests.at(uuid));
  ASSERT_EQ(from_boto3.count("model_0.pt"), 1u) << "the bucket holds no model_0.pt of " << uuid;
  const std::string got = c.dir / "ck";
  ASSERT_EQ(cluster.Cli({"checkpoint", "download", uuid, "-o", got}, &out, &err), 0) << out << err;
  ASSERT_TRUE(FilesUnder(got) == from_boto3) << "det-cli checkpoint download differs from boto3";

  // det::load_model_from_checkpoint(DIR) in the predictor, with no master:
  // the test accuracy is the validation accuracy stored with the checkpoint.
  ASSERT_EQ(RunProcess({predict, got, "--cache-dir", c.dir / "cache"}, &out, &err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr(absl::StrFormat("test accuracy %.4f on 10000 images", cp["searcher_metric"].get<double>())))
      << out << " stored: " << cp.dump();
}

}  // namespace
}  // namespace det::testing
