#include "trial_runtime/runtime/distributed.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace det::runtime {
namespace {

// How long a non-chief rank waits for the chief's next message (the chief
// may be writing a large checkpoint, evaluating a full dataset, or waiting on
// the master's searcher). A chief that exits is noticed at once regardless.
constexpr std::chrono::hours kReceiveWait{24};

absl::StatusOr<int> EnvInt(const char* name, int fallback, int min, int max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int out = 0;
  if (!absl::SimpleAtoi(v, &out) || out < min || out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", v, "' must be an integer in [", min, ", ", max, "]"));
  }
  return out;
}

std::string What(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// This host's address on the route to host:port (a UDP "connect" sends
// nothing; it only makes the kernel choose the source address); empty when
// there is no route or the host does not resolve.
std::string LocalAddressToward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  for (addrinfo* ai = res; ai != nullptr && out.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {0};
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* a = local.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, a, buf, sizeof(buf)) != nullptr) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// A bucket of tensors of one dtype and device, flattened into one buffer.
struct Bucket {
  std::vector<torch::Tensor> tensors;  // params (gradients) or tensors (broadcast)
  int64_t numel = 0;
};

// Groups `tensors` in order into buckets of one dtype and device and at most
// about `bucket_bytes` each.
template <typename SizeOf>
std::vector<Bucket> MakeBuckets(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes, SizeOf numel_of) {
  std::vector<Bucket> buckets;
  std::map<std::pair<int, std::string>, size_t> open;  // (dtype, device) -> index in buckets
  for (const auto& t : tensors) {
    auto key = std::make_pair(static_cast<int>(t.scalar_type()), t.device().str());
    auto it = open.find(key);
    if (it == open.end()) {
      it = open.emplace(key, buckets.size()).first;
      buckets.emplace_back();
    }
    Bucket& b = buckets[it->second];
    b.tensors.push_back(t);
    b.numel += numel_of(t);
    if (b.numel * static_cast<int64_t>(t.element_size()) >= bucket_bytes) open.erase(it);
  }
  return buckets;
}

class GroupGradientReducer final : public GradientReducer {
 public:
  explicit GroupGradientReducer(Distributed* dist) : dist_(dist) {}
  void ReduceGradients(const std::vector<torch::Tensor>& params) override {
    absl::Status st = dist_->AverageGradients(params);
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  }
  void BroadcastParameters(const std::vector<torch::Tensor>& params) override {
    absl::Status st = dist_->BroadcastFromChief(params);
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  }

 private:
  Distributed* dist_;
};

}  // namespace

absl::StatusOr<DistributedEnv> ReadDistributedEnv() {
  DistributedEnv env;
  constexpr int kMax = 1 << 20;
  auto world = EnvInt("DET_WORLD_SIZE", 1, 1, kMax);
  if (!world.ok()) return world.status();
  env.world_size = *world;
  if (env.world_size == 1) return env;
  struct Field {
    const char* name;
    int* out;
    int fallback, min, max;
  };
  const Field fields[] = {
      {"DET_RANK", &env.rank, -1, 0, env.world_size - 1},
      {"DET_LOCAL_RANK", &env.local_rank, 0, 0, kMax},
      {"DET_LOCAL_SIZE", &env.local_size, 1, 1, kMax},
      {"DET_NODE_RANK", &env.node_rank, 0, 0, kMax},
      {"DET_NUM_NODES", &env.num_nodes, 1, 1, kMax},
      {"DET_CHIEF_PORT", &env.chief_port, 0, 1, 65535},
  };
  for (const Field& f : fields) {
    auto v = EnvInt(f.name, f.fallback, f.min, f.max);
    if (!v.ok()) return v.status();
    *f.out = *v;
  }
  if (env.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DET_WORLD_SIZE is ", env.world_size, " but DET_RANK is not set"));
  }
  if (env.chief_port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DET_WORLD_SIZE is ", env.world_size, " but DET_CHIEF_PORT is not set (or 0): the process group needs the "
        "port of the chief's store"));
  }
  const char* addr = std::getenv("DET_CHIEF_ADDR");
  if (addr == nullptr || *addr == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(
        "DET_WORLD_SIZE is ", env.world_size, " but DET_CHIEF_ADDR is empty: the process group needs the address "
        "of the chief's store"));
  }
  env.chief_addr = addr;
  if (env.local_rank >= env.local_size || env.node_rank >= env.num_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent ranks: DET_LOCAL_RANK ", env.local_rank,
                                                   " of DET_LOCAL_SIZE ", env.local_size, ", DET_NODE_RANK ",
                                                   env.node_rank, " of DET_NUM_NODES ", env.num_nodes));
  }
  auto timeout = EnvInt("DET_DIST_TIMEOUT_S", 60, 1, 7 * 24 * 3600);
  if (!timeout.ok()) return timeout.status();
  env.timeout = std::chrono::seconds(*timeout);
  return env;
}

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroup> gloo;
#ifdef USE_C10D_NCCL
  c10::intrusive_ptr<c10d::ProcessGroup> nccl;  // for CUDA tensors, when any
