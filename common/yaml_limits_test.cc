#include "common/yaml_limits.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/config_reader.h"
#include "common/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;

// 473 bytes that expand to 9^9 = 387,420,489 strings ("billion laughs"):
// before the limits, parsing it grew the master to 2.3 GB for over a minute.
constexpr char kAliasBomb[] = R"(name: billion-lol
hyperparameters:
  global_batch_size: 32
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
searcher: {name: single, metric: loss, max_length: 1}
)";

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// "[0,0,...,0]" with n zeros.
std::string FlowList(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, i == 0 ? "0" : ",0");
  return s + "]";
}

TEST(YamlLimitsTest, AliasBombIsRefusedQuicklyNamingTheLimit) {
  ASSERT_EQ(sizeof(kAliasBomb) - 1, 473u);
  auto start = std::chrono::steady_clock::now();
  absl::Status s = CheckYamlLimits(kAliasBomb, "config");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("YAML expands to more than 100000 nodes (aliases included); the limit is 100000"));
  EXPECT_THAT(std::string(s.message()), testing::StartsWith("config:"));
  // Generous (the check takes microseconds): the bomb took over a minute.
  // Labelled latency (tests/latency_tests.cmake); the bound is far above 5x
  // the median measured (see the printed figure).
  const double secs = std::chrono::duration<double>(took).count();
  std::printf("[ latency  ] alias bomb refused in %.6f s (bound 5.0 s)\n", secs);
  EXPECT_LT(secs, 5.0);
}

TEST(YamlLimitsTest, AliasBombThroughTheConfigParsers) {
  ConfigSource source{"config.yaml", {}};
  auto json = ParseYamlToJson(kAliasBomb, &source);
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("more than 100000 nodes (aliases included)"));
  EXPECT_TRUE(source.lines.empty());  // refused before any conversion

  auto config = ParseExperimentConfig(kAliasBomb, "config");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "config:9: YAML expands to more than 100000 nodes (aliases included); the limit is 100000");
}

TEST(YamlLimitsTest, AFewAliasesAreFine) {
  std::string yaml = "a: &a [1, 2, {x: 3}]\nb: [*a, *a, *a]\nc: *a\n";
  EXPECT_TRUE(CheckYamlLimits(yaml, "config").ok());
  ConfigSource source{"config.yaml", {}};
  auto json = ParseYamlToJson(yaml, &source);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["b"][2][2]["x"], 3);
}

TEST(YamlLimitsTest, TextSize) {
  std::string big = "a: \"" + std::string((1 << 20) - 5, 'x') + "\"\n";  // 1 MiB + 1
  ASSERT_EQ(big.size(), (1u << 20) + 1);
  absl::Status s = CheckYamlLimits(big, "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config: the config is 1048577 bytes; the limit is 1048576 bytes (1 MiB)");
  EXPECT_TRUE(CheckYamlLimits(big.substr(1), "config").ok()) << "exactly 1 MiB is allowed";
}

TEST(YamlLimitsTest, NodesWithoutAliases) {
  // 100,000 nodes is the limit: the list itself, its key and the top map
  // take three.
  EXPECT_TRUE(CheckYamlLimits("a: " + FlowList(100000 - 3), "config").ok());
  absl::Status s = CheckYamlLimits("a: " + FlowList(100000 - 2), "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config:1: YAML expands to more than 100000 nodes (aliases included); the limit is 100000");
}

TEST(YamlLimitsTest, Depth) {
  // The top-level map is depth 0, "a"'s list 1, each "[" one more.
  EXPECT_TRUE(CheckYamlLimits("a: " + Repeat("[", 32) + Repeat("]", 32), "config").ok());
  absl::Status s = CheckYamlLimits("a: " + Repeat("[", 33) + Repeat("]", 33), "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config:1: YAML nests more than 32 levels deep (aliases included); the limit is 32");
  // Through ParseYamlToJson as well.
  ConfigSource source{"c.yaml", {}};
  EXPECT_THAT(std::string(ParseYamlToJson("a: " + Repeat("[", 33) + Repeat("]", 33), &source).status().message()),
              HasSubstr("nests more than 32 levels deep"));
}

