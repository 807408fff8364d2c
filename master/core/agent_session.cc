#include "master/core/agent_session.h"

namespace det::master {

void AgentSession::Push(::det::agent::v1::MasterMessage message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    queue_.push_back(std::move(message));
  }
  cv_.notify_all();
}

bool AgentSession::Pop(::det::agent::v1::MasterMessage* message, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return closed_ || !queue_.empty(); });
  if (closed_ || queue_.empty()) return false;
  *message = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void AgentSession::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool AgentSession::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

}  // namespace det::master