#endif
  // The group that reduces tensors on `device`, and whether they go through
  // a CPU staging buffer.
  c10d::ProcessGroup& GroupFor(const torch::Device& device, bool* stage_on_cpu) {
#ifdef USE_C10D_NCCL
    if (device.is_cuda() && nccl) {
      *stage_on_cpu = false;
      return *nccl;
    }
#endif
    *stage_on_cpu = !device.is_cpu();
    return *gloo;
  }
};

Distributed::Distributed(DistributedEnv env) : env_(std::move(env)), impl_(std::make_unique<Impl>()) {}

Distributed::~Distributed() {
  // The group before the store it was formed over.
  impl_->gloo.reset();
#ifdef USE_C10D_NCCL
  impl_->nccl.reset();
#endif
  impl_->store.reset();
}

absl::Status Distributed::Error(const std::string& what, const std::string& detail) const {
  return absl::UnavailableError(absl::StrCat(
      what, " across ", env_.world_size, " ranks failed on rank ", env_.rank, ": ", detail,
      " (another rank failed or exited, or did not respond within DET_DIST_TIMEOUT_S=",
      std::chrono::duration_cast<std::chrono::seconds>(env_.timeout).count(), " s)"));
}

absl::StatusOr<std::unique_ptr<Distributed>> Distributed::Join(const DistributedEnv& env) {
  if (!env.distributed()) return absl::InvalidArgumentError("Distributed::Join needs a world size above 1");
  std::unique_ptr<Distributed> d(new Distributed(env));
  const std::string where = absl::StrCat(env.chief_addr, ":", env.chief_port);
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.chief_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = static_cast<size_t>(env.world_size);
    opts.waitWorkers = true;
    opts.timeout = env.timeout;
    d->impl_->store = c10::make_intrusive<c10d::TCPStore>(env.chief_addr, opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", env.rank, " of ", env.world_size, ": cannot ", env.rank == 0 ? "host" : "reach",
        " the process group's store at ", where, " within DET_DIST_TIMEOUT_S=",
        std::chrono::duration_cast<std::chrono::seconds>(env.timeout).count(), " s: ", What(e)));
  }
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(env.timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (env.num_nodes == 1 || IsLoopback(env.chief_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      // The address the other ranks reach this one at: the one on the route
      // to the chief (on the chief, its own address). The default device
      // would resolve the hostname, which on many hosts means 127.0.1.1.
      const std::string local = LocalAddressToward(env.chief_addr, env.chief_port);
      options->devices.push_back(local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                               : c10d::ProcessGroupGloo::createDeviceForHostname(local));
    }
    options->threads = 2;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("det/gloo", d->impl_->store);
    d->impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size, options);
#ifdef USE_C10D_NCCL
    if (torch::cuda::is_available()) {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = env.timeout;
      auto nccl_store = c10::make_intrusive<c10d::PrefixStore>("det/nccl", d->impl_->store);
      d->impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(nccl_store, env.rank, env.world_size, nccl_options);
    }
#endif
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", env.rank, " of ", env.world_size,
                                               ": forming the process group over the store at ", where,
                                               " failed: ", What(e)));
  }
  return d;
}

