#include "common/hparams.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config_reader.h"
#include "common/status_macros.h"

namespace det {
namespace {

using json = nlohmann::json;

// Integers beyond 2^53 do not survive a round trip through double.
constexpr int64_t kMaxIntHParam = int64_t{1} << 53;

const std::vector<std::string_view>& SpecTypes() {
  static const auto* types = new std::vector<std::string_view>{"const", "int", "double", "log", "categorical"};
  return *types;
}

// Keys that only make sense in a spec: a map with one of these and an
// unknown `type` is a misspelt spec rather than nested hparams.
bool HasSpecKey(const json& v) {
  for (const char* k : {"val", "vals", "minval", "maxval", "count", "base"}) {
    if (v.contains(k)) return true;
  }
  return false;
}

absl::StatusOr<Hyperparameter> ParseHyperparameter(const ConfigSource& source, const json& v,
                                                   const std::string& path);

absl::StatusOr<HyperparameterSpace> ParseSpace(const ConfigSource& source, const json& v, const std::string& path) {
  HyperparameterSpace space;
  for (auto it = v.begin(); it != v.end(); ++it) {
    DET_ASSIGN_OR_RETURN(space[it.key()], ParseHyperparameter(source, it.value(), JoinPath(path, it.key())));
  }
  return space;
}

absl::Status ParseCount(const ConfigMapReader& r, Hyperparameter* h) {
  return r.GetInt("count", &h->count, 1, std::numeric_limits<int64_t>::max());
}

absl::Status CheckOrder(const ConfigMapReader& r, const Hyperparameter& h) {
  if (h.minval > h.maxval) {
    auto text = [&](double v) {
      return h.type == Hyperparameter::Type::kInt ? json(static_cast<int64_t>(v)).dump() : json(v).dump();
    };
    return r.Error("minval", absl::StrCat("field '", r.PathOf("minval"), "' must be <= maxval, got ",
                                          text(h.minval), " > ", text(h.maxval)));
  }
  return absl::OkStatus();
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.5g", v);
  return buf;
}

// type: log bounds are exponents (base^minval..base^maxval). Bounds that look
// like the values themselves -- both in (0, 1] (minval: 0.0001, maxval: 0.1
// samples 1.0002..1.2589), or base^maxval above 1e10 (maxval > 10 in base
// 10) -- are refused, naming the range they would sample and the exponents
// that were probably meant.
absl::Status CheckLogExponents(const ConfigMapReader& r, const Hyperparameter& h) {
  bool unit = h.minval > 0 && h.minval <= 1 && h.maxval > 0 && h.maxval <= 1;
  bool huge = h.maxval * std::log10(h.base) > 10;
  if (!unit && !huge) return absl::OkStatus();
  std::string key = unit ? "minval" : "maxval";
  std::string b = Num(h.base);
  std::string msg = absl::StrCat(
      "field '", r.PathOf(key), "': type: log bounds are exponents of base ", b, ", and minval: ", Num(h.minval),
      ", maxval: ", Num(h.maxval), " would sample ", b, "^", Num(h.minval), "..", b, "^", Num(h.maxval), " = ",
      Num(std::pow(h.base, h.minval)), "..", Num(std::pow(h.base, h.maxval)), "; give exponents");
  double lb = std::log(h.base);
  if (h.minval > 0) {
    absl::StrAppend(&msg, ": minval: ", Num(std::log(h.minval) / lb), ", maxval: ", Num(std::log(h.maxval) / lb),
                    " for ", Num(h.minval), "..", Num(h.maxval));
  } else if (h.maxval > 0) {
    absl::StrAppend(&msg, " (maxval: ", Num(std::log(h.maxval) / lb), " for ", Num(h.maxval), ")");
  }
  return r.Error(key, msg);
}

absl::StatusOr<double> RequiredFiniteDouble(const ConfigMapReader& r, std::string_view key) {
  const json* v = r.Find(key);
  if (v == nullptr) return r.Missing(key);
  DET_ASSIGN_OR_RETURN(double d, ConfigMapReader::CheckDouble(r.source(), *v, r.PathOf(key)));
  if (!std::isfinite(d)) return r.TypeError(key, "a finite number");
  return d;
}

absl::StatusOr<Hyperparameter> ParseSpec(const ConfigMapReader& r, std::string_view type) {
  Hyperparameter h;
  if (type == "const") {
    h.type = Hyperparameter::Type::kConst;
    DET_RETURN_IF_ERROR(r.CheckKeys({"type", "val"}));
    if (!r.json().contains("val")) return r.Missing("val");
    h.val = r.json()["val"];
  } else if (type == "int") {
    h.type = Hyperparameter::Type::kInt;
    DET_RETURN_IF_ERROR(r.CheckKeys({"type", "minval", "maxval", "count"}));
    for (const char* key : {"minval", "maxval"}) {
      const json* v = r.Find(key);
      if (v == nullptr) return r.Missing(key);
      if (v->is_number_float()) {
        return r.Error(key, absl::StrCat("field '", r.PathOf(key), "' must be an integer, got '", v->dump(),
                                         "': type: int draws integers; write an integer bound, or use "
                                         "type: double for real values"));
      }
      DET_ASSIGN_OR_RETURN(int64_t n,
                           ConfigMapReader::CheckInt(r.source(), *v, r.PathOf(key), -kMaxIntHParam, kMaxIntHParam));
      (std::string_view(key) == "minval" ? h.minval : h.maxval) = static_cast<double>(n);
    }
    DET_RETURN_IF_ERROR(CheckOrder(r, h));
    DET_RETURN_IF_ERROR(ParseCount(r, &h));
  } else if (type == "double" || type == "log") {
    bool log = type == "log";
    h.type = log ? Hyperparameter::Type::kLog : Hyperparameter::Type::kDouble;
    if (log) {
      DET_RETURN_IF_ERROR(r.CheckKeys({"type", "minval", "maxval", "base", "count"}));
    } else {
      DET_RETURN_IF_ERROR(r.CheckKeys({"type", "minval", "maxval", "count"}));
    }
    DET_ASSIGN_OR_RETURN(h.minval, RequiredFiniteDouble(r, "minval"));
    DET_ASSIGN_OR_RETURN(h.maxval, RequiredFiniteDouble(r, "maxval"));
    DET_RETURN_IF_ERROR(CheckOrder(r, h));
    if (log) {
      DET_RETURN_IF_ERROR(r.GetDouble("base", &h.base));
      if (!(h.base > 0) || h.base == 1 || !std::isfinite(h.base)) {
        return r.TypeError("base", "a positive number other than 1");
      }
      DET_RETURN_IF_ERROR(CheckLogExponents(r, h));
    }
    DET_RETURN_IF_ERROR(ParseCount(r, &h));
  } else {  // categorical
    h.type = Hyperparameter::Type::kCategorical;
    DET_RETURN_IF_ERROR(r.CheckKeys({"type", "vals"}));
    const json* vals = r.Find("vals");
    if (vals == nullptr) return r.Missing("vals");
    if (!vals->is_array() || vals->empty()) return r.TypeError("vals", "a non-empty list");
    h.vals.assign(vals->begin(), vals->end());
  }
  return h;
}

absl::StatusOr<Hyperparameter> ParseHyperparameter(const ConfigSource& source, const json& v,
                                                   const std::string& path) {
  if (!v.is_object()) return Hyperparameter::Const(v);
  auto type_it = v.find("type");
  if (type_it != v.end() && type_it->is_string()) {
    const std::string& type = type_it->get_ref<const std::string&>();
    if (std::find(SpecTypes().begin(), SpecTypes().end(), type) != SpecTypes().end()) {
      DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, v, path));
      return ParseSpec(r, type);
    }
  }
  if (type_it != v.end() && HasSpecKey(v)) {
    std::string type_path = JoinPath(path, "type");
    return source.Error(type_path, absl::StrCat("field '", type_path,
                                                "' must be one of const, int, double, log, categorical, got ",
                                                DescribeValue(*type_it)));
  }
  // A map without a spec type: nested hyperparameters.
  DET_ASSIGN_OR_RETURN(HyperparameterSpace nested, ParseSpace(source, v, path));
  return Hyperparameter::Object(std::move(nested));
}

