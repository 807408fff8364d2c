// The clock the master's time-based policies read (heartbeat timeouts, stop
// timeouts, rendezvous timeouts, missing allocations) and the wall clock its
// timestamps come from, injected through MasterOptions so that a test can
// drive every policy with a FakeClock: no processes, no sleeps.
#ifndef DET_MASTER_CORE_CLOCK_H_
#define DET_MASTER_CORE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace det::master {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds on a monotonic clock (never goes back; arbitrary epoch):
  // for measuring how long something took or waited.
  virtual int64_t MonotonicMs() const = 0;
  // Unix milliseconds: for timestamps that are stored or shown.
  virtual int64_t WallMs() const = 0;
};

// std::chrono::steady_clock and system_clock.
class SystemClock final : public Clock {
 public:
  int64_t MonotonicMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t WallMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told (tests). Both readings advance together.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t wall_ms = 1'700'000'000'000) : wall_base_(wall_ms) {}
  int64_t MonotonicMs() const override { return now_.load(); }
  int64_t WallMs() const override { return wall_base_ + now_.load(); }
  void AdvanceMs(int64_t ms) { now_.fetch_add(ms); }

 private:
  const int64_t wall_base_;
  std::atomic<int64_t> now_{1'000'000};
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CLOCK_H_
