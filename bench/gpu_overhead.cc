// bench/gpu_overhead: the Fashion-MNIST example on a GPU, three ways, each in
// fresh processes and alternating rounds: det-trial --local on the example
// trial.so, the same CNN in a hand-written LibTorch loop, and the same CNN as
// a PyTorch Lightning module (when `python3 -c "import lightning"` works,
// else that side is skipped and says so). Prints training steps/s (median of
// the rounds) and the ratios det-trial / LibTorch (goal >= 0.98) and
// det-trial / Lightning (goal >= 1.3).
//
//   gpu_overhead [--batches N] [--rounds R] [--device auto|cpu|cuda]
//
// Every side times its own training loop only, from its first batch to the
// end of its last, with batches gathered on the CPU and copied to the
// device, as det::DataLoader does. Without a GPU (or with --device cpu) it runs
// on the CPU and says so: a check that the bench works, not its figure.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "bench/det_trial_runner.h"
#include "bench/fashion_mnist_loop.h"
#include "bench/fashion_mnist_py.h"

namespace {
namespace fs = std::filesystem;

constexpr char kPython[] = "python3";

// The Lightning side: the same CNN, data order by a per-epoch permutation,
// Adam 1e-3, batch 64, `batches` steps; prints "batches_per_s <x>" from the
// start of the first training step to the end of the last.
constexpr char kLightningHead[] = R"PY(
import os, sys, time, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
try:
    import lightning as L
except ImportError:
    import pytorch_lightning as L

cache, batches, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
)PY";

// After the shared CNN and load(cache).
constexpr char kLightningTail[] = R"PY(
images, labels = load(cache)

class Batches(torch.utils.data.IterableDataset):
    def __iter__(self):
        n = images.shape[0]
        k = 0
        while k < batches:
            perm = torch.randperm(n)
            for s in range(0, n, 64):
                if k == batches:
                    return
                i = perm[s:s + 64]
                yield images.index_select(0, i), labels.index_select(0, i)
                k += 1

class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = Cnn()
        self.t0 = None
    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            if torch.cuda.is_available(): torch.cuda.synchronize()
            self.t0 = time.perf_counter()
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

torch.manual_seed(42)
model = Module()
trainer = L.Trainer(accelerator="gpu" if device == "cuda" else "cpu", devices=1, max_steps=batches,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, torch.utils.data.DataLoader(Batches(), batch_size=None))
if torch.cuda.is_available(): torch.cuda.synchronize()
print("batches_per_s %.3f" % (batches / (time.perf_counter() - model.t0)))
)PY";

bool HaveLightning() {
  std::string cmd = std::string(kPython) +
                    " -c 'import importlib.util as u, sys; "
                    "sys.exit(0 if u.find_spec(\"lightning\") or u.find_spec(\"pytorch_lightning\") else 1)' "
                    ">/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

double Lightning(const std::string& dir, const std::string& cache, int64_t batches, const std::string& device) {
  std::string script = dir + "/lightning_fmnist.py";
  std::ofstream(script) << kLightningHead << det::bench::kPythonCnnAndData << kLightningTail;
  std::string out = dir + "/lightning.out";
  std::string cmd = std::string(kPython) + " " + script + " " + cache + " " + std::to_string(batches) + " " + device +
                    " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text = det::bench::ReadAll(out);
  std::smatch m;
  if (rc != 0 || !std::regex_search(text, m, std::regex(R"(batches_per_s ([0-9.]+))"))) {
    std::fprintf(stderr, "Lightning run failed (rc %d):\n%s\n", rc, text.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

// Whether LibTorch sees a CUDA device, asked in a child so that this process
// never initialises CUDA before forking the hand-written loop.
bool CudaAvailableInChild() {
  pid_t pid = fork();
  if (pid == 0) _exit(torch::cuda::is_available() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batches = 1000;
  int rounds = 3;
  std::string device = "auto";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) batches = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--device") == 0) device = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (batches <= 0 || rounds <= 0 || (device != "auto" && device != "cpu" && device != "cuda")) {
    std::fprintf(stderr, "usage: gpu_overhead [--batches N] [--rounds R] [--device auto|cpu|cuda]\n");
    return 2;
  }
  const bool cuda = device != "cpu" && CudaAvailableInChild();
  if (device == "cuda" && !cuda) {
    std::fprintf(stderr, "gpu_overhead: --device cuda, but LibTorch sees no CUDA device\n");
    return 2;
  }
  device = cuda ? "cuda" : "cpu";
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // as det-trial's TuneAllocator
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const std::string cache = fashion_mnist::EnsureDefaultCache();
  const std::string dir = det::bench::MakeTempDir("gpu_overhead");
  const bool lightning = HaveLightning();

  std::printf("gpu_overhead: Fashion-MNIST CNN, batch %lld, %lld batches per run, median of %d round(s), on %s%s\n",
              static_cast<long long>(det::bench::kBatchSize), static_cast<long long>(batches), rounds,
              device.c_str(), cuda ? "" : " (no GPU: a check that the bench runs, not a GPU figure)");
  if (!lightning) std::printf("PyTorch Lightning not importable by %s: that side is skipped\n", kPython);
  std::fflush(stdout);
  const std::string config = det::bench::WriteFashionConfig(dir, batches, det::bench::kBatchSize, "1");
  const torch::Device torch_device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  std::vector<double> det, hand, light;
  for (int r = 0; r < rounds; ++r) {
    det.push_back(det::bench::RunDetTrialBatchesPerSecond(dir, config, "--device " + device));
    hand.push_back(det::bench::HandWrittenLoopInChild(batches, torch_device));
    if (lightning) light.push_back(Lightning(dir, cache, batches, device));
    std::printf("  round %d: det-trial %.1f, LibTorch loop %.1f", r + 1, det.back(), hand.back());
    if (lightning) std::printf(", Lightning %.1f", light.back());
    std::printf(" steps/s\n");
    std::fflush(stdout);
  }
  fs::remove_all(dir);
  const double d = det::bench::Median(det), h = det::bench::Median(hand);
  std::printf("det-trial:          %8.1f steps/s\n", d);
  std::printf("LibTorch loop:      %8.1f steps/s\n", h);
  std::printf("ratio det-trial / LibTorch loop: %.3f (goal >= 0.98)\n", d / h);
  if (lightning) {
    const double l = det::bench::Median(light);
    std::printf("PyTorch Lightning:  %8.1f steps/s\n", l);
    std::printf("ratio det-trial / Lightning: %.3f (goal >= 1.3)\n", d / l);
  }
  return 0;
}