TEST(YamlLimitsTest, DepthCountsAliases) {
  // Each half is 20 deep; an alias puts one inside the other: 40.
  std::string yaml = "a: &a " + Repeat("[", 20) + Repeat("]", 20) + "\nb: " + Repeat("[", 20) + "*a" +
                     Repeat("]", 20) + "\n";
  absl::Status s = CheckYamlLimits(yaml, "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("nests more than 32 levels deep (aliases included)"));
}

TEST(YamlLimitsTest, ExpandedBytesOfAliasedScalars) {
  // 100 KB, aliased 100 times: 10 MB of JSON strings from 101 KB of text.
  std::string yaml = "a: &a \"" + std::string(100000, 'x') + "\"\nb: [" + Repeat("*a,", 99) + "*a]\n";
  absl::Status s = CheckYamlLimits(yaml, "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("YAML expands to more than 8388608 bytes of keys, values and field paths "
                                     "(aliases included); the limit is 8388608 (8 MiB)"));
  // 80 copies fit.
  std::string fits = "a: &a \"" + std::string(100000, 'x') + "\"\nb: [" + Repeat("*a,", 79) + "*a]\n";
  EXPECT_TRUE(CheckYamlLimits(fits, "config").ok());
}

TEST(YamlLimitsTest, ExpandedBytesOfFieldPaths) {
  // No alias: one 200 KB key (explicit: "? KEY", as implicit keys stop at
  // 1024 characters) over 50,000 list items, each recorded under a path of
  // 200 KB ("<key>[i]"): 10 GB of field paths from 300 KB of text.
  std::string yaml = "? " + std::string(200000, 'k') + "\n: " + FlowList(50000) + "\n";
  absl::Status s = CheckYamlLimits(yaml, "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes of keys, values and field paths"));
  // And through an alias: a map under a long key, aliased under another.
  std::string aliased = "a: &a {" + std::string(1000, 'k') + ": " + FlowList(1000) + "}\n" + std::string(1000, 'p') +
                        ": [" + Repeat("*a,", 49) + "*a]\n";
  s = CheckYamlLimits(aliased, "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes of keys, values and field paths"));
}

TEST(YamlLimitsTest, AliasInsideItsOwnAnchorIsACycle) {
  absl::Status s = CheckYamlLimits("a: &a [1, *a]\n", "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config:1: YAML alias refers to a node that contains it (a cycle)");
}

TEST(YamlLimitsTest, SyntaxErrorsAreLeftToTheParser) {
  EXPECT_TRUE(CheckYamlLimits("a: [1, 2\n", "config").ok());
  ConfigSource source{"config.yaml", {}};
  EXPECT_THAT(std::string(ParseYamlToJson("a: [1, 2\n", &source).status().message()), HasSubstr("invalid YAML"));
}

TEST(YamlLimitsTest, CustomLimits) {
  YamlLimits small;
  small.max_nodes = 10;
  small.max_depth = 2;
  small.max_bytes = 100;
  small.max_expanded_bytes = 1 << 20;
  EXPECT_TRUE(CheckYamlLimits("a: [1, 2, 3]", "c", small).ok());
  EXPECT_THAT(std::string(CheckYamlLimits("a: " + FlowList(10), "c", small).message()), HasSubstr("more than 10 nodes"));
  EXPECT_THAT(std::string(CheckYamlLimits("a: [[[1]]]", "c", small).message()), HasSubstr("more than 2 levels"));
  EXPECT_THAT(std::string(CheckYamlLimits(std::string(101, ' '), "c", small).message()),
              HasSubstr("the config is 101 bytes; the limit is 100 bytes"));
  ConfigSource source{"c.yaml", {}};
  EXPECT_THAT(std::string(ParseYamlToJson("a: [[[1]]]", &source, small).status().message()), HasSubstr("more than 2 levels"));
}

}  // namespace
}  // namespace det
