#include "det/inference.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <torch/serialize.h>

#include "module_load.h"

namespace det {

nlohmann::json load_checkpoint_metadata(const std::string& dir) {
  if (dir.rfind("s3://", 0) == 0) {
    throw std::runtime_error("'" + dir.substr(0, 512) +
                             "' is an S3 checkpoint URL; the SDK loads a local directory: download it first with "
                             "`det-cli checkpoint download UUID --output DIR` and pass DIR");
  }
  const std::string path = dir + "/metadata.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + dir + "' is not a checkpoint: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json meta = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) throw std::runtime_error(path + " is not a JSON object");
  const int version = meta.value("format_version", 0);
  if (version != kCheckpointFormatVersionRead) {
    throw std::runtime_error(path + ": checkpoint format_version " + std::to_string(version) + "; this SDK reads " +
                             std::to_string(kCheckpointFormatVersionRead));
  }
  return meta;
}

void load_model_from_checkpoint(const std::string& dir, torch::nn::Module& module, size_t index,
                                const torch::Device& device) {
  const nlohmann::json meta = load_checkpoint_metadata(dir);
  const size_t models = meta.value("num_models", size_t{0});
  if (index >= models) {
    throw std::runtime_error("checkpoint '" + dir + "' holds " + std::to_string(models) + " model(s); no model " +
                             std::to_string(index));
  }
  const std::string path = dir + "/model_" + std::to_string(index) + ".pt";
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    internal::LoadModuleExactly(archive, module, path);
    module.to(device);
  } catch (const c10::Error& e) {
    throw std::runtime_error("loading " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace det
