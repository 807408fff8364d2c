// StoreMutex: the Store's lock (store.h). A recursive mutex that also counts
// the threads waiting for it and the times it was taken, so that a job done
// in many short steps under it (DatabaseBackup, through
// Store::WithConnection) lets a waiting writer in between two steps.
// glibc's mutex is not fair: a thread that unlocks and at once locks again
// usually takes it back before a woken waiter runs, so without a handoff a
// writer could wait out most of a multi-GB backup.
#ifndef DET_MASTER_STORE_STORE_MUTEX_H_
#define DET_MASTER_STORE_STORE_MUTEX_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace det::master {

class StoreMutex {
 public:
  void lock() {
    if (!mu_.try_lock()) {
      waiting_.fetch_add(1);
      mu_.lock();
      waiting_.fetch_sub(1);
    }
    Took();
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
    Took();
    return true;
  }
  void unlock() {
    --depth_;
    mu_.unlock();
  }

  // Threads blocked in lock() now.
  int waiting() const { return waiting_.load(); }

  // Unlocks (the caller holds it exactly once); when a thread was waiting,
  // returns once another thread took the lock (at most `bound` later, a
  // backstop: a waiter takes a free lock within a scheduling delay).
  void UnlockAndHandOff(std::chrono::milliseconds bound) {
    const bool hand_off = depth_ == 1 && waiting_.load() > 0;
    const uint64_t taken = taken_.load();
    unlock();
    if (!hand_off) return;
    const auto until = std::chrono::steady_clock::now() + bound;
    while (taken_.load() == taken && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }

 private:
  void Took() {
    ++depth_;
    taken_.fetch_add(1);
  }

  std::recursive_mutex mu_;
  std::atomic<int> waiting_{0};
  std::atomic<uint64_t> taken_{0};
  int depth_ = 0;  // the holder's recursion depth (only the holder touches it)
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_STORE_MUTEX_H_
