// bench/harness_overhead: the Fashion-MNIST CNN trained for the same number
// of batches (same model, data, batch size, optimizer) by
//   - a hand-written LibTorch loop in a child process,
//   - det-trial --local on the example trial.so with profiling off (no
//     `profiling:` section, the default),
//   - the same with `profiling: {enabled: true}`,
//   - with --before-det-trial, an older build's det-trial and trial.so
//     (profiling off), e.g. the release before the profiler;
// each in a fresh process, interleaved: every round runs each variant once,
// round r starting at variant r (mod the count), so drift over the run
// favours none. The profiled run must have written `profiling` rows and the
// others none, else the bench fails.
//
// Prints each round, the medians, then the per-round ratios' median and
// spread (min-max, and the middle 3 of 5 rounds: bench/round_ratios.h) next
// to the goals:
//   profiling on / off: cost <= 2% at the cost's upper bound, i.e. the
//     middle interval's low end >= 0.98;
//   profiling off / hand-written: median >= 0.98 (the harness's old goal);
//   profiling off / before: 1.0 inside the middle interval (today's build,
//     profiling off, costs nothing measurable against the older one).
// Fewer than 5 rounds print the figures but judge no goal.
//
//   harness_overhead [--batches N (400)] [--rounds R (5)]
//                    [--before-det-trial PATH --before-trial-so PATH]
// DET_BENCH_WORKERS sets det-trial's data-loader threads (default 1).
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/det_trial_runner.h"
#include "bench/fashion_mnist_loop.h"
#include "bench/round_ratios.h"

namespace {
namespace fs = std::filesystem;
using det::bench::kMinRoundsForClaims;
using det::bench::Median;
using det::bench::RatioSpread;

struct Options {
  int64_t batches = 400;
  int rounds = 5;
  std::string before_det_trial, before_trial_so;
};

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(stderr,
               "harness_overhead: %s\nusage: harness_overhead [--batches N (1-100000, default 400)] "
               "[--rounds R (1-50, default 5)] [--before-det-trial PATH --before-trial-so PATH]\n",
               problem.c_str());
  std::exit(2);
}

int64_t Bounded(const std::string& flag, const std::string& value, int64_t lo, int64_t hi) {
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi) {
    Usage(flag + " '" + value + "' is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

std::string ExistingFile(const std::string& flag, const std::string& value) {
  std::error_code ec;
  if (!fs::is_regular_file(value, ec)) Usage(flag + " '" + value + "' is not a file: give an existing path");
  return fs::absolute(value).string();
}

Options ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    std::string v = argv[i + 1];
    if (flag == "--batches") {
      o.batches = Bounded(flag, v, 1, 100000);
    } else if (flag == "--rounds") {
      o.rounds = static_cast<int>(Bounded(flag, v, 1, 50));
    } else if (flag == "--before-det-trial") {
      o.before_det_trial = ExistingFile(flag, v);
    } else if (flag == "--before-trial-so") {
      o.before_trial_so = ExistingFile(flag, v);
    } else {
      Usage("unknown flag '" + flag + "'");
    }
  }
  if (o.before_det_trial.empty() != o.before_trial_so.empty()) {
    Usage("--before-det-trial and --before-trial-so go together: give the older build's det-trial and the "
          "fashion_mnist_trial.so built with it");
  }
  return o;
}

std::string Workers() {
  const char* w = std::getenv("DET_BENCH_WORKERS");
  std::string s = w ? w : "1";
  if (s.empty() || s.size() > 2 || s.find_first_not_of("0123456789") != std::string::npos) {
    std::fprintf(stderr, "harness_overhead: DET_BENCH_WORKERS '%s' is not a number from 0 to 99\n", s.c_str());
    std::exit(2);
  }
  return s;
}

// Rows of `group` in a run's metrics.csv (lines "group,batch,epochs,metric,value"):
// one per line whose metric is `metric`.
int CountRows(const std::string& csv, const std::string& group, const std::string& metric) {
  std::ifstream in(csv);
  std::string line;
  int n = 0;
  const std::string prefix = group + ",";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    size_t c3 = line.find(',', line.find(',', prefix.size()) + 1);
    if (c3 != std::string::npos && line.compare(c3 + 1, metric.size() + 1, metric + ",") == 0) ++n;
  }
  return n;
}

struct Variant {
  std::string name;
  std::function<double(std::string* note)> run;
  std::vector<double> per_round;
  std::string note;  // what the last run recorded, for the round's line
};

