#include "cli/user_commands.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/auth_file.h"
#include "cli/table.h"
#include "cli/terminal_text.h"
#include "common/utf8.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

constexpr char kDefaultUser[] = "determined";

grpc::Status DoLogin(Client& client, const std::string& username, const std::string& password,
                     v1::LoginResponse* resp) {
  v1::LoginRequest req;
  req.set_username(username);
  req.set_password(password);
  return client.Call(&Stub::Login, req, resp);
}

}  // namespace

void EnsureLoggedIn(Client& client) {
  if (!client.options().token.empty()) return;
  const std::string& master = client.options().master;
  if (auto stored = LoadToken(master)) {
    client.set_token(stored->token);
    v1::GetMeResponse me;
    grpc::Status st = client.Call(&Stub::GetMe, v1::GetMeRequest(), &me);
    if (st.ok() || st.error_code() != grpc::StatusCode::UNAUTHENTICATED) return;
    // Expired or from an earlier master database.
    RemoveToken(master);
    client.set_token("");
  }
  v1::LoginResponse resp;
  if (!DoLogin(client, kDefaultUser, "", &resp).ok()) return;
  client.set_token(resp.token());
  SaveToken(master, {resp.user().username(), resp.token()});
}

int UserLogin(Client& client, const std::string& username, const std::string& password, const CommandIo& io) {
  v1::LoginResponse resp;
  grpc::Status st = DoLogin(client, username, password, &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  client.set_token(resp.token());
  if (!SaveToken(client.options().master, {resp.user().username(), resp.token()})) {
    io.err << "det-cli: warning: cannot write " << AuthFilePath() << "; the token is not stored\n";
  }
  if (io.json) {
    v1::LoginResponse shown = resp;
    shown.clear_token();
    PrintJson(shown, io.out);
    return 0;
  }
  io.out << "Logged in as user '" << TerminalText(resp.user().username()) << "'\n";
  return 0;
}

int UserLogout(Client& client, const CommandIo& io) {
  auto stored = LoadToken(client.options().master);
  if (!stored && client.options().token.empty()) {
    io.out << "Not logged in\n";
    return 0;
  }
  if (stored) client.set_token(stored->token);
  v1::LogoutResponse resp;
  grpc::Status st = client.Call(&Stub::Logout, v1::LogoutRequest(), &resp);
  RemoveToken(client.options().master);
  if (!st.ok() && st.error_code() != grpc::StatusCode::UNAUTHENTICATED) return ReportError(client, st, io.err);
  io.out << "Logged out\n";
  return 0;
}

int UserWhoami(Client& client, const CommandIo& io) {
  v1::GetMeResponse resp;
  grpc::Status st = client.Call(&Stub::GetMe, v1::GetMeRequest(), &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "You are logged in as user '" << TerminalText(resp.user().username()) << "'" << (resp.user().admin() ? " (admin)" : "")
         << '\n';
  return 0;
}

int UserList(Client& client, const CommandIo& io) {
  v1::GetUsersResponse resp;
  grpc::Status st = client.Call(&Stub::GetUsers, v1::GetUsersRequest(), &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  // AGENT UID/GID: what the user's trials run as (det-master
  // --trial-uid-range); "-" until recorded.
  Table t({"ID", "USERNAME", "DISPLAY NAME", "ADMIN", "ACTIVE", "AGENT UID", "AGENT GID"});
  for (const auto& u : resp.users()) {
    t.AddRow({std::to_string(u.id()), u.username(), u.display_name(), u.admin() ? "yes" : "no",
              u.active() ? "yes" : "no", u.agent_uid() > 0 ? std::to_string(u.agent_uid()) : "-",
              u.agent_gid() > 0 ? std::to_string(u.agent_gid()) : "-"});
  }
  t.Print(io.out);
  return 0;
}

int UserCreate(Client& client, const std::string& username, bool admin, const std::string& password,
               const CommandIo& io) {
  v1::PostUserRequest req;
  req.mutable_user()->set_username(Utf8Sanitized(username));
  req.mutable_user()->set_admin(admin);
  req.mutable_user()->set_active(true);
  req.set_password(password);
  v1::PostUserResponse resp;
  grpc::Status st = client.Call(&Stub::PostUser, req, &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "Created user '" << TerminalText(resp.user().username()) << "' (id " << resp.user().id() << ")\n";
  return 0;
}

int UserLinkAgentUser(Client& client, const std::string& username, int64_t uid, int64_t gid, const CommandIo& io) {
  v1::GetUsersResponse users;
  grpc::Status st = client.Call(&Stub::GetUsers, v1::GetUsersRequest(), &users);
  if (!st.ok()) return ReportError(client, st, io.err);
  v1::PatchUserRequest req;
  for (const auto& u : users.users()) {
    if (u.username() == username) req.set_user_id(u.id());
  }
  if (req.user_id() == 0) {
    io.err << "det-cli: error: user '" << TerminalText(username) << "' not found (NOT_FOUND)\n";
    return 1;
  }
  req.set_agent_uid(uid);
  req.set_agent_gid(gid);
  v1::PatchUserResponse resp;
  st = client.Call(&Stub::PatchUser, req, &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  io.out << "Linked user '" << TerminalText(username) << "' to agent uid " << resp.user().agent_uid() << ", gid "
         << resp.user().agent_gid() << "\n";
  return 0;
}

int UserChangePassword(Client& client, const std::string& username, const PasswordPrompts& prompts,
                       const CommandIo& io) {
  int64_t user_id = 0;
  std::string name = username;
  v1::GetMeResponse me;
  grpc::Status me_st = client.Call(&Stub::GetMe, v1::GetMeRequest(), &me);
  if (!me_st.ok()) return ReportError(client, me_st, io.err);
  if (username.empty() || username == me.user().username()) {
    user_id = me.user().id();
    name = me.user().username();
  } else {
    v1::GetUsersResponse users;
    grpc::Status st = client.Call(&Stub::GetUsers, v1::GetUsersRequest(), &users);
    if (!st.ok()) return ReportError(client, st, io.err);
    for (const auto& u : users.users()) {
      if (u.username() == username) user_id = u.id();
    }
    if (user_id == 0) {
      io.err << "det-cli: error: user '" << username << "' not found (NOT_FOUND)\n";
      return 1;
    }
  }
  v1::PatchUserRequest req;
  req.set_user_id(user_id);
  if (user_id == me.user().id()) req.set_old_password(prompts.old_password());
  std::optional<std::string> password = prompts.new_password();
  if (!password) {
    io.err << "det-cli: error: passwords do not match\n";
    return 2;
  }
  req.set_password(*password);
  v1::PatchUserResponse resp;
  grpc::Status st = client.Call(&Stub::PatchUser, req, &resp);
  if (!st.ok()) return ReportError(client, st, io.err);
  io.out << "Changed the password of user '" << name << "'\n";
  return 0;
}

std::string ReadPassword(const std::string& prompt, bool from_stdin) {
  std::string line;
  if (from_stdin) {
    std::getline(std::cin, line);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }
  int fd = ::open("/dev/tty", O_RDWR | O_NOCTTY);
  if (fd < 0) return "";
  (void)::write(fd, prompt.data(), prompt.size());
  termios old{};
  bool restore = tcgetattr(fd, &old) == 0;
  if (restore) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  if (restore) tcsetattr(fd, TCSAFLUSH, &old);
  (void)::write(fd, "\n", 1);
  ::close(fd);
  return line;
}

}  // namespace det::cli
