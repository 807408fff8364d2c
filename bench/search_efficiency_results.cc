#include "bench/search_efficiency_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"

namespace det::bench {

void Outcome::AddValidation(int64_t batches, double score) {
  if (!std::isfinite(score)) return;
  if (!points.empty() && score <= points.back().score) return;
  points.push_back({batches, score});
  best = score;
}

int64_t Outcome::BatchesToReach(double target) const {
  for (const auto& p : points) {
    if (p.score >= target) return p.batches;
  }
  return -1;
}

namespace {

nlohmann::json ToJson(const std::string& key, int64_t seed, const std::string& searcher, const Outcome& o) {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : o.points) points.push_back({p.batches, p.score});
  return {{"key", key},           {"seed", seed},         {"searcher", searcher},
          {"best", o.best},       {"total_batches", o.total_batches},
          {"seconds", o.seconds}, {"stopped_early", o.stopped_early}, {"points", points}};
}

Outcome FromJson(const nlohmann::json& j) {
  Outcome o;
  o.total_batches = j.at("total_batches").get<int64_t>();
  o.seconds = j.at("seconds").get<double>();
  o.stopped_early = j.at("stopped_early").get<bool>();
  for (const auto& p : j.at("points")) o.AddValidation(p.at(0).get<int64_t>(), p.at(1).get<double>());
  if (o.points.empty()) o.best = j.at("best").get<double>();
  return o;
}

}  // namespace

ResultsFile::ResultsFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::ifstream in(path_);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      outcomes_[{j.at("key").get<std::string>(), j.at("seed").get<int64_t>(), j.at("searcher").get<std::string>()}] =
          FromJson(j);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s:%d: skipped, not a result line (%s)\n", path_.c_str(), n, e.what());
    }
  }
}

std::optional<Outcome> ResultsFile::Find(const std::string& key, int64_t seed, const std::string& searcher) const {
  auto it = outcomes_.find({key, seed, searcher});
  if (it == outcomes_.end()) return std::nullopt;
  return it->second;
}

void ResultsFile::Add(const std::string& key, int64_t seed, const std::string& searcher, const Outcome& outcome) {
  outcomes_[{key, seed, searcher}] = outcome;
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << ToJson(key, seed, searcher, outcome).dump() << "\n";
  out.flush();
  if (!out) std::fprintf(stderr, "could not append to %s\n", path_.c_str());
}

void PrintSpreadLine(const std::string& name, int64_t searched, int64_t random, std::vector<double> ratios,
                     int nevers, int missing, bool mark_lower_bound) {
  if (ratios.empty()) {
    std::printf("  %-16s not measured\n", name.c_str());
    return;
  }
  std::vector<double>& v = ratios;
  std::sort(v.begin(), v.end());
  double mean = 0, sq = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / static_cast<double>(std::max<size_t>(1, v.size() - 1)));
  std::printf("  %-16s %s%.3f  (per seed: min %.3f median %.3f max %.3f sd %.3f; never on %d of %zu seeds%s)\n",
              name.c_str(), mark_lower_bound && nevers > 0 ? ">=" : "",
              static_cast<double>(searched) / static_cast<double>(std::max<int64_t>(1, random)), v.front(),
              v[v.size() / 2], v.back(), sd, nevers, v.size(),
              missing > 0 ? absl::StrFormat("; %d not measured", missing).c_str() : "");
}

namespace {

// Each search's final best next to random search's, per seed.
void PrintFinalBests(const std::string& metric, bool smaller_is_better, const std::vector<int64_t>& seeds,
                     const std::vector<std::optional<Outcome>>& random,
                     const std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>>& searches) {
  auto raw = [&](double score) { return smaller_is_better ? -score : score; };
  for (const auto& [name, outcomes] : searches) {
    std::printf("%s: final best %s per seed (random's best):", name.c_str(), metric.c_str());
    int beat = 0, n = 0;
    for (size_t s = 0; s < seeds.size(); ++s) {
      if (!random[s] || !outcomes[s]) continue;
      ++n;
      beat += outcomes[s]->best > random[s]->best ? 1 : 0;
      std::printf(" %lld:%.4f(%.4f)", static_cast<long long>(seeds[s]), raw(outcomes[s]->best), raw(random[s]->best));
    }
    std::printf("\n  %s beat random search's best on %d of %d seeds\n", name.c_str(), beat, n);
  }
}

}  // namespace

