// The operator's S3 credentials file (s3_credentials.h): AWS's
// shared-credentials format, the checks of a secret file, errors that name
// the line and never quote a secret.
#include "common/s3/s3_credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using det::testing::TempDir;
using det::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY";

std::string Profile(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("[", name, "]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = ", kSecret,
                      "\ndet_workspaces = *\n", extra);
}

// The error of parsing `text` ("ok" when it parses); never holds the secret.
std::string Error(const std::string& text) {
  auto parsed = ParseS3Credentials(text, "creds");
  if (parsed.ok()) return "ok";
  const std::string message(parsed.status().message());
  EXPECT_THAT(message, Not(HasSubstr(kSecret)));
  EXPECT_THAT(message, Not(HasSubstr("EXAMPLEKEY")));
  return message;
}

TEST(S3CredentialsTest, ParsesProfilesCommentsAndWhitespace) {
  const std::string text = absl::StrCat(
      "# operator's file\r\n; another comment\n\n[default]\r\n  aws_access_key_id=AKIDEXAMPLE  \n",
      "aws_secret_access_key =  ", kSecret, "\r\nDET_WORKSPACES = team-a ,shared\n",
      "[profile minio]\naws_access_key_id = minio\naws_secret_access_key = s3cr3t\naws_session_token = tok\n",
      "endpoint_url = https://minio.example:9000/\nregion = eu-west-1\ndet_workspaces = *\n");
  auto profiles = ParseS3Credentials(text, "creds");
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  ASSERT_EQ(profiles->size(), 2u);
  const S3Profile& d = profiles->at("default");
  EXPECT_EQ(d.access_key_id, "AKIDEXAMPLE");
  EXPECT_EQ(d.secret_access_key, kSecret);
  EXPECT_EQ(d.endpoint_url, "");
  EXPECT_EQ(d.region, "");
  EXPECT_THAT(d.workspaces, ::testing::ElementsAre("team-a", "shared"));
  EXPECT_TRUE(d.AllowsWorkspace("shared"));
  EXPECT_FALSE(d.AllowsWorkspace("team-b"));
  EXPECT_FALSE(d.AllowsWorkspace(""));
  const S3Profile& m = profiles->at("minio");
  EXPECT_EQ(m.session_token, "tok");
  EXPECT_EQ(m.endpoint_url, "https://minio.example:9000");
  EXPECT_EQ(m.region, "eu-west-1");
  EXPECT_TRUE(m.AllowsWorkspace("anything"));
}

TEST(S3CredentialsTest, StructuralErrorsNameTheLine) {
  EXPECT_EQ(Error(absl::StrCat("aws_access_key_id = x\n", Profile("a"))),
            "creds:1: aws_access_key_id is outside a profile: put a [name] line above it");
  EXPECT_THAT(Error(Profile("a", "colour = blue\n")), HasSubstr("creds:5: unknown key `colour`; the keys are"));
  EXPECT_THAT(Error(Profile("a", absl::StrCat(kSecret, "\n"))),
              HasSubstr("creds:5: expected `[profile]` or `key = value` (the line is not shown"));
  EXPECT_THAT(Error(Profile("a", absl::StrCat(kSecret, " = 1\n"))), HasSubstr("creds:5: unknown key (not shown)"));
  EXPECT_EQ(Error(Profile("a") + Profile("b") + Profile("a")),
            "creds:9: profile [a] appears twice: keep one");
  EXPECT_EQ(Error(Profile("a", "region = us-east-1\nregion = us-east-2\n")),
            "creds:6: region appears twice in profile [a]: keep one");
  EXPECT_THAT(Error("[bad name!]\n"), HasSubstr("creds:1: a profile name must be 1 to 64"));
  EXPECT_THAT(Error("[]\n"), HasSubstr("creds:1: a profile name"));
  EXPECT_THAT(Error("# nothing\n"), HasSubstr("creds has no profile: add a [default] section"));
  std::string many;
  for (int i = 0; i <= kMaxCredentialProfiles; ++i) many += Profile(absl::StrCat("p", i));
  EXPECT_THAT(Error(many), HasSubstr("more than 256 profiles"));
  EXPECT_THAT(Error(std::string(kMaxCredentialsFileBytes + 1, '#')), HasSubstr("larger than 65536 bytes"));
}

TEST(S3CredentialsTest, MissingKeysAreNamed) {
  EXPECT_EQ(Error("[a]\naws_secret_access_key = x\ndet_workspaces = *\n"),
            "creds:1: profile [a] has no aws_access_key_id: add `aws_access_key_id = ...`");
  EXPECT_EQ(Error(absl::StrCat("[a]\naws_access_key_id = AKIDEXAMPLE\ndet_workspaces = *\n[b]\n")),
            "creds:1: profile [a] has no aws_secret_access_key: add `aws_secret_access_key = ...`");
  EXPECT_THAT(Error(absl::StrCat("[a]\naws_access_key_id = k\naws_secret_access_key = ", kSecret, "\n")),
              HasSubstr("creds:1: profile [a] has no det_workspaces: add `det_workspaces = ...` (the workspaces"));
}