absl::Status Distributed::BroadcastFromChief(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  try {
    auto buckets = MakeBuckets(tensors, bucket_bytes_, [](const torch::Tensor& t) { return t.numel(); });
    std::vector<std::pair<torch::Tensor, c10::intrusive_ptr<c10d::Work>>> flights;
    for (Bucket& b : buckets) {
      bool stage = false;
      c10d::ProcessGroup& pg = impl_->GroupFor(b.tensors.front().device(), &stage);
      auto opts = b.tensors.front().options();
      if (stage) opts = opts.device(torch::kCPU);
      torch::Tensor flat = torch::empty({b.numel}, opts);
      int64_t off = 0;
      for (const auto& t : b.tensors) {
        flat.narrow(0, off, t.numel()).copy_(t.reshape(-1));
        off += t.numel();
      }
      std::vector<torch::Tensor> v{flat};
      c10d::BroadcastOptions bo;
      bo.rootRank = 0;
      flights.emplace_back(flat, pg.broadcast(v, bo));
    }
    for (size_t i = 0; i < buckets.size(); ++i) {
      flights[i].second->wait();
      int64_t off = 0;
      for (auto& t : buckets[i].tensors) {
        t.copy_(flights[i].first.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
  } catch (const std::exception& e) {
    return Error("broadcast of the initial parameters", What(e));
  }
  return absl::OkStatus();
}

absl::Status Distributed::AverageGradients(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> trainable;
  trainable.reserve(params.size());
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    if (p.grad().defined() && p.grad().is_sparse()) {
      return absl::InvalidArgumentError("distributed training does not support sparse gradients");
    }
    trainable.push_back(p);
  }
  torch::NoGradGuard no_grad;
  try {
    // Each bucket holds its parameters' gradients followed by one flag per
    // parameter (1 where this rank has a gradient), summed with them.
    auto buckets = MakeBuckets(trainable, bucket_bytes_, [](const torch::Tensor& p) { return p.numel() + 1; });
    std::vector<std::pair<torch::Tensor, c10::intrusive_ptr<c10d::Work>>> flights;
    for (Bucket& b : buckets) {
      bool stage = false;
      c10d::ProcessGroup& pg = impl_->GroupFor(b.tensors.front().device(), &stage);
      auto opts = b.tensors.front().options().requires_grad(false);
      if (stage) opts = opts.device(torch::kCPU);
      const int64_t n = static_cast<int64_t>(b.tensors.size());
      torch::Tensor flat = torch::empty({b.numel}, opts);
      const int64_t grads_numel = b.numel - n;
      int64_t off = 0;
      std::vector<float> flags(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const torch::Tensor& p = b.tensors[static_cast<size_t>(i)];
        torch::Tensor slot = flat.narrow(0, off, p.numel());
        if (p.grad().defined()) {
          slot.copy_(p.grad().reshape(-1));
          flags[static_cast<size_t>(i)] = 1;
        } else {
          slot.zero_();
        }
        off += p.numel();
      }
      flat.narrow(0, grads_numel, n).copy_(torch::tensor(flags));
      std::vector<torch::Tensor> v{flat};
      flights.emplace_back(flat, pg.allreduce(v, c10d::AllreduceOptions()));
    }
    const double world = static_cast<double>(env_.world_size);
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      flights[bi].second->wait();
      torch::Tensor flat = flights[bi].first;
      const auto& tensors = buckets[bi].tensors;
      const int64_t n = static_cast<int64_t>(tensors.size());
      const int64_t grads_numel = buckets[bi].numel - n;
      torch::Tensor counts = flat.narrow(0, grads_numel, n).to(torch::kCPU, torch::kDouble).contiguous();
      const double* count = counts.data_ptr<double>();
      flat.narrow(0, 0, grads_numel).div_(world);
      int64_t off = 0;
      for (int64_t i = 0; i < n; ++i) {
        torch::Tensor p = tensors[static_cast<size_t>(i)];
        torch::Tensor mean = flat.narrow(0, off, p.numel()).view(p.sizes());
        off += p.numel();
        if (count[i] < 0.5) continue;  // no rank has a gradient
        if (p.grad().defined()) {
          p.mutable_grad().copy_(mean);
        } else {
          p.mutable_grad() = mean.to(p.device()).clone();
        }
      }
    }
  } catch (const std::exception& e) {
    return Error("all-reduce of the gradients", What(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Distributed::AnyTrue(bool value) {
  try {
    std::vector<torch::Tensor> v{torch::full({1}, value ? 1 : 0, torch::kInt)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    impl_->gloo->allreduce(v, opts)->wait();
    return v[0].item<int>() != 0;
  } catch (const std::exception& e) {
    return Error("the stop vote", What(e));
  }
}

absl::StatusOr<std::vector<std::string>> Distributed::AllGather(const std::string& bytes) {
  try {
    const size_t n = static_cast<size_t>(env_.world_size);
    std::vector<torch::Tensor> len_in{torch::full({1}, static_cast<int64_t>(bytes.size()), torch::kLong)};
    std::vector<std::vector<torch::Tensor>> len_out(1);
    for (size_t r = 0; r < n; ++r) len_out[0].push_back(torch::empty({1}, torch::kLong));
    impl_->gloo->allgather(len_out, len_in)->wait();
    int64_t max_len = 1;
    std::vector<int64_t> lens(n);
    for (size_t r = 0; r < n; ++r) {
      lens[r] = len_out[0][r].item<int64_t>();
      max_len = std::max(max_len, lens[r]);
    }
    std::vector<torch::Tensor> data_in{torch::zeros({max_len}, torch::kUInt8)};
    std::memcpy(data_in[0].data_ptr<uint8_t>(), bytes.data(), bytes.size());
    std::vector<std::vector<torch::Tensor>> data_out(1);
    for (size_t r = 0; r < n; ++r) data_out[0].push_back(torch::empty({max_len}, torch::kUInt8));
    impl_->gloo->allgather(data_out, data_in)->wait();
    std::vector<std::string> out(n);
    for (size_t r = 0; r < n; ++r) {
      out[r].assign(reinterpret_cast<const char*>(data_out[0][r].data_ptr<uint8_t>()), static_cast<size_t>(lens[r]));
    }
    return out;
  } catch (const std::exception& e) {
    return Error("all-gather", What(e));
  }
}

absl::Status Distributed::Publish(const std::string& bytes) {
  if (!is_chief()) return absl::FailedPreconditionError("only the chief (rank 0) publishes messages");
  const int64_t seq = publish_seq_++;
  const std::string key = absl::StrCat("det/msg/", seq);
  std::vector<std::string> acks;
  for (int r = 1; r < env_.world_size; ++r) acks.push_back(absl::StrCat("det/ack/", seq, "/", r));
  try {
    impl_->store->set(key, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    impl_->store->wait(acks, env_.timeout);
    impl_->store->deleteKey(key);
    for (const auto& k : acks) impl_->store->deleteKey(k);
  } catch (const std::exception& e) {
    return Error("handing the chief's result to the other ranks", What(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Distributed::Receive() {
  if (is_chief()) return absl::FailedPreconditionError("the chief (rank 0) does not receive messages");
  const int64_t seq = receive_seq_++;
  const std::string key = absl::StrCat("det/msg/", seq);
  try {
    impl_->store->wait({key}, std::chrono::duration_cast<std::chrono::milliseconds>(kReceiveWait));
    std::vector<uint8_t> v = impl_->store->get(key);
    impl_->store->set(absl::StrCat("det/ack/", seq, "/", env_.rank), std::vector<uint8_t>{1});
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", env_.rank, " lost the chief (rank 0) while waiting for its ",
                                               "next message: ", What(e)));
  }
}

absl::Status Distributed::Finish() {
  try {
    if (!is_chief()) {
      impl_->store->set(absl::StrCat("det/done/", env_.rank), std::vector<uint8_t>{1});
      return absl::OkStatus();
    }
    std::vector<std::string> keys;
    for (int r = 1; r < env_.world_size; ++r) keys.push_back(absl::StrCat("det/done/", r));
    impl_->store->wait(keys, env_.timeout);
  } catch (const std::exception& e) {
    return Error("the final handshake", What(e));
  }
  return absl::OkStatus();
}

std::shared_ptr<GradientReducer> Distributed::MakeGradientReducer() {
  return std::make_shared<GroupGradientReducer>(this);
}

}  // namespace det::runtime