WallPerBatch MedianWallPerBatch(const std::vector<std::optional<Outcome>>& outcomes) {
  WallPerBatch w;
  std::vector<double> ms;
  for (const auto& o : outcomes) {
    if (!o || o->total_batches <= 0) continue;
    ms.push_back(o->seconds * 1000.0 / static_cast<double>(o->total_batches));
    w.stopped_early += o->stopped_early ? 1 : 0;
  }
  w.seeds = static_cast<int>(ms.size());
  if (ms.empty()) return w;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  w.median_ms = n % 2 == 1 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return w;
}

void PrintWallPerBatch(const std::vector<std::optional<Outcome>>& random,
                       const std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>>& searches) {
  const WallPerBatch r = MedianWallPerBatch(random);
  std::printf("\nwall time per batch trained (seconds / total batches), median over the seeds measured:\n");
  std::printf("  random: %.2f ms (%d seeds)\n", r.median_ms, r.seeds);
  for (const auto& [name, outcomes] : searches) {
    const WallPerBatch w = MedianWallPerBatch(outcomes);
    std::printf("  %s: %.2f ms (%d seeds, %d stopped at random's best), ratio to random %.3f (goal <= 1.0 for "
                "ASHA on 2 slots, issue 50)%s\n",
                name.c_str(), w.median_ms, w.seeds, w.stopped_early, r.median_ms > 0 ? w.median_ms / r.median_ms : 0,
                w.seeds < 4 || r.seeds < 4 ? " [fewer than 4 seeds: not the goal's figure]" : "");
  }
}

void PrintSummary(const std::string& metric, bool smaller_is_better, double tolerance, bool full,
                  const std::vector<int64_t>& seeds, const std::vector<std::optional<Outcome>>& random,
                  const std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>>& searches) {
  auto raw = [&](double score) { return smaller_is_better ? -score : score; };
  for (double tol : {0.0, tolerance}) {
    std::printf("\n%s: batches to reach random's best%s, ratio to random's (never>x: never reached; x counts its "
                "whole budget)\nseed  random_best  random_batches",
                metric.c_str(), tol > 0 ? absl::StrFormat(" %s %g", smaller_is_better ? "+" : "-", tol).c_str() : "");
    for (const auto& [name, _] : searches) std::printf("  %s", name.c_str());
    std::printf("\n");
    struct Sum {
      int64_t random = 0, search = 0;
      int nevers = 0, missing = 0;
      std::vector<double> ratios;
    };
    std::vector<Sum> sums(searches.size());
    for (size_t s = 0; s < seeds.size(); ++s) {
      if (!random[s]) {
        std::printf("%4lld  (random search not measured)\n", static_cast<long long>(seeds[s]));
        for (auto& sum : sums) ++sum.missing;
        continue;
      }
      const double target = random[s]->best - tol;
      const int64_t r = random[s]->BatchesToReach(target);
      std::printf("%4lld  %11.4f  %14lld", static_cast<long long>(seeds[s]), raw(random[s]->best),
                  static_cast<long long>(r));
      for (size_t k = 0; k < searches.size(); ++k) {
        const auto& o = searches[k].second[s];
        Sum& sum = sums[k];
        if (!o) {
          ++sum.missing;
          std::printf("  -");
          continue;
        }
        const int64_t a = o->BatchesToReach(target);
        const double ratio = static_cast<double>(a < 0 ? o->total_batches : a) / std::max<int64_t>(1, r);
        sum.random += r;
        sum.search += a < 0 ? o->total_batches : a;
        sum.ratios.push_back(ratio);
        if (a < 0) ++sum.nevers;
        std::printf("  %s%.3f", a < 0 ? "never>" : "", ratio);
      }
      std::printf("\n");
    }
    std::printf("summed-batches ratio (sum of batches to reach / random's sum), per-seed spread:\n");
    for (size_t k = 0; k < searches.size(); ++k) {
      const Sum& sum = sums[k];
      PrintSpreadLine(searches[k].first, sum.search, sum.random, sum.ratios, sum.nevers, sum.missing, true);
    }
  }
  if (full) {
    std::printf("\nrun to their end (--full):\n");
    PrintFinalBests(metric, smaller_is_better, seeds, random, searches);
  }
  PrintWallPerBatch(random, searches);
}

}  // namespace det::bench