TEST(S3CredentialsTest, ValuesAreCheckedWithoutQuotingSecrets) {
  EXPECT_THAT(Error(Profile("a", "aws_session_token = has space\n")),
              HasSubstr("creds:5: aws_session_token must be one word of printable ASCII, at most 8192 bytes (its "
                        "value is not shown); fix aws_session_token in profile [a]"));
  EXPECT_THAT(Error(absl::StrCat("[a]\naws_access_key_id = k\naws_secret_access_key = ", kSecret, " tail\n")),
              HasSubstr("creds:3: aws_secret_access_key must be one word"));
  EXPECT_THAT(Error(absl::StrCat("[a]\naws_access_key_id = k\naws_secret_access_key = ", std::string(300, 'x'))),
              HasSubstr("at most 256 bytes"));
  EXPECT_THAT(Error(Profile("a", "aws_session_token =\n")), HasSubstr("creds:5: aws_session_token is empty"));
  for (const char* bad : {"ftp://h", "https://", "https://h/path", "http://user@h", "https://h:99999",
                          "https://h:x", "https://h?x=1"}) {
    EXPECT_THAT(Error(Profile("a", absl::StrCat("endpoint_url = ", bad, "\n"))),
                HasSubstr(absl::StrCat("creds:5: endpoint_url \"", bad, "\"")))
        << bad;
  }
  EXPECT_EQ(Error(Profile("a", "endpoint_url = http://127.0.0.1:9000\n")), "ok");
  EXPECT_EQ(Error(Profile("a", "endpoint_url = http://[::1]:9000\n")), "ok");
  EXPECT_THAT(Error(Profile("a", "region = us east\n")), HasSubstr("creds:5: region must be letters"));
  EXPECT_THAT(Error(absl::StrCat("[a]\naws_access_key_id = k\naws_secret_access_key = s\ndet_workspaces = a,,b\n")),
              HasSubstr("creds:4: det_workspaces has an empty entry: write a comma-separated list"));
}

TEST(S3CredentialsTest, CaBundleIsReadAndChecked) {
  TempDir dir;
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  WriteFile(dir / "ca.pem", pem);
  auto profiles = ParseS3Credentials(Profile("a", "ca_bundle = " + (dir / "ca.pem") + "\n"), "creds");
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  EXPECT_EQ(profiles->at("a").ca_pem, pem);
  EXPECT_THAT(Error(Profile("a", "ca_bundle = ca.pem\n")), HasSubstr("creds:5: ca_bundle ca.pem is not an absolute"));
  EXPECT_THAT(Error(Profile("a", "ca_bundle = " + dir.path() + "\n")), HasSubstr("is not a regular file"));
  EXPECT_THAT(Error(Profile("a", "ca_bundle = " + (dir / "missing") + "\n")),
              HasSubstr("cannot be read: No such file or directory"));
  WriteFile(dir / "notpem", "hello");
  EXPECT_THAT(Error(Profile("a", "ca_bundle = " + (dir / "notpem") + "\n")), HasSubstr("holds no PEM certificate"));
  WriteFile(dir / "big.pem", pem + std::string(kMaxCaBundleBytes, '#'));
  EXPECT_THAT(Error(Profile("a", "ca_bundle = " + (dir / "big.pem") + "\n")), HasSubstr("larger than 1048576"));
}

TEST(S3CredentialsTest, TheFileMustBePrivate) {
  TempDir dir;
  const std::string path = dir / "credentials";
  WriteFile(path, Profile("default"));
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  auto ok = ReadS3CredentialsFile(path, "--s3-credentials-file");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at("default").secret_access_key, kSecret);

  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto open = ReadS3CredentialsFile(path, "--s3-credentials-file");
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().message(), absl::StrCat("--s3-credentials-file ", path,
                                                  ": group or others may access it (mode 644); it holds a secret: "
                                                  "chmod 600 ",
                                                  path, " (0400, or 0440 with group root or the daemon's group, "
                                                  "also do)"));
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  // Owned by neither the daemon nor root.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  }
  const uid_t daemon = ::geteuid() == 0 ? 1000 : ::geteuid() + 1;
  auto foreign = ReadS3CredentialsFileAs(path, "--s3-credentials-file", daemon, ::getegid());
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("neither this daemon's uid"));

  auto missing = ReadS3CredentialsFile(dir / "missing", "--s3-credentials-file");
  EXPECT_THAT(missing.status().message(),
              HasSubstr(": cannot read it: No such file or directory; name a file holding the S3 credentials"));
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_THAT(ReadS3CredentialsFile(dir / "fifo", "--s3-credentials-file").status().message(),
              HasSubstr("is not a regular file (it is a FIFO)"));
  WriteFile(dir / "big", std::string(kMaxCredentialsFileBytes + 1, '#'));
  ASSERT_EQ(::chmod((dir / "big").c_str(), 0600), 0);
  EXPECT_THAT(ReadS3CredentialsFile(dir / "big", "--s3-credentials-file").status().message(),
              HasSubstr("is larger than 65536 bytes"));
  // A parse error names the flag and the file.
  WriteFile(dir / "bad", "[a]\nnope\n");
  ASSERT_EQ(::chmod((dir / "bad").c_str(), 0600), 0);
  EXPECT_THAT(ReadS3CredentialsFile(dir / "bad", "--s3-credentials-file").status().message(),
              HasSubstr(absl::StrCat("--s3-credentials-file ", dir / "bad", ":2: expected")));
}

}  // namespace
}  // namespace det::s3