// Uniform over [0, n), n > 0, by rejection (no modulo bias).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  uint64_t offset = span == std::numeric_limits<uint64_t>::max() ? rng() : UniformBelow(rng, span + 1);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
}

// Uniform over [lo, hi) (lo when lo == hi), 53 random bits.
double UniformDouble(std::mt19937_64& rng, double lo, double hi) {
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return lo + u * (hi - lo);
}

json SampleOne(const Hyperparameter& h, std::mt19937_64& rng) {
  switch (h.type) {
    case Hyperparameter::Type::kConst:
      return h.val;
    case Hyperparameter::Type::kInt:
      return UniformInt(rng, static_cast<int64_t>(h.minval), static_cast<int64_t>(h.maxval));
    case Hyperparameter::Type::kDouble:
      return UniformDouble(rng, h.minval, h.maxval);
    case Hyperparameter::Type::kLog:
      return std::pow(h.base, UniformDouble(rng, h.minval, h.maxval));
    case Hyperparameter::Type::kCategorical:
      return h.vals[UniformBelow(rng, h.vals.size())];
    case Hyperparameter::Type::kObject:
      return SampleHParams(h.nested, rng);
  }
  return nullptr;
}

std::vector<double> Linspace(double lo, double hi, int64_t count) {
  std::vector<double> out;
  if (count == 1) {
    out.push_back((lo + hi) / 2.0);
    return out;
  }
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(i == count - 1 ? hi : lo + static_cast<double>(i) * (hi - lo) / static_cast<double>(count - 1));
  }
  return out;
}

