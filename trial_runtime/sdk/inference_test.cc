// det/inference.h: what a caller gets for a directory that is not a local
// checkpoint (issue 49: an s3:// URL names the download step).
#include "det/inference.h"

#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace det {
namespace {

std::string LoadError(const std::string& dir) {
  torch::nn::Linear module(2, 1);
  try {
    load_model_from_checkpoint(dir, *module);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InferenceTest, AnS3UrlNamesTheDownloadCommand) {
  const std::string url = "s3://det-ckpts/team/exp-1/0f3c9a1e-5b2d-4c6e-8f10-112233445566";
  EXPECT_THAT(LoadError(url), ::testing::HasSubstr("'" + url + "' is an S3 checkpoint URL"));
  EXPECT_THAT(LoadError(url), ::testing::HasSubstr("`det-cli checkpoint download UUID --output DIR`"));
  try {
    load_checkpoint_metadata(url);
    ADD_FAILURE() << "no error for " << url;
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("det-cli checkpoint download"));
  }
}

TEST(InferenceTest, AMissingLocalDirectoryIsNotACheckpoint) {
  EXPECT_THAT(LoadError("/nonexistent/ck"),
              ::testing::HasSubstr("'/nonexistent/ck' is not a checkpoint: cannot read /nonexistent/ck/metadata.json"));
}

}  // namespace
}  // namespace det
