// det-cli's stored login tokens: one JSON file,
//   {"masters": {"HOST:PORT": {"username": "...", "token": "..."}}}
// at $DET_AUTH_FILE, else $HOME/.det/auth.json (created 0600, its directory
// 0700). Not thread-safe; det-cli runs one command per process.
#ifndef DET_CLI_AUTH_FILE_H_
#define DET_CLI_AUTH_FILE_H_

#include <optional>
#include <string>

namespace det::cli {

struct StoredToken {
  std::string username;
  std::string token;
};

// $DET_AUTH_FILE, else $HOME/.det/auth.json ("" when neither is set).
std::string AuthFilePath();

// The token stored for `master`, if any (a missing or unreadable file is
// treated as empty).
std::optional<StoredToken> LoadToken(const std::string& master);

// Stores (replaces) the token for `master`. False when the file cannot be
// written (det-cli then only warns: the command still runs).
bool SaveToken(const std::string& master, const StoredToken& token);

// Forgets the token for `master`.
void RemoveToken(const std::string& master);

}  // namespace det::cli

#endif  // DET_CLI_AUTH_FILE_H_
