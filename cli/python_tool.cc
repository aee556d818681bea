#include "cli/python_tool.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"

namespace multiscreen::cli {
namespace fs = std::filesystem;

absl::StatusOr<std::string> PythonToolPath(const std::string& name, const std::string& what) {
  const fs::path script = fs::path(ConfigDir()).parent_path() / "tools" / name;
  std::error_code ec;
  if (!fs::is_regular_file(script, ec)) {
    return absl::NotFoundError(absl::StrCat(script.string(), " not found (", what, ", beside configs/)"));
  }
  return script.string();
}

absl::StatusOr<int> RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                                  std::string* captured) {
  std::vector<std::string> argv_strings = {fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3", script};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // out: the child's stdout when captured; exec_status: closed by a successful exec
  // (O_CLOEXEC), else it carries the exec's errno.
  int out[2] = {-1, -1}, exec_status[2] = {-1, -1};
  if (captured != nullptr && ::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", script, ": pipe: ", std::strerror(errno)));
  }
  if (::pipe2(exec_status, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", script, ": pipe: ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("cannot start ", script, ": fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Dies with the parent; if the parent is already gone (before prctl), at once.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    if (captured != nullptr) ::dup2(out[1], STDOUT_FILENO);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    (void)!::write(exec_status[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(exec_status[1]);
  if (captured != nullptr) {
    ::close(out[1]);
    captured->clear();
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(out[0], buffer, sizeof buffer);
      if (n > 0) {
        captured->append(buffer, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    ::close(out[0]);
  }
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_status[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  ::close(exec_status[0]);
  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (got == sizeof exec_errno) {
    return absl::NotFoundError(absl::StrCat("cannot run ", script, ": ", argv_strings[0], ": ",
                                            std::strerror(exec_errno)));
  }
  if (waited < 0) return absl::InternalError(absl::StrCat("waiting for ", script, " failed: ", std::strerror(errno)));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WTERMSIG(status) == SIGPIPE && captured == nullptr) {
    // The tool's reader (this process's stdout: `plan | head`) went away: end as a pipe's
    // writer does, so the shell sees 141 and nothing is said.
    std::fflush(stdout);
    std::signal(SIGPIPE, SIG_DFL);
    std::raise(SIGPIPE);
  }
  return absl::InternalError(absl::StrCat(script, " ended by signal ", WTERMSIG(status)));
}

}  // namespace multiscreen::cli
