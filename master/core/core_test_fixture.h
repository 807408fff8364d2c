// A gtest fixture for MasterCore tests without processes: a MasterCore on a
// SQLite file in a temp dir of its own, no background thread (a test runs
// RunBackgroundPass when it says so), and a FakeClock unless a test sets
// clock_ to null (then the system clock). Restart() is a master restart on
// the same store. Tests call the core's entry points directly.
#ifndef DET_MASTER_CORE_CORE_TEST_FIXTURE_H_
#define DET_MASTER_CORE_CORE_TEST_FIXTURE_H_

#include <memory>

#include <gtest/gtest.h>

#include "master/core/clock.h"
#include "master/core/master_core.h"
#include "tests/test_util.h"

namespace det::master {

class MasterCoreFixture : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  // Opens a MasterCore on dir_ with the options above and Customize's.
  void Open() {
    MasterOptions options;
    options.data_dir = dir_.path();
    options.clock = clock_;
    options.background_thread = false;
    Customize(&options);
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    Opened();
  }
  void Restart() {
    core_.reset();
    Open();
  }
  // More options for every Open (timeouts, pools, ...).
  virtual void Customize(MasterOptions* /*options*/) {}
  // Runs after every Open, with core_ set.
  virtual void Opened() {}

  det::testing::TempDir dir_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::unique_ptr<MasterCore> core_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CORE_TEST_FIXTURE_H_
