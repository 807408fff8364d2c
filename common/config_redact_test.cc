// What readers of an experiment see of its config: secret-looking keys'
// values replaced, the rest of the text as written.
#include "common/config_redact.h"

#include <string>

#include "common/config_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNeedle[] = "hunter2-NEEDLE";

nlohmann::json ParseYaml(const std::string& text) {
  ConfigSource source{"t", {}};
  auto j = ParseYamlToJson(text, &source);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : nlohmann::json();
}

TEST(ConfigRedactTest, SecretKeys) {
  for (const char* key : {"access_key", "SECRET_KEY", "session_token", "aws_access_key_id", "aws_secret_access_key",
                          "password", "Password", "token", "db_password", "client_secret", "secretName", "api_key"}) {
    EXPECT_TRUE(IsSecretConfigKey(key)) << key;
  }
  for (const char* key : {"bucket", "prefix", "profile", "tokenizer", "max_tokens", "name", "endpoint_url", "type"}) {
    EXPECT_FALSE(IsSecretConfigKey(key)) << key;
  }
}

// The suffixes of tokens and keys of other services (review finding m11).
TEST(ConfigRedactTest, ServiceTokensAndKeys) {
  for (const char* key : {"api_token", "hf_token", "HF_TOKEN", "wandb_api_key", "WANDB_API_KEY", "access_token",
                          "openai_apikey", "apikey", "github-token", "x-api-key", "ssh_private_key", "db_passwd"}) {
    EXPECT_TRUE(IsSecretConfigKey(key)) << key;
  }
  for (const char* key : {"tokenizer", "tokenizer_name", "max_tokens", "num_tokens", "tokens", "pad_token",
                          "EOS_TOKEN", "bos_token", "unk_token", "mask_token", "token_budget", "keyed", "api_url"}) {
    EXPECT_FALSE(IsSecretConfigKey(key)) << key;
  }
}

// NAME=VALUE strings (environment_variables entries, --name=value
// arguments) with a secret NAME keep NAME and lose VALUE.
TEST(ConfigRedactTest, SecretAssignmentsInStrings) {
  const std::string text = std::string("environment_variables:\n  - AWS_SECRET_ACCESS_KEY=") + kNeedle +
                           "\n  - HF_TOKEN=" + kNeedle + "\n  - OMP_NUM_THREADS=4\n  - =x\n" +
                           "entrypoint: [train, --db-password=" + kNeedle + ", --lr=0.1]\nnote: a=b c=d\n";
  const std::string shown = RedactConfigYaml(text);
  EXPECT_THAT(shown, Not(HasSubstr(kNeedle)));
  const nlohmann::json j = ParseYaml(shown);
  EXPECT_EQ(j["environment_variables"][0], "AWS_SECRET_ACCESS_KEY=<redacted>");
  EXPECT_EQ(j["environment_variables"][1], "HF_TOKEN=<redacted>");
  EXPECT_EQ(j["environment_variables"][2], "OMP_NUM_THREADS=4");
  EXPECT_EQ(j["environment_variables"][3], "=x");
  EXPECT_EQ(j["entrypoint"][1], "--db-password=<redacted>");
  EXPECT_EQ(j["entrypoint"][2], "--lr=0.1");
  EXPECT_EQ(j["note"], "a=b c=d");
  const std::string plain = "environment_variables:\n  - OMP_NUM_THREADS=4\n";
  EXPECT_EQ(RedactConfigYaml(plain), plain);
}

TEST(ConfigRedactTest, TextWithoutSecretsIsUnchanged) {
  const std::string text = "name: x  # a comment\ndata:\n  url: http://h\n  tokens: 3\n";
  EXPECT_EQ(RedactConfigYaml(text), text);
}

TEST(ConfigRedactTest, BlockStyleSecretsAreReplacedInPlace) {
  const std::string text = std::string("# my experiment\nname: x\ndata:\n  password: ") + kNeedle +
                           "  # keep out\n  url: http://h\n  nested:\n    - api_key: '" + kNeedle +
                           "'\n      other: 1\n  private_key: |\n    -----BEGIN " + kNeedle +
                           "\n    line2\n  credentials:\n    user: u\n    secret: " + kNeedle + "\nafter: 2\n";
  const std::string shown = RedactConfigYaml(text);
  EXPECT_THAT(shown, Not(HasSubstr(kNeedle)));
  EXPECT_THAT(shown, HasSubstr("# my experiment\nname: x\n"));  // comments and layout kept
  EXPECT_THAT(shown, HasSubstr("  password: \"<redacted>\"\n  url: http://h\n"));
  EXPECT_THAT(shown, HasSubstr("after: 2"));
  nlohmann::json expected = ParseYaml(text);
  expected["data"]["password"] = "<redacted>";
  expected["data"]["nested"][0]["api_key"] = "<redacted>";
  expected["data"]["private_key"] = "<redacted>";
  expected["data"]["credentials"] = "<redacted>";
  EXPECT_EQ(ParseYaml(shown), expected);
}

// Layouts the line pass cannot do (flow maps, JSON text): the redacted
// config as JSON, still valid YAML and free of the secret.
TEST(ConfigRedactTest, FlowStyleFallsBackToRedactedJson) {
  for (const std::string& text : {std::string("data: {user: u, password: ") + kNeedle + "}\n",
                                  std::string("{\"data\": {\"token\": \"") + kNeedle + "\"}}"}) {
    const std::string shown = RedactConfigYaml(text);
    EXPECT_THAT(shown, Not(HasSubstr(kNeedle))) << text;
    nlohmann::json expected = RedactConfigJson(ParseYaml(text));
    EXPECT_EQ(ParseYaml(shown), expected) << shown;
  }
}

TEST(ConfigRedactTest, JsonAtAnyDepth) {
  nlohmann::json j = {{"a", {{"b", {{{"Token", kNeedle}, {"keep", 1}}}}}}, {"secret_key", {1, 2}}};
  nlohmann::json r = RedactConfigJson(j);
  EXPECT_EQ(r["a"]["b"][0]["Token"], "<redacted>");
  EXPECT_EQ(r["a"]["b"][0]["keep"], 1);
  EXPECT_EQ(r["secret_key"], "<redacted>");
  nlohmann::json deep = kNeedle;
  for (int i = 0; i < 300; ++i) deep = nlohmann::json::array({deep});
  EXPECT_THAT(RedactConfigJson(deep).dump(), Not(HasSubstr(kNeedle)));
}

TEST(ConfigRedactTest, UnparseableTextIsNotShown) {
  const std::string text = std::string("password: [") + kNeedle + "\n";
  EXPECT_THAT(RedactConfigYaml(text), Not(HasSubstr(kNeedle)));
}

}  // namespace
}  // namespace det
