// LockProbe: whether a mutex can be taken within a bound (MasterCore::Ping,
// the health checks' core probe). A thread of its own takes and releases
// the mutex with a blocking lock, which waits on the mutex and is woken when
// the holder releases it; a try_lock poll only wins when a try happens to
// find it free, so under steady contention it can miss a busy but healthy
// holder for its whole bound. Callers never block on the mutex: they ask
// for a probe and wait for its answer up to their bound; callers asking at
// the same time share the probe thread.
#ifndef DET_MASTER_CORE_LOCK_PROBE_H_
#define DET_MASTER_CORE_LOCK_PROBE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace det::master {

class LockProbe {
 public:
  explicit LockProbe(std::mutex& target) : target_(target) {}
  // Waits for the probe thread to take its last turn (the mutex must be
  // released by then).
  ~LockProbe() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  LockProbe(const LockProbe&) = delete;
  LockProbe& operator=(const LockProbe&) = delete;

  // True when the probe thread took and released `target` after this call
  // began, within `wait`; false otherwise (the mutex stays held).
  bool Probe(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> l(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    const uint64_t mine = ++asked_;
    cv_.notify_all();
    return cv_.wait_for(l, wait, [&] { return answered_ >= mine; });
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || asked_ > answered_; });
      if (stop_) return;
      const uint64_t target = asked_;
      l.unlock();
      { std::lock_guard<std::mutex> taken(target_); }  // waits on the mutex itself
      l.lock();
      answered_ = target;
      cv_.notify_all();
    }
  }

  std::mutex& target_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t asked_ = 0;     // probes asked for
  uint64_t answered_ = 0;  // asked_ as the probe thread last took the mutex
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_LOCK_PROBE_H_
