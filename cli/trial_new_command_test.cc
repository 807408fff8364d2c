// Tests of det-cli trial new: the name rules, the template's substitution and
// the refusal to write into an existing non-empty directory.
#include "cli/trial_new_command.h"

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;
using ::det::testing::ReadFile;
using ::det::testing::TempDir;
using ::det::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(TrialNewTest, AcceptsIdentifiersUpTo64Characters) {
  const std::vector<std::string> names = {"a", "_x", "my_trial", "Trial2", std::string(64, 'a')};
  for (const std::string& name : names) {
    EXPECT_EQ(ValidateTrialName(name), "") << name;
  }
}

TEST(TrialNewTest, RejectsWhatIsNotAnIdentifier) {
  const std::vector<std::string> names = {"",    "1abc", "my-trial", "../evil", "a/b",
                                          "a b", "ünï",  ".",        std::string(65, 'a')};
  for (const std::string& name : names) {
    const std::string error = ValidateTrialName(name);
    EXPECT_THAT(error, HasSubstr("is not a valid trial name")) << name;
    EXPECT_THAT(error, HasSubstr("e.g. my_trial")) << name;
  }
}

// A target CMake or LibTorch's package already defines: the generated
// project would fail to configure.
TEST(TrialNewTest, RejectsNamesCMakeOrTorchAlreadyUse) {
  for (const std::string name : {"all", "test", "install", "torch", "c10"}) {
    EXPECT_THAT(ValidateTrialName(name), HasSubstr("already uses")) << name;
  }
  EXPECT_EQ(ValidateTrialName("torch_trial"), "");
}

TEST(TrialNewTest, FilesAreTheMinimalExampleUnderTheNewName) {
  const auto files = TrialProjectFiles("cats");
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].first, "cats.cc");
  EXPECT_EQ(files[1].first, "CMakeLists.txt");
  EXPECT_EQ(files[2].first, "const.yaml");
  EXPECT_EQ(files[3].first, "adaptive.yaml");
  EXPECT_THAT(files[0].second, HasSubstr("DET_REGISTER_TRIAL("));
  EXPECT_THAT(files[1].second, HasSubstr("find_package(det CONFIG REQUIRED)"));
  EXPECT_THAT(files[1].second, HasSubstr("det_add_trial(cats cats.cc)"));
  EXPECT_THAT(files[2].second, HasSubstr("name: single"));
  EXPECT_THAT(files[3].second, HasSubstr("name: adaptive_asha"));
  for (const auto& [name, content] : files) EXPECT_THAT(content, Not(HasSubstr("minimal_trial"))) << name;
}

TEST(TrialNewTest, WritesTheProjectAndPrintsTheNextCommands) {
  TempDir tmp;
  std::ostringstream out, err;
  ASSERT_EQ(TrialNew({"cats", tmp.path()}, out, err), 0) << err.str();
  const std::string dir = tmp / "cats";
  for (const auto& [name, content] : TrialProjectFiles("cats")) EXPECT_EQ(ReadFile(dir + "/" + name), content);
  EXPECT_EQ(err.str(), "");
  EXPECT_THAT(out.str(), HasSubstr("cmake -S " + dir + " -B " + dir + "/build"));
  EXPECT_THAT(out.str(), HasSubstr("det-cli experiment create --local " + dir + "/const.yaml " + dir +
                                   "/build/cats.so"));
}

TEST(TrialNewTest, UsesAnExistingEmptyDirectory) {
  TempDir tmp;
  fs::create_directory(tmp / "cats");
  std::ostringstream out, err;
  EXPECT_EQ(TrialNew({"cats", tmp.path()}, out, err), 0) << err.str();
  EXPECT_TRUE(fs::exists(tmp / "cats/cats.cc"));
}

TEST(TrialNewTest, RefusesANonEmptyDirectoryAndWritesNothing) {
  TempDir tmp;
  fs::create_directory(tmp / "cats");
  WriteFile(tmp / "cats/notes.txt", "mine");
  std::ostringstream out, err;
  EXPECT_EQ(TrialNew({"cats", tmp.path()}, out, err), 2);
  EXPECT_EQ(err.str(), "det-cli: error: " + (tmp / "cats") +
                           " exists and is not empty; choose another NAME or --dir (nothing was written)\n");
  EXPECT_EQ(out.str(), "");
  EXPECT_FALSE(fs::exists(tmp / "cats/cats.cc"));
  EXPECT_EQ(ReadFile(tmp / "cats/notes.txt"), "mine");
}

TEST(TrialNewTest, RefusesAFileInTheWay) {
  TempDir tmp;
  WriteFile(tmp / "cats", "a file");
  std::ostringstream out, err;
  EXPECT_EQ(TrialNew({"cats", tmp.path()}, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr((tmp / "cats") + " exists and is not a directory"));
}

TEST(TrialNewTest, RefusesABadNameBeforeTouchingTheDisk) {
  TempDir tmp;
  std::ostringstream out, err;
  EXPECT_EQ(TrialNew({"../escape", tmp / "sub"}, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("det-cli: error: NAME '../escape' is not a valid trial name"));
  EXPECT_FALSE(fs::exists(tmp / "sub"));
  EXPECT_FALSE(fs::exists(tmp / "escape"));
}

}  // namespace
}  // namespace det::cli
