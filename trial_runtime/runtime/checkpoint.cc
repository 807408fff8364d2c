#include "trial_runtime/runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trial_runtime/sdk/module_load.h"

namespace det::runtime {
namespace fs = std::filesystem;
namespace {

absl::Status WriteFileSynced(const fs::path& path, const std::string& content) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

void SyncPath(const fs::path& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string NewUuid() {
  std::random_device rd;
  std::uniform_int_distribution<uint32_t> dist;
  uint32_t w[4] = {dist(rd), dist(rd), dist(rd), dist(rd)};
  w[1] = (w[1] & 0xffff0fffu) | 0x00004000u;  // version 4
  w[2] = (w[2] & 0x3fffffffu) | 0x80000000u;  // variant 1
  return absl::StrFormat("%08x-%04x-%04x-%04x-%04x%08x", w[0], w[1] >> 16, w[1] & 0xffff, w[2] >> 16,
                         w[2] & 0xffff, w[3]);
}

RngState CaptureRngState(TrialContext& context) {
  RngState s;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cpu = gen.get_state();
  }
  std::ostringstream engine;
  engine << context.random_engine();
  s.std_engine = engine.str();
  return s;
}

nlohmann::json RngStateToJson(const RngState& state) {
  torch::Tensor cpu = state.cpu.contiguous();
  const auto* data = cpu.data_ptr<uint8_t>();
  std::vector<uint8_t> bytes(data, data + cpu.numel());
  return {{"cpu", nlohmann::json::binary(std::move(bytes))}, {"std_engine", state.std_engine}};
}

absl::StatusOr<RngState> RngStateFromJson(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("cpu") || !json["cpu"].is_binary() || !json.contains("std_engine") ||
      !json["std_engine"].is_string()) {
    return absl::InvalidArgumentError("malformed random state");
  }
  const auto& bytes = json["cpu"].get_binary();
  RngState s;
  s.cpu = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(s.cpu.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  s.std_engine = json["std_engine"].get<std::string>();
  return s;
}

std::string CheckpointTempPrefix(int64_t trial_id) { return absl::StrCat(".tmp-t", trial_id, "-"); }

int RemoveStaleCheckpointTemps(const std::string& storage_dir, int64_t trial_id, int max_entries) {
  const std::string prefix = CheckpointTempPrefix(trial_id);
  std::error_code ec;
  fs::directory_iterator it(storage_dir, ec), end;
  std::vector<fs::path> stale;
  for (; !ec && it != end && static_cast<int>(stale.size()) < max_entries; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) stale.push_back(it->path());
  }
  int removed = 0;
  for (const fs::path& p : stale) {
    std::error_code e;
    // remove_all never follows a symlink: a link is removed itself.
    if (fs::remove_all(p, e) > 0 && !e) ++removed;
  }
  return removed;
}

absl::StatusOr<SavedCheckpoint> SaveCheckpoint(const std::string& storage_dir, TrialContext& context,
                                               const CallbackMap& callbacks, const nlohmann::json& metadata,
                                               const std::vector<RngState>& rank_rng_states) {
  SavedCheckpoint out;
  out.uuid = NewUuid();
  fs::path final_dir = fs::path(storage_dir) / out.uuid;
  fs::path tmp_dir = fs::path(storage_dir) / (CheckpointTempPrefix(context.get_trial_id()) + out.uuid);
  std::error_code ec;
  fs::create_directories(tmp_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", tmp_dir.string(), ": ", ec.message()));
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    return absl::InternalError(absl::StrCat("saving checkpoint ", out.uuid, ": ", what));
  };

  try {
    const auto& models = context.models();
    for (size_t i = 0; i < models.size(); ++i) {
      torch::serialize::OutputArchive archive;
      models[i]->save(archive);
      archive.save_to((tmp_dir / absl::StrCat("model_", i, ".pt")).string());
    }
    const auto& optimizers = context.optimizers();
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::serialize::OutputArchive archive;
      optimizers[i]->save(archive);
      archive.save_to((tmp_dir / absl::StrCat("optimizer_", i, ".pt")).string());
    }
    torch::serialize::OutputArchive rng;
    rng.write("cpu", at::detail::getDefaultCPUGenerator().get_state());
    // Other ranks' states under cpu_rank_<r> (rank 0's is "cpu").
    for (size_t r = 1; r < rank_rng_states.size(); ++r) {
      rng.write(absl::StrCat("cpu_rank_", r), rank_rng_states[r].cpu);
    }
    rng.save_to((tmp_dir / "rng.pt").string());
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  nlohmann::json meta = metadata;
  meta["format_version"] = kCheckpointFormatVersion;
  meta["uuid"] = out.uuid;
  meta["framework"] = absl::StrCat("libtorch-", TORCH_VERSION);
  meta["sdk_version"] = DET_SDK_VERSION;
  meta["created_at_unix_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  meta["num_models"] = context.models().size();
  meta["num_optimizers"] = context.optimizers().size();
  nlohmann::json scheds = nlohmann::json::array();
  for (const auto& s : context.lr_schedulers()) {
    scheds.push_back({{"step_count", GetSchedulerStepCount(*s.scheduler)}, {"mode", static_cast<int>(s.mode)}});
  }
  meta["lr_schedulers"] = scheds;
  std::ostringstream std_rng;
  std_rng << context.random_engine();
  meta["std_rng_state"] = std_rng.str();
  if (rank_rng_states.size() > 1) {
    nlohmann::json engines = nlohmann::json::array();
    for (const auto& st : rank_rng_states) engines.push_back(st.std_engine);
    meta["std_rng_states"] = engines;  // index = rank
  }
  if (const GradScaler* scaler = context.grad_scaler()) meta["grad_scaler"] = scaler->state_dict();
  if (context.mixed_precision()) meta["autocast_dtype"] = c10::toString(context.autocast_dtype());
  meta["world_size"] = context.distributed().size();
  meta["hparams"] = context.hparams();
  meta["trial_id"] = context.get_trial_id();
  meta["experiment_id"] = context.get_experiment_id();
  meta["trial_seed"] = context.get_trial_seed();

  nlohmann::json cb_state = nlohmann::json::object();
  try {
    for (const auto& [name, cb] : callbacks) {
      cb_state[name] = cb->state_dict();
      cb->on_checkpoint_save(tmp_dir.string());
    }
  } catch (const std::exception& e) {
    return fail(absl::StrCat("callback: ", e.what()));
  }
  absl::Status st = WriteFileSynced(tmp_dir / "callbacks.json", cb_state.dump(2));
  if (!st.ok()) return fail(std::string(st.message()));

  for (const auto& entry : fs::directory_iterator(tmp_dir)) {
    if (entry.is_regular_file()) {
      out.resources[entry.path().filename().string()] = static_cast<int64_t>(entry.file_size());
      if (entry.path().filename() != "callbacks.json") SyncPath(entry.path());
    }
  }
  meta["resources"] = out.resources;
  // metadata.json is written last: a directory without it is incomplete.
  st = WriteFileSynced(tmp_dir / "metadata.json", meta.dump(2));
  if (!st.ok()) return fail(std::string(st.message()));
  SyncPath(tmp_dir);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return fail(absl::StrCat("rename to ", final_dir.string(), ": ", ec.message()));
  SyncPath(storage_dir);
  out.path = final_dir.string();
  return out;
}

absl::StatusOr<nlohmann::json> ReadCheckpointMetadata(const std::string& dir) {
  fs::path meta_path = fs::path(dir) / "metadata.json";
  std::error_code ec;
  if (!fs::exists(meta_path, ec)) {
    // e.g. another user's checkpoint (issue 46: trials of different users
    // run as different uids): an error naming it, never an exception.
    if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot read checkpoint '", dir, "': ", ec.message()));
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a checkpoint: it has no metadata.json"));
  }
  nlohmann::json meta = nlohmann::json::parse(ReadFile(meta_path), nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path.string(), " is not valid JSON"));
  }
  if (meta.value("format_version", 0) != kCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path.string(), ": unsupported checkpoint format_version ",
                                                   meta.value("format_version", 0)));
  }
  return meta;
}

