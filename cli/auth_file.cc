#include "cli/auth_file.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace det::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json Load() {
  std::string path = AuthFilePath();
  if (path.empty()) return nlohmann::json::object();
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return nlohmann::json::object();
  if (!j.contains("masters") || !j["masters"].is_object()) j["masters"] = nlohmann::json::object();
  return j;
}

bool Save(const nlohmann::json& j) {
  std::string path = AuthFilePath();
  if (path.empty()) return false;
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return false;
    ::chmod(dir.c_str(), 0700);
  }
  // Write a private temp file, then rename over the old one.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    ::chmod(tmp.c_str(), 0600);
    out << j.dump(2) << "\n";
    if (!out) return false;
  }
  fs::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

std::string AuthFilePath() {
  if (const char* f = std::getenv("DET_AUTH_FILE"); f != nullptr && *f != '\0') return f;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.det/auth.json";
  }
  return "";
}

std::optional<StoredToken> LoadToken(const std::string& master) {
  nlohmann::json j = Load();
  if (!j.contains("masters") || !j["masters"].contains(master)) return std::nullopt;
  const auto& e = j["masters"][master];
  if (!e.is_object() || !e.contains("token") || !e["token"].is_string()) return std::nullopt;
  StoredToken t;
  t.token = e["token"].get<std::string>();
  if (e.contains("username") && e["username"].is_string()) t.username = e["username"].get<std::string>();
  return t;
}

bool SaveToken(const std::string& master, const StoredToken& token) {
  nlohmann::json j = Load();
  j["masters"][master] = {{"username", token.username}, {"token", token.token}};
  return Save(j);
}

void RemoveToken(const std::string& master) {
  nlohmann::json j = Load();
  if (!j["masters"].contains(master)) return;
  j["masters"].erase(master);
  Save(j);
}

}  // namespace det::cli
