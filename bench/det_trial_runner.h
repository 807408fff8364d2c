// What the Fashion-MNIST benches share: the example's config for a fixed
// number of batches, running `det-trial --local` on it and reading the
// training throughput it prints, and the median of repeated rounds.
// Header-only; needs DET_TRIAL_BIN and DET_FASHION_TRIAL defined by CMake.
#ifndef DET_BENCH_DET_TRIAL_RUNNER_H_
#define DET_BENCH_DET_TRIAL_RUNNER_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace det::bench {

// The whole file at `path` ("" when unreadable).
inline std::string ReadAll(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

// A new directory /tmp/NAME.XXXXXX for one run of a bench; exits the bench
// when it cannot be made.
inline std::string MakeTempDir(const std::string& name) {
  std::string path = "/tmp/" + name + ".XXXXXX";
  if (mkdtemp(path.data()) == nullptr) {
    std::perror(("cannot create " + path).c_str());
    std::exit(1);
  }
  return path;
}

// The median of `v` (the upper one for an even count). Requires v non-empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Writes dir/config.yaml: the Fashion-MNIST example (fixed hyperparameters,
// seed 42) trained for `batches` batches of `global_batch_size` images, with
// `workers` data-loader threads and 500 validation images, then `extra_yaml`
// (more top-level sections, e.g. "profiling:\n  enabled: true\n"). Returns
// its path.
inline std::string WriteFashionConfig(const std::string& dir, int64_t batches, int64_t global_batch_size,
                                      const std::string& workers, const std::string& extra_yaml = "") {
  std::string config = dir + "/config.yaml";
  std::ofstream(config) << "name: fashion-mnist-bench\n"
                           "hyperparameters:\n  global_batch_size: "
                        << global_batch_size
                        << "\n  learning_rate: 0.001\n"
                           "  n_filters1: 16\n  n_filters2: 32\n  hidden_size: 128\n  dropout: 0.25\n"
                           "searcher:\n  name: single\n  metric: accuracy\n  smaller_is_better: false\n"
                           "  max_length:\n    batches: "
                        << batches
                        << "\nscheduling_unit: 100\nreproducibility:\n  experiment_seed: 42\n"
                           "data:\n  validation_limit: 500\n  workers: "
                        << workers << "\n"
                        << extra_yaml;
  return config;
}

// `s` as one word for /bin/sh (single-quoted).
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `DET_TRIAL --local CONFIG TRIAL_SO EXTRA_ARGS --no-progress` in `dir`
// (output in dir/run, its metrics in dir/run/metrics.csv, log in
// dir/det-trial.out) and returns the training throughput it prints, in
// batches/s. Exits the bench with the log when det-trial fails.
inline double RunDetTrialBinary(const std::string& det_trial, const std::string& trial_so, const std::string& dir,
                                const std::string& config, const std::string& extra_args) {
  std::string out = dir + "/det-trial.out";
  std::filesystem::remove_all(dir + "/run");
  std::string cmd = ShellQuote(det_trial) + " --local " + ShellQuote(config) + " " + ShellQuote(trial_so) + " " +
                    extra_args + " --no-progress --output-dir " + ShellQuote(dir + "/run") + " > " + ShellQuote(out) +
                    " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text = ReadAll(out);
  std::smatch m;
  if (rc != 0 || !std::regex_search(text, m, std::regex(R"(training throughput: ([0-9.]+) batches/s)"))) {
    std::fprintf(stderr, "%s %s failed (rc %d):\n%s\n", det_trial.c_str(), extra_args.c_str(), rc, text.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

// RunDetTrialBinary with this build's det-trial and the example's trial.so.
inline double RunDetTrialBatchesPerSecond(const std::string& dir, const std::string& config,
                                          const std::string& extra_args) {
  return RunDetTrialBinary(DET_TRIAL_BIN, DET_FASHION_TRIAL, dir, config, extra_args);
}

}  // namespace det::bench

#endif  // DET_BENCH_DET_TRIAL_RUNNER_H_
