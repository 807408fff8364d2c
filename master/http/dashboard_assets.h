// The web dashboard's files (master/http/dashboard/: index.html, app.js, ...),
// embedded into det-master at build time by embed_dashboard.cmake so an
// installed master needs no files; optionally read from a directory instead
// (det-master --dashboard-dir, for editing the dashboard without rebuilding).
#ifndef DET_MASTER_HTTP_DASHBOARD_ASSETS_H_
#define DET_MASTER_HTTP_DASHBOARD_ASSETS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace det::master {

struct DashboardAsset {
  std::string_view name;  // file name, e.g. "app.js"
  std::string_view data;  // the file's bytes
};

// The embedded files (generated source): kDashboardAssetCount entries.
extern const DashboardAsset kDashboardAssets[];
extern const size_t kDashboardAssetCount;

// One file of the dashboard, ready to send.
struct DashboardFile {
  std::string content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string body;
};

// True when `name` can name a dashboard file: one path component of
// [A-Za-z0-9_.-] not starting with '.', at most 128 characters. Rejects
// "..", "a/b", "%2e%2e" and anything else that could leave the directory.
bool IsValidDashboardFileName(std::string_view name);

// The Content-Type for a file name by its extension (.html, .js, .css, .svg,
// .png, .json, .ico, .map, .txt, .md); "application/octet-stream" otherwise.
std::string DashboardContentType(std::string_view name);

// Returns the dashboard file `name` (e.g. "index.html"): the embedded copy when
// `dir` is empty, else `dir`/`name` read from disk.
// Errors: NotFound for an invalid name (see IsValidDashboardFileName) or a
// file that does not exist; Internal when a file exists but cannot be read.
// Thread-safe.
absl::StatusOr<DashboardFile> LoadDashboardFile(std::string_view name, const std::string& dir);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_DASHBOARD_ASSETS_H_