// det-trial in dir (a variant's own), checking that profiling ran exactly
// when `profiled`.
double DetTrialRun(const std::string& det_trial, const std::string& trial_so, const std::string& dir,
                   const std::string& config, bool profiled, std::string* note) {
  double bps = det::bench::RunDetTrialBinary(det_trial, trial_so, dir, config, "");
  const std::string csv = dir + "/run/metrics.csv";
  int prof = CountRows(csv, "profiling", "wall_s"), sys = CountRows(csv, "system", "rss_bytes");
  if (profiled && prof == 0) {
    std::fprintf(stderr,
                 "harness_overhead: FAILED: the run with `profiling: {enabled: true}` recorded no `profiling` rows "
                 "(no 'profiling,...,wall_s,' line in %s): the profiler did not run, so its cost is not measured. "
                 "det-trial's output:\n%s\n",
                 csv.c_str(), det::bench::ReadAll(dir + "/det-trial.out").c_str());
    std::exit(1);
  }
  if (!profiled && prof + sys > 0) {
    std::fprintf(stderr, "harness_overhead: FAILED: a run without profiling recorded %d profiling and %d system rows in %s\n",
                 prof, sys, csv.c_str());
    std::exit(1);
  }
  *note = profiled ? " (" + std::to_string(prof) + " profiling, " + std::to_string(sys) + " system rows)" : "";
  return bps;
}

std::vector<Variant> MakeVariants(const Options& o, const std::string& dir) {
  const std::string workers = Workers();
  std::vector<Variant> v(3);
  v[0].name = "hand-written";
  v[0].run = [o](std::string*) { return det::bench::HandWrittenLoopInChild(o.batches, torch::kCPU); };
  auto det_trial = [&, workers](Variant& var, const std::string& sub, const std::string& bin, const std::string& so,
                                bool profiled) {
    fs::create_directories(dir + "/" + sub);
    std::string config = det::bench::WriteFashionConfig(dir + "/" + sub, o.batches, det::bench::kBatchSize, workers,
                                                        profiled ? "profiling:\n  enabled: true\n" : "");
    var.run = [=, d = dir + "/" + sub](std::string* note) { return DetTrialRun(bin, so, d, config, profiled, note); };
  };
  v[1].name = "profiling off";
  v[2].name = "profiling on";
  if (!o.before_det_trial.empty()) {
    v.resize(4);
    v[3].name = "before";
  }
  det_trial(v[1], "off", DET_TRIAL_BIN, DET_FASHION_TRIAL, false);
  det_trial(v[2], "on", DET_TRIAL_BIN, DET_FASHION_TRIAL, true);
  if (v.size() == 4) det_trial(v[3], "before", o.before_det_trial, o.before_trial_so, false);
  return v;
}

std::string LoadAverage() {
  std::string s = det::bench::ReadAll("/proc/loadavg");
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
}

void PrintRatio(const char* what, const RatioSpread& s, const std::string& goal, bool met, bool judged) {
  std::printf("%-30s %s; goal: %s: %s\n", what, det::bench::Describe(s).c_str(), goal.c_str(),
              !judged ? "not judged (fewer than 5 rounds)" : met ? "met" : "NOT met");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseFlags(argc, argv);
  // The same allocator tuning det-trial applies, so the hand-written loop is
  // not handicapped by glibc's mmap churn.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const std::string dir = det::bench::MakeTempDir("harness_overhead");
  std::vector<Variant> v = MakeVariants(o, dir);
  std::printf("harness_overhead: Fashion-MNIST CNN, batch %lld, %lld batches per run, %d rounds, %zu variants "
              "interleaved (round r starts with variant r); each in a fresh process, timing its training loop only; "
              "load average %s\n",
              static_cast<long long>(det::bench::kBatchSize), static_cast<long long>(o.batches), o.rounds, v.size(),
              LoadAverage().c_str());
  if (v.size() == 4) std::printf("before: %s with %s\n", o.before_det_trial.c_str(), o.before_trial_so.c_str());
  if (o.rounds < kMinRoundsForClaims) std::printf("fewer than 5 rounds: the spread is meaningless, no goal is judged\n");
  for (int r = 0; r < o.rounds; ++r) {
    for (size_t k = 0; k < v.size(); ++k) {
      Variant& var = v[(r + k) % v.size()];
      var.per_round.push_back(var.run(&var.note));
    }
    std::printf("  round %d (starts with %s):", r + 1, v[r % v.size()].name.c_str());
    for (const Variant& var : v) std::printf(" %s %.2f%s;", var.name.c_str(), var.per_round.back(), var.note.c_str());
    std::printf(" batches/s\n");
  }
  fs::remove_all(dir);
  std::printf("medians (batches/s):");
  for (const Variant& var : v) std::printf(" %s %.2f;", var.name.c_str(), Median(var.per_round));
  std::printf(" load average %s\n", LoadAverage().c_str());
  const bool judged = o.rounds >= kMinRoundsForClaims;
  auto spread = [&](int a, int b) {
    return det::bench::SpreadOf(det::bench::PerRoundRatios(v[a].per_round, v[b].per_round));
  };
  RatioSpread on_off = spread(2, 1), off_hand = spread(1, 0);
  PrintRatio("profiling on / off:", on_off,
             "cost <= 2% at the cost's upper bound, i.e. the middle interval's low end >= 0.98", on_off.low >= 0.98,
             judged);
  PrintRatio("profiling off / hand-written:", off_hand, "median >= 0.98 (as before)", off_hand.median >= 0.98, judged);
  if (v.size() == 4) {
    RatioSpread off_before = spread(1, 3);
    PrintRatio("profiling off / before:", off_before, "1.0 inside the middle interval (within the noise)",
               off_before.low <= 1.0 && 1.0 <= off_before.high, judged);
  }
  return 0;
}
