// bench/ddp_scaling: data-parallel scaling of the Fashion-MNIST example. Trains
// the same CNN with the same global batch size on 1 and on 2 ranks with
// det-trial --local --nproc N (Gloo process group on loopback), and the same
// model with Python torch.distributed DistributedDataParallel over Gloo
// (Debian's python3-torch), each in fresh processes, alternating; prints
// samples/s, the scaling efficiency (2-rank samples/s / (2 x 1-rank)), and
// det-trial's throughput relative to DDP's. Python gets the same glibc
// allocator setting det-trial makes for itself. Without python3-torch it says
// so and prints the det-trial numbers only.
//
//   ddp_scaling [--batches N] [--rounds R] [--global-batch-size G]
//
// Every rank uses one torch thread, so N ranks use N cores.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/det_trial_runner.h"
#include "bench/fashion_mnist_py.h"
#include "examples/fashion_mnist/fashion_mnist_data.h"

namespace {
namespace fs = std::filesystem;

constexpr char kPython[] = "/usr/bin/python3";

// One DDP training run: `--nproc` ranks spawned by torch.multiprocessing, each
// reading its slice of every global batch of a per-epoch permutation (as
// det::DataLoader does), the same CNN as examples/fashion_mnist, Adam.
// Prints "samples_per_s <x>" (rank 0's wall time over all batches).
constexpr char kDdpScriptHead[] = R"PY(
import os, sys, time, socket
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
import torch.multiprocessing as mp

cache, nproc, batches, gbs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
)PY";

// After the shared CNN and load(cache).
constexpr char kDdpScriptTail[] = R"PY(
def run(rank, port, out):
    torch.set_num_threads(1)
    torch.manual_seed(42)
    if nproc > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=nproc)
    x, y = load(cache)
    model = Cnn()
    if nproc > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    per_slot = gbs // nproc
    n = x.shape[0]
    per_epoch = n // gbs
    g = torch.Generator()
    start = time.perf_counter()
    for k in range(batches):
        if k % per_epoch == 0:
            g.manual_seed(1000 + k // per_epoch)
            perm = torch.randperm(n, generator=g)
        first = (k % per_epoch) * gbs + rank * per_slot
        idx = perm[first:first + per_slot]
        loss = F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    secs = time.perf_counter() - start
    if rank == 0:
        with open(out, "w") as f:
            f.write("samples_per_s %f\n" % (batches * gbs / secs))
    if nproc > 1:
        dist.destroy_process_group()

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ddp_scaling_%d.txt" % os.getpid())
    if nproc == 1:
        run(0, port, out)
    else:
        mp.spawn(run, args=(port, out), nprocs=nproc, join=True)
    print(open(out).read().strip())
    os.remove(out)
)PY";

using det::bench::MakeTempDir;
using det::bench::Median;
using det::bench::ReadAll;

bool HavePythonTorch() {
  std::string cmd = std::string(kPython) + " -c 'import torch, torch.distributed as d; assert d.is_gloo_available()'" +
                    " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Samples/s of det-trial's training loop (rank 0's "training throughput").
double DetTrial(const std::string& dir, int nproc, int64_t batches, int64_t gbs) {
  std::string config = det::bench::WriteFashionConfig(dir, batches, gbs, "1");
  return det::bench::RunDetTrialBatchesPerSecond(dir, config, "--nproc " + std::to_string(nproc) + " --threads 1") *
         static_cast<double>(gbs);
}

double Ddp(const std::string& dir, const std::string& cache, int nproc, int64_t batches, int64_t gbs) {
  std::string script = dir + "/ddp.py";
  std::ofstream(script) << kDdpScriptHead << det::bench::kPythonCnnAndData << kDdpScriptTail;
  std::string out = dir + "/ddp.out";
  // The same glibc allocator setting det-trial makes (TuneAllocator): without
  // it the activations freed every batch are mmap'ed and unmapped each time.
  std::string cmd = std::string("TMPDIR=") + dir + " MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456 " +
                    kPython + " " + script + " " + cache + " " +
                    std::to_string(nproc) + " " + std::to_string(batches) + " " + std::to_string(gbs) + " > " + out +
                    " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text = ReadAll(out);
  std::smatch m;
  if (rc != 0 || !std::regex_search(text, m, std::regex(R"(samples_per_s ([0-9.]+))"))) {
    std::fprintf(stderr, "torch DDP --nproc %d failed (rc %d):\n%s\n", nproc, rc, text.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}


}  // namespace

int main(int argc, char** argv) {
  int64_t batches = 300;
  int rounds = 3;
  int64_t gbs = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) batches = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--global-batch-size") == 0) gbs = std::atoll(argv[i + 1]);
  }
  if (batches <= 0 || rounds <= 0 || gbs <= 0 || gbs % 2 != 0) {
    std::fprintf(stderr, "usage: ddp_scaling [--batches N] [--rounds R] [--global-batch-size EVEN]\n");
    return 2;
  }
  const std::string cache = fashion_mnist::EnsureDefaultCache();
  const std::string dir = MakeTempDir("ddp_scaling");
  const bool python = HavePythonTorch();

  std::printf("Fashion-MNIST CNN, global batch %lld, %lld batches, 1 torch thread per rank, Gloo on loopback, "
              "median of %d round(s)\n",
              static_cast<long long>(gbs), static_cast<long long>(batches), rounds);
  if (!python) std::printf("python3-torch not installed (%s): torch DDP comparison skipped\n", kPython);
  std::fflush(stdout);
  std::vector<double> det1, det2, ddp1, ddp2;
  for (int r = 0; r < rounds; ++r) {
    det1.push_back(DetTrial(dir, 1, batches, gbs));
    det2.push_back(DetTrial(dir, 2, batches, gbs));
    if (python) {
      ddp1.push_back(Ddp(dir, cache, 1, batches, gbs));
      ddp2.push_back(Ddp(dir, cache, 2, batches, gbs));
    }
  }
  fs::remove_all(dir);
  const double d1 = Median(det1), d2 = Median(det2);
  std::printf("det-trial  1 rank:  %8.1f samples/s\n", d1);
  std::printf("det-trial  2 ranks: %8.1f samples/s   scaling efficiency %.3f\n", d2, d2 / (2 * d1));
  if (python) {
    const double p1 = Median(ddp1), p2 = Median(ddp2);
    std::printf("torch DDP  1 rank:  %8.1f samples/s\n", p1);
    std::printf("torch DDP  2 ranks: %8.1f samples/s   scaling efficiency %.3f\n", p2, p2 / (2 * p1));
    std::printf("ratio det-trial / torch DDP: %.3f with 1 rank, %.3f with 2 ranks\n", d1 / p1, d2 / p2);
  }
  return 0;
}
