#include "parallel/process_identity.h"

#include <string.h>  // sigabbrev_np
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"
#include "parallel/progress.h"

namespace multiscreen {
namespace {

// The fields of /proc/<pid>/stat after "pid (comm)": state first. Empty when unreadable.
std::vector<std::string> StatFields(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return {};
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 > stat.size()) return {};
  std::istringstream fields(stat.substr(paren + 2));
  return std::vector<std::string>((std::istream_iterator<std::string>(fields)), std::istream_iterator<std::string>());
}

}  // namespace

ProcessIdentity SelfIdentity() {
  ProcessIdentity me;
  me.pid = static_cast<int>(::getpid());
  me.beacon_fd = progress::SelfFd();
  int len = 0;
  MS_MPI_CHECK(MPI_Get_processor_name(me.host, &len));
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (boot >> id) std::snprintf(me.boot_id, sizeof(me.boot_id), "%s", id.c_str());
  char ns[sizeof(me.pid_ns)] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  if (n > 0) std::memcpy(me.pid_ns, ns, static_cast<size_t>(n));
  return me;
}

bool SamePidSpace(const ProcessIdentity& a, const ProcessIdentity& b) {
  return std::strcmp(a.host, b.host) == 0 && a.boot_id[0] != 0 && std::strcmp(a.boot_id, b.boot_id) == 0 &&
         a.pid_ns[0] != 0 && std::strcmp(a.pid_ns, b.pid_ns) == 0;
}

bool ProcessEnded(int pid, std::string* how) {
  const std::vector<std::string> f = StatFields(pid);
  if (f.empty()) return true;
  if (f[0] != "Z") return false;
  // Field 52 of /proc/pid/stat (index 49 after pid and comm): the waitpid status.
  if (f.size() > 49 && how != nullptr) {
    const int status = std::atoi(f[49].c_str());
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      *how = absl::StrCat("killed by signal ", sig, " (SIG", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", ")");
    } else if (WIFEXITED(status)) {
      *how = absl::StrCat("exited with status ", WEXITSTATUS(status), " without leaving the job");
    }
  }
  return true;
}

std::string ProcessStateInWords(int pid) {
  const std::vector<std::string> f = StatFields(pid);
  if (f.empty() || f[0] == "Z" || f[0] == "X") return "gone";
  const char state = f[0][0];
  if (state == 'T' || state == 't') return "stopped (SIGSTOP or a debugger)";
  if (state == 'R') return "running";
  if (state == 'D') {
    std::ifstream in("/proc/" + std::to_string(pid) + "/wchan");
    std::string wchan;
    in >> wchan;
    return absl::StrCat("in uninterruptible sleep", wchan.empty() || wchan == "0" ? "" : " in " + wchan,
                        " (a file system or device call)");
  }
  return "sleeping";
}

}  // namespace multiscreen
