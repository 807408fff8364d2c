// AgentSession: the outbound messages to one connected agent; the agent's
// Connect stream writer pops them.
#ifndef DET_MASTER_CORE_AGENT_SESSION_H_
#define DET_MASTER_CORE_AGENT_SESSION_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "det/agent/v1/agent.pb.h"

namespace det::master {

// Thread-safe.
class AgentSession {
 public:
  explicit AgentSession(std::string agent_id) : agent_id_(std::move(agent_id)) {}
  const std::string& agent_id() const { return agent_id_; }
  // Queues `message`; dropped when closed.
  void Push(::det::agent::v1::MasterMessage message);
  // Waits up to `timeout` for a message; false on timeout or when closed.
  bool Pop(::det::agent::v1::MasterMessage* message, std::chrono::milliseconds timeout);
  void Close();
  bool closed() const;

 private:
  const std::string agent_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<::det::agent::v1::MasterMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_AGENT_SESSION_H_
