// det-cli's login and user commands, and the automatic login every other
// command does first (as Determined's CLI): with no token in $DET_USER_TOKEN
// and none stored for the master (cli/auth_file.h), det-cli logs in as
// `determined` with an empty password and stores the token.
#ifndef DET_CLI_USER_COMMANDS_H_
#define DET_CLI_USER_COMMANDS_H_

#include <functional>
#include <optional>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

// Gives `client` a token unless it has one ($DET_USER_TOKEN): the stored one
// if the master still accepts it, else a new one from logging in as
// `determined` with an empty password (stored). Failures are not fatal: the
// command then fails with the master's UNAUTHENTICATED message.
void EnsureLoggedIn(Client& client);

// user login [USERNAME]: logs in and stores the token for the master.
int UserLogin(Client& client, const std::string& username, const std::string& password, const CommandIo& io);
// user logout: revokes and forgets the stored token.
int UserLogout(Client& client, const CommandIo& io);
int UserWhoami(Client& client, const CommandIo& io);
int UserList(Client& client, const CommandIo& io);
// det-cli user link-with-agent-user USERNAME --agent-uid N --agent-gid N
// (admin): the user's trials run as that Unix uid/gid (PatchUser).
int UserLinkAgentUser(Client& client, const std::string& username, int64_t uid, int64_t gid, const CommandIo& io);
// user create NAME [--admin]: admin only.
int UserCreate(Client& client, const std::string& username, bool admin, const std::string& password,
               const CommandIo& io);
// How change-password reads passwords: the current one (asked only when the
// caller changes their own password, which the master checks) and the new
// one (nullopt: the confirmation did not match).
struct PasswordPrompts {
  std::function<std::string()> old_password;
  std::function<std::optional<std::string>()> new_password;
};
// user change-password [USERNAME]: the caller's own password when
// `username` is empty or names the caller (then the current password is
// asked first); other users need admin.
int UserChangePassword(Client& client, const std::string& username, const PasswordPrompts& prompts,
                       const CommandIo& io);

// Reads a password: one line from stdin when `from_stdin`, else from the
// terminal without echo (prompting on stderr); "" when there is no terminal.
std::string ReadPassword(const std::string& prompt, bool from_stdin);

}  // namespace det::cli

#endif  // DET_CLI_USER_COMMANDS_H_