void LoadModelFiles(const std::string& dir, TrialContext& context) {
  const auto& models = context.models();
  for (size_t i = 0; i < models.size(); ++i) {
    torch::serialize::InputArchive archive;
    const std::string file = (fs::path(dir) / absl::StrCat("model_", i, ".pt")).string();
    archive.load_from(file, context.device());
    internal::LoadModuleExactly(archive, *models[i], file);
  }
}

absl::StatusOr<nlohmann::json> LoadCheckpoint(const std::string& dir, TrialContext& context,
                                              const CallbackMap& callbacks) {
  auto meta_or = ReadCheckpointMetadata(dir);
  if (!meta_or.ok()) return meta_or.status();
  nlohmann::json meta = *std::move(meta_or);
  const auto& models = context.models();
  const auto& optimizers = context.optimizers();
  const auto& scheds = context.lr_schedulers();
  if (meta.value("num_models", size_t{0}) != models.size() ||
      meta.value("num_optimizers", size_t{0}) != optimizers.size() ||
      meta["lr_schedulers"].size() != scheds.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", dir, "' holds ", meta.value("num_models", 0), " models, ", meta.value("num_optimizers", 0),
        " optimizers and ", meta["lr_schedulers"].size(), " LR schedulers; the trial wrapped ", models.size(), ", ",
        optimizers.size(), " and ", scheds.size()));
  }
  fs::path d(dir);
  try {
    LoadModelFiles(dir, context);
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::serialize::InputArchive archive;
      archive.load_from((d / absl::StrCat("optimizer_", i, ".pt")).string(), context.device());
      optimizers[i]->load(archive);
      // LibTorch 1.13's Optimizer::load restores per-parameter state but not
      // the param groups' options (lr after a scheduler's steps): apply them.
      torch::serialize::InputArchive groups;
      archive.read("param_groups", groups);
      auto& param_groups = optimizers[i]->param_groups();
      for (size_t g = 0; g < param_groups.size(); ++g) {
        torch::serialize::InputArchive group, options;
        groups.read("param_groups/" + std::to_string(g), group);
        group.read("options", options);
        param_groups[g].options().serialize(options);
      }
    }
    for (size_t i = 0; i < scheds.size(); ++i) {
      SetSchedulerStepCount(*scheds[i].scheduler, meta["lr_schedulers"][i]["step_count"].get<unsigned>());
    }
    torch::serialize::InputArchive rng;
    rng.load_from((d / "rng.pt").string());
    torch::Tensor cpu_state;
    const int rank = context.distributed().rank();
    if (rank == 0 || !rng.try_read(absl::StrCat("cpu_rank_", rank), cpu_state)) rng.read("cpu", cpu_state);
    at::Generator cpu_gen = at::detail::getDefaultCPUGenerator();  // shares the default generator
    std::lock_guard<std::mutex> lock(cpu_gen.mutex());
    cpu_gen.set_state(cpu_state);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading checkpoint '", dir, "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading checkpoint '", dir, "': ", e.what()));
  }
  std::string engine_state = meta.value("std_rng_state", std::string());
  const size_t rank = static_cast<size_t>(context.distributed().rank());
  if (meta.contains("std_rng_states") && meta["std_rng_states"].is_array() && rank < meta["std_rng_states"].size() &&
      meta["std_rng_states"][rank].is_string()) {
    engine_state = meta["std_rng_states"][rank].get<std::string>();
  }
  std::istringstream std_rng(engine_state);
  std_rng >> context.random_engine();
  if (GradScaler* scaler = context.grad_scaler(); scaler != nullptr && meta.contains("grad_scaler")) {
    try {
      scaler->load_state_dict(meta["grad_scaler"]);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", dir, "': metadata.json field grad_scaler: ", e.what()));
    }
  }

  nlohmann::json cb_state = nlohmann::json::parse(ReadFile(d / "callbacks.json"), nullptr, false);
  if (cb_state.is_discarded()) cb_state = nlohmann::json::object();
  try {
    for (const auto& [name, cb] : callbacks) {
      if (cb_state.contains(name)) cb->load_state_dict(cb_state[name]);
      cb->on_checkpoint_load(dir);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading checkpoint '", dir, "': callback: ", e.what()));
  }
  return meta;
}

}  // namespace det::runtime
