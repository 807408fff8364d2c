// det-master --s3-credentials-file end to end (issue 49): a file others may
// read or one that does not parse stops det-master at start (exit 2) naming
// the flag and the file, never printing the secret; with a good file, an
// experiment whose checkpoint_storage names a profile its workspace may not
// use, or holds a secret, is refused with the field and the fix; without
// the flag, an s3 experiment is refused naming --s3-credentials-file. A
// secret elsewhere in a config is redacted in what readers get.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr char kSecret[] = "flag-test-SECRET-NEEDLE-0123456789abcdef";

std::string CredentialsText(const std::string& workspaces) {
  return std::string("[team-a]\naws_access_key_id = S3RVER\naws_secret_access_key = ") + kSecret +
         "\nendpoint_url = http://127.0.0.1:9\ndet_workspaces = " + workspaces + "\n";
}

// det-master with `flags` must exit 2 within 30 s; its stdout and stderr.
std::string MasterRefusal(const TempDir& dir, const std::string& name, const std::vector<std::string>& flags) {
  std::vector<std::string> argv{std::string(DET_BIN_DIR) + "/det-master", "--data-dir", dir / name,
                                "--grpc-port", "0", "--http-port", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::string out, err;
  EXPECT_EQ(RunProcess(argv, &out, &err, 30s), 2) << "det-master " << name << " did not exit 2:\n" << out << err;
  return out + err;
}

TEST(S3CredentialsFlag, ABadFileStopsTheMasterWithoutPrintingTheSecret) {
  TempDir dir;
  const std::string readable = dir / "readable";
  WriteFile(readable, CredentialsText("*"));
  ASSERT_EQ(::chmod(readable.c_str(), 0644), 0);
  std::string err = MasterRefusal(dir, "m1", {"--s3-credentials-file", readable});
  EXPECT_THAT(err, HasSubstr("--s3-credentials-file"));
  EXPECT_THAT(err, HasSubstr(readable));
  EXPECT_THAT(err, Not(HasSubstr(kSecret)));

  const std::string malformed = dir / "malformed";
  WriteFile(malformed, CredentialsText("*") + std::string("aws_secret_access_key ") + kSecret + "\n");
  ASSERT_EQ(::chmod(malformed.c_str(), 0600), 0);
  err = MasterRefusal(dir, "m2", {"--s3-credentials-file", malformed});
  EXPECT_THAT(err, HasSubstr(malformed));
  EXPECT_THAT(err, Not(HasSubstr(kSecret)));

  err = MasterRefusal(dir, "m3", {"--s3-credentials-file", dir / "missing"});
  EXPECT_THAT(err, HasSubstr("--s3-credentials-file"));
}

std::string S3Config(const std::string& storage_extra, const std::string& profile = "team-a") {
  return "name: s3-flag\nhyperparameters:\n  global_batch_size: 16\nsearcher:\n  name: single\n"
         "  metric: validation_loss\n  max_length: {batches: 10}\ncheckpoint_storage:\n  type: s3\n"
         "  bucket: det-test\n  profile: " + profile + "\n" + storage_extra;
}

// det-cli experiment create of `yaml`: its exit status and output.
int Create(TestCluster& cluster, const TempDir& dir, const std::string& name, const std::string& yaml,
           std::string* output) {
  const std::string path = dir / (name + ".yaml");
  WriteFile(path, yaml);
  std::string out, err;
  const int rc = cluster.Cli({"experiment", "create", path, kTestSyntheticTrial}, &out, &err);
  *output = out + err;
  return rc;
}

TEST(S3CredentialsFlag, ExperimentsAreCheckedAgainstTheProfiles) {
  TempDir dir;
  const std::string file = dir / "s3-credentials";
  WriteFile(file, CredentialsText("team-b") + "\n[open]\naws_access_key_id = S3RVER\naws_secret_access_key = " +
                     kSecret + "\nendpoint_url = http://127.0.0.1:9\ndet_workspaces = *\n");
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--s3-credentials-file", file}));
  std::string out;
  EXPECT_NE(Create(cluster, dir, "denied", S3Config(""), &out), 0);
  EXPECT_THAT(out, HasSubstr("profile 'team-a'"));
  EXPECT_THAT(out, HasSubstr("workspace 'Uncategorized'"));
  EXPECT_NE(Create(cluster, dir, "secret", S3Config(std::string("  secret_key: ") + kSecret + "\n"), &out), 0);
  EXPECT_THAT(out, HasSubstr("checkpoint_storage.secret_key: an experiment config must not hold credentials"));
  EXPECT_THAT(out, Not(HasSubstr(kSecret)));
  EXPECT_NE(Create(cluster, dir, "nope", S3Config("  endpoint_url: http://127.0.0.1:10\n", "open"), &out), 0);
  EXPECT_THAT(out, HasSubstr("checkpoint_storage.endpoint_url: 'http://127.0.0.1:10' is not the endpoint of "
                             "profile 'open'"));
  EXPECT_THAT(cluster.MasterLog(), Not(HasSubstr(kSecret)));
}

// det-master holding the profiles' secrets is not dumpable (issue 49
// review, m6): no core file, and its /proc/PID files (mem, environ) become
// root's. It runs as uid 65534 here, since as root they are root's anyway;
// without the flag they stay 65534's.
TEST(S3CredentialsFlag, AMasterWithProfilesIsNotDumpable) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root, to run det-master as uid 65534";
  auto environ_owner = [](const std::vector<std::string>& flags) -> int {
    TempDir dir;
    EXPECT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
    const std::string file = dir / "s3-credentials";
    WriteFile(file, CredentialsText("*"));
    EXPECT_EQ(::chmod(file.c_str(), 0600), 0);
    EXPECT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    std::vector<std::string> with_file;
    for (const std::string& f : flags) with_file.push_back(f == "FILE" ? file : f);
    TestCluster cluster(dir, TestClusterOptions()
                                 .set_master_prefix({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                                     "--clear-groups"})
                                 .add_master_flags(with_file));
    if (::testing::Test::HasFatalFailure()) return -1;
    struct stat st {};
    const std::string environ = "/proc/" + std::to_string(cluster.master().pid()) + "/environ";
    EXPECT_EQ(::stat(environ.c_str(), &st), 0) << environ;
    return static_cast<int>(st.st_uid);
  };
  EXPECT_EQ(environ_owner({}), 65534) << "det-master did not run as uid 65534";
  EXPECT_EQ(environ_owner({"--s3-credentials-file", "FILE"}), 0) << "det-master with profiles is dumpable";
}

