#include "master/http/dashboard_assets.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det::master {

bool IsValidDashboardFileName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

std::string DashboardContentType(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".txt", "text/plain; charset=utf-8"},
      {".md", "text/markdown; charset=utf-8"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (absl::EndsWithIgnoreCase(std::string(name), std::string(ext))) return std::string(type);
  }
  return "application/octet-stream";
}

absl::StatusOr<DashboardFile> LoadDashboardFile(std::string_view name_view, const std::string& dir) {
  const std::string name(name_view);
  if (!IsValidDashboardFileName(name)) {
    return absl::NotFoundError(absl::StrCat("no dashboard file '", std::string(name), "'"));
  }
  DashboardFile file;
  file.content_type = DashboardContentType(name);
  if (dir.empty()) {
    for (size_t i = 0; i < kDashboardAssetCount; ++i) {
      if (kDashboardAssets[i].name == name) {
        file.body = std::string(kDashboardAssets[i].data);
        return file;
      }
    }
    return absl::NotFoundError(absl::StrCat("no dashboard file '", std::string(name), "'"));
  }
  std::filesystem::path path = std::filesystem::path(dir) / std::string(name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no dashboard file '", std::string(name), "' in ", dir));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream body;
  body << in.rdbuf();
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path.string()));
  file.body = body.str();
  return file;
}

}  // namespace det::master