struct GridAxisOf {
  std::vector<std::string> route;
  std::vector<json> values;
};

// Appends the axes of `space` to `axes`, keeping *size (the product of
// their lengths so far) within kMaxGridPoints: an axis is checked against
// its count before its points exist, and the product after each axis, so
// no more than about kMaxGridPoints points per axis are ever built (an axis
// of length >= 2 doubles the product, so few axes can be long).
absl::Status CollectAxes(const HyperparameterSpace& space, const ConfigSource& source, const std::string& path,
                         const std::string& grid_path, std::vector<std::string>* route,
                         std::vector<GridAxisOf>* axes, uint64_t* size) {
  for (const auto& [name, h] : space) {
    route->push_back(name);
    std::string child = JoinPath(path, name);
    if (h.type == Hyperparameter::Type::kObject) {
      if (h.nested.empty()) {
        axes->push_back({*route, {json::object()}});
      } else {
        DET_RETURN_IF_ERROR(CollectAxes(h.nested, source, child, grid_path, route, axes, size));
      }
    } else {
      if ((h.type == Hyperparameter::Type::kInt || h.type == Hyperparameter::Type::kDouble ||
           h.type == Hyperparameter::Type::kLog)) {
        std::string count_path = JoinPath(child, "count");
        if (!h.count.has_value()) {
          return source.Error(child, absl::StrCat("grid search requires field '", count_path, "' for ",
                                                  std::string(HyperparameterTypeName(h.type)), " hyperparameter '", child, "'"));
        }
        if (static_cast<uint64_t>(*h.count) > kMaxGridPoints) {
          return source.Error(child, absl::StrCat("field '", count_path, "' must be <= ", kMaxGridPoints,
                                                  " for grid search, got ", *h.count));
        }
      }
      DET_ASSIGN_OR_RETURN(std::vector<json> values, GridAxis(h, child));
      // Both factors are <= kMaxGridPoints (the product so far and one axis,
      // whose length is bounded by its count or the config's size): no overflow.
      *size *= values.size();
      if (*size > kMaxGridPoints) {
        return source.Error("", absl::StrCat("the grid of '", grid_path, "' has more than ", kMaxGridPoints,
                                             " points (the limit); lower some counts"));
      }
      axes->push_back({*route, std::move(values)});
    }
    route->pop_back();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GridAxisOf>> Axes(const HyperparameterSpace& space, const ConfigSource& source,
                                             std::string_view path, uint64_t* size) {
  std::vector<GridAxisOf> axes;
  std::vector<std::string> route;
  *size = 1;
  DET_RETURN_IF_ERROR(CollectAxes(space, source, std::string(path), std::string(path), &route, &axes, size));
  return axes;
}

ConfigSource DefaultSource() {
  ConfigSource s;
  s.name = "hyperparameters";
  return s;
}

absl::StatusOr<std::vector<json>> GridPoints(const HyperparameterSpace& space, std::string_view path) {
  uint64_t size = 0;
  DET_ASSIGN_OR_RETURN(std::vector<GridAxisOf> axes, Axes(space, DefaultSource(), path, &size));
  std::vector<json> points;
  points.reserve(size);
  std::vector<size_t> index(axes.size(), 0);
  for (uint64_t p = 0; p < size; ++p) {
    json point = json::object();
    for (size_t a = 0; a < axes.size(); ++a) {
      json* cur = &point;
      const auto& route = axes[a].route;
      for (size_t k = 0; k + 1 < route.size(); ++k) cur = &(*cur)[route[k]];
      (*cur)[route.back()] = axes[a].values[index[a]];
    }
    points.push_back(std::move(point));
    // Odometer: the last axis varies fastest.
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return points;
}

}  // namespace

Hyperparameter Hyperparameter::Const(nlohmann::json value) {
  Hyperparameter h;
  h.type = Type::kConst;
  h.val = std::move(value);
  return h;
}

Hyperparameter Hyperparameter::Int(int64_t minval, int64_t maxval, std::optional<int64_t> count) {
  Hyperparameter h;
  h.type = Type::kInt;
  h.minval = static_cast<double>(minval);
  h.maxval = static_cast<double>(maxval);
  h.count = count;
  return h;
}

Hyperparameter Hyperparameter::Double(double minval, double maxval, std::optional<int64_t> count) {
  Hyperparameter h;
  h.type = Type::kDouble;
  h.minval = minval;
  h.maxval = maxval;
  h.count = count;
  return h;
}

Hyperparameter Hyperparameter::Log(double minval, double maxval, double base, std::optional<int64_t> count) {
  Hyperparameter h;
  h.type = Type::kLog;
  h.minval = minval;
  h.maxval = maxval;
  h.base = base;
  h.count = count;
  return h;
}

Hyperparameter Hyperparameter::Categorical(std::vector<nlohmann::json> vals) {
  Hyperparameter h;
  h.type = Type::kCategorical;
  h.vals = std::move(vals);
  return h;
}

Hyperparameter Hyperparameter::Object(std::map<std::string, Hyperparameter> nested) {
  Hyperparameter h;
  h.type = Type::kObject;
  h.nested = std::move(nested);
  return h;
}

bool IsSearched(const Hyperparameter& hp) {
  if (hp.type == Hyperparameter::Type::kConst) return false;
  if (hp.type != Hyperparameter::Type::kObject) return true;
  for (const auto& [name, inner] : hp.nested) {
    if (IsSearched(inner)) return true;
  }
  return false;
}

std::string_view HyperparameterTypeName(Hyperparameter::Type type) {
  switch (type) {
    case Hyperparameter::Type::kConst:
      return "const";
    case Hyperparameter::Type::kInt:
      return "int";
    case Hyperparameter::Type::kDouble:
      return "double";
    case Hyperparameter::Type::kLog:
      return "log";
    case Hyperparameter::Type::kCategorical:
      return "categorical";
    case Hyperparameter::Type::kObject:
      return "object";
  }
  return "const";
}

absl::StatusOr<HyperparameterSpace> HyperparameterSpaceFromJson(const nlohmann::json& spec,
                                                                const ConfigSource* source, std::string_view path) {
  ConfigSource fallback;
  if (source == nullptr) {
    fallback = DefaultSource();
    source = &fallback;
  }
  if (spec.is_null()) return HyperparameterSpace();
  DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(*source, spec, std::string(path)));
  return ParseSpace(*source, r.json(), std::string(path));
}

nlohmann::json HyperparameterToJson(const Hyperparameter& h) {
  json out;
  switch (h.type) {
    case Hyperparameter::Type::kConst:
      return json{{"type", "const"}, {"val", h.val}};
    case Hyperparameter::Type::kInt:
      out = json{{"type", "int"},
                 {"minval", static_cast<int64_t>(h.minval)},
                 {"maxval", static_cast<int64_t>(h.maxval)}};
      break;
    case Hyperparameter::Type::kDouble:
      out = json{{"type", "double"}, {"minval", h.minval}, {"maxval", h.maxval}};
      break;
    case Hyperparameter::Type::kLog:
      out = json{{"type", "log"}, {"minval", h.minval}, {"maxval", h.maxval}, {"base", h.base}};
      break;
    case Hyperparameter::Type::kCategorical:
      return json{{"type", "categorical"}, {"vals", h.vals}};
    case Hyperparameter::Type::kObject:
      return HParamsToJson(h.nested);
  }
  if (h.count.has_value()) out["count"] = *h.count;
  return out;
}

nlohmann::json HParamsToJson(const HyperparameterSpace& space) {
  json out = json::object();
  for (const auto& [name, h] : space) out[name] = HyperparameterToJson(h);
  return out;
}

nlohmann::json SampleHParams(const HyperparameterSpace& space, std::mt19937_64& rng) {
  json out = json::object();
  for (const auto& [name, h] : space) out[name] = SampleOne(h, rng);
  return out;
}

nlohmann::json FirstHParams(const HyperparameterSpace& space, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return SampleHParams(space, rng);
}

absl::StatusOr<std::vector<nlohmann::json>> GridAxis(const Hyperparameter& h, std::string_view path) {
  std::vector<json> out;
  bool numeric = h.type == Hyperparameter::Type::kInt || h.type == Hyperparameter::Type::kDouble ||
                 h.type == Hyperparameter::Type::kLog;
  if (numeric && !h.count.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid search requires field '", JoinPath(path, "count"), "'"));
  }
  switch (h.type) {
    case Hyperparameter::Type::kConst:
      out.push_back(h.val);
      break;
    case Hyperparameter::Type::kCategorical:
      out = h.vals;
      break;
    case Hyperparameter::Type::kInt: {
      int64_t lo = static_cast<int64_t>(h.minval), hi = static_cast<int64_t>(h.maxval);
      int64_t count = std::min<int64_t>(*h.count, hi - lo + 1);
      if (count == 1) {
        out.push_back(static_cast<int64_t>(std::llround(static_cast<double>(lo + hi) / 2.0)));
        break;
      }
      for (int64_t i = 0; i < count; ++i) {
        int64_t v = static_cast<int64_t>(
            std::llround(static_cast<double>(lo) +
                         static_cast<double>(i) * static_cast<double>(hi - lo) / static_cast<double>(count - 1)));
        if (out.empty() || out.back().get<int64_t>() != v) out.push_back(v);
      }
      break;
    }
    case Hyperparameter::Type::kDouble:
      for (double x : Linspace(h.minval, h.maxval, *h.count)) out.push_back(x);
      break;
    case Hyperparameter::Type::kLog:
      for (double x : Linspace(h.minval, h.maxval, *h.count)) out.push_back(std::pow(h.base, x));
      break;
    case Hyperparameter::Type::kObject: {
      DET_ASSIGN_OR_RETURN(out, GridPoints(h.nested, path));
      break;
    }
  }
  return out;
}

absl::StatusOr<uint64_t> ValidateGridSpace(const HyperparameterSpace& space, const ConfigSource* source,
                                           std::string_view path) {
  ConfigSource fallback = DefaultSource();
  uint64_t size = 0;
  DET_ASSIGN_OR_RETURN(std::vector<GridAxisOf> axes, Axes(space, source ? *source : fallback, path, &size));
  (void)axes;
  return size;
}

absl::StatusOr<std::vector<nlohmann::json>> GridHParams(const HyperparameterSpace& space) {
  return GridPoints(space, "hyperparameters");
}

absl::StatusOr<int64_t> GlobalBatchSize(const nlohmann::json& hparams) {
  if (!hparams.is_object() || !hparams.contains("global_batch_size")) {
    return absl::InvalidArgumentError("hyperparameters lack global_batch_size");
  }
  const json& v = hparams["global_batch_size"];
  if ((v.is_number_integer() || v.is_number_unsigned()) && !v.is_number_float() && v.get<int64_t>() > 0) {
    return v.get<int64_t>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("hyperparameters.global_batch_size must be a positive integer, got ", v.dump()));
}

bool operator==(const Hyperparameter& a, const Hyperparameter& b) {
  return a.type == b.type && a.val == b.val && a.minval == b.minval && a.maxval == b.maxval && a.count == b.count &&
         a.base == b.base && a.vals == b.vals && a.nested == b.nested;
}

}  // namespace det