TEST(S3CredentialsFlag, WithoutTheFlagAnS3ExperimentNamesIt) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string out;
  EXPECT_NE(Create(cluster, dir, "noflag", S3Config(""), &out), 0);
  EXPECT_THAT(out, HasSubstr("det-master has no --s3-credentials-file"));
}

// A secret elsewhere in a config (data:, an hparam, an environment
// variable) is taken, and redacted in what readers get: REST GET
// /api/v1/experiments/ID, /api/v1/experiments/ID/trials and
// /api/v1/trials/ID, det-cli experiment describe (--json too) and trial
// describe, and the master's log.
TEST(S3CredentialsFlag, ReadersSeeSecretsInAConfigRedacted) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string config = SingleTrialConfig("redacted", dir / "checkpoints") + "data:\n  db_password: " + kSecret +
                       "\nenvironment:\n  environment_variables:\n    - AWS_SECRET_ACCESS_KEY=" + kSecret + "\n";
  const std::string batch = "  global_batch_size: 16\n";
  ASSERT_NE(config.find(batch), std::string::npos);
  config.insert(config.find(batch) + batch.size(), std::string("  hf_token: ") + kSecret + "\n");
  const int id = cluster.CreateExperiment(config, "redacted");
  ASSERT_GT(id, 0);
  int trial_id = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        const nlohmann::json trials = cluster.Get("/api/v1/experiments/" + std::to_string(id) + "/trials");
        EXPECT_THAT(trials.dump(), Not(HasSubstr(kSecret)));
        if (!trials.contains("trials") || trials["trials"].empty()) return false;
        trial_id = trials["trials"][0].value("id", 0);
        return trial_id > 0;
      },
      30s));
  int trial_status = 0;
  const nlohmann::json trial = cluster.Get("/api/v1/trials/" + std::to_string(trial_id), &trial_status);
  EXPECT_EQ(trial_status, 200);
  EXPECT_THAT(trial.dump(), Not(HasSubstr(kSecret)));
  EXPECT_THAT(trial.dump(), HasSubstr("\"hf_token\":\"<redacted>\""));
  std::string trial_out, trial_err;
  EXPECT_EQ(cluster.Cli({"trial", "describe", std::to_string(trial_id)}, &trial_out, &trial_err), 0) << trial_err;
  EXPECT_THAT(trial_out + trial_err, Not(HasSubstr(kSecret)));
  int status = 0;
  const nlohmann::json shown = cluster.Get("/api/v1/experiments/" + std::to_string(id), &status);
  EXPECT_EQ(status, 200);
  EXPECT_THAT(shown.dump(), Not(HasSubstr(kSecret)));
  EXPECT_THAT(shown.dump(), HasSubstr("<redacted>"));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"experiment", "describe", std::to_string(id)}, {"experiment", "describe", std::to_string(id), "--json"}}) {
    std::string cli_out, cli_err;
    EXPECT_EQ(cluster.Cli(args, &cli_out, &cli_err), 0) << cli_err;
    EXPECT_THAT(cli_out + cli_err, Not(HasSubstr(kSecret)));
  }
  EXPECT_THAT(shown.dump(), HasSubstr("AWS_SECRET_ACCESS_KEY=<redacted>"));
  EXPECT_THAT(cluster.MasterLog(), Not(HasSubstr(kSecret)));
}

}  // namespace
}  // namespace det::testing
