// A gtest fixture shared by the Store's unit tests: a fresh Store in a temp
// dir of its own per test (dir_, its database path_), removed afterwards.
#ifndef DET_MASTER_STORE_STORE_TEST_FIXTURE_H_
#define DET_MASTER_STORE_STORE_TEST_FIXTURE_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "gtest/gtest.h"
#include "master/store/store.h"

namespace det {
namespace master {

class TempStoreTest : public ::testing::Test {
 protected:
  // `prefix`: the temp dir's name before its random suffix.
  explicit TempStoreTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    std::string tmpl = "/tmp/" + prefix_ + "_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/master.db";
    auto store = Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string prefix_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_STORE_TEST_FIXTURE_H_
