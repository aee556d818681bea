#include "parallel/peer_watchdog.h"

#include <poll.h>
#include <string.h>  // sigabbrev_np
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"

namespace multiscreen {
namespace {

// What makes a pid meaningful to another process: the same kernel (boot id: hosts may
// share a name, containers often do) and the same pid namespace (ranks in separate
// containers on one host each have their own pid numbers).
struct Identity {
  int pid = 0;
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  char boot_id[40] = {0};   // /proc/sys/kernel/random/boot_id ("" when unreadable)
  char pid_ns[40] = {0};    // readlink /proc/self/ns/pid, e.g. "pid:[4026531836]" ("" when unreadable)
};

// Whether `a`'s pids name processes `b` can see: the same host, kernel and pid namespace
// (all three known).
bool SamePidSpace(const Identity& a, const Identity& b) {
  return std::strcmp(a.host, b.host) == 0 && a.boot_id[0] != 0 && std::strcmp(a.boot_id, b.boot_id) == 0 &&
         a.pid_ns[0] != 0 && std::strcmp(a.pid_ns, b.pid_ns) == 0;
}

void ReadIdentity(Identity* me) {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (boot >> id) std::snprintf(me->boot_id, sizeof(me->boot_id), "%s", id.c_str());
  char ns[sizeof(me->pid_ns)] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  if (n > 0) std::memcpy(me->pid_ns, ns, static_cast<size_t>(n));
}

struct Peer {
  int rank = 0;
  int pid = 0;
  int fd = -1;  // its pidfd, or −1: polled through /proc
};

int PidfdOpen(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Whether /proc says `pid` is gone or a zombie; *how* gets the zombie's exit status
// in words when it can still be read (before its parent reaps it).
bool ProcessEnded(int pid, std::string* how) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return true;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return true;
  std::istringstream fields(stat.substr(paren + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(fields)), std::istream_iterator<std::string>());
  if (f.empty() || f[0] != "Z") return false;
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

}  // namespace

class PeerWatchdog::Impl {
 public:
  Impl(int rank, std::vector<Peer> peers) : rank_(rank), peers_(std::move(peers)) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Impl() {
    const uint64_t one = 1;
    if (::write(stop_fd_, &one, sizeof(one)) < 0) {}
    thread_.join();
    for (const Peer& p : peers_) {
      if (p.fd >= 0) ::close(p.fd);
    }
    ::close(stop_fd_);
  }

 private:
  // Waits up to timeout_ms for a peer to end or for the stop signal: the index of
  // the peer that ended, −1 on a timeout, −2 on stop.
  int Wait(int timeout_ms, const std::vector<bool>& dead) {
    std::vector<pollfd> fds{{stop_fd_, POLLIN, 0}};
    std::vector<int> index;
    bool polled = false;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (dead[i]) continue;
      if (peers_[i].fd >= 0) {
        fds.push_back({peers_[i].fd, POLLIN, 0});
        index.push_back(static_cast<int>(i));
      } else {
        polled = true;
      }
    }
    const int rc = ::poll(fds.data(), fds.size(), polled ? std::min(timeout_ms, 200) : timeout_ms);
    if (rc > 0 && (fds[0].revents & POLLIN)) return -2;
    for (size_t k = 1; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents != 0) return index[k - 1];
    }
    for (size_t i = 0; polled && i < peers_.size(); ++i) {
      if (!dead[i] && peers_[i].fd < 0 && ProcessEnded(peers_[i].pid, nullptr)) return static_cast<int>(i);
    }
    return -1;
  }

  void Loop() {
    std::vector<bool> dead(peers_.size(), false);
    for (;;) {
      const int i = Wait(-1, dead);
      if (i == -2) return;
      if (i < 0) continue;
      std::string how = "its process ended without leaving the job (killed, crashed or out of memory)";
      ProcessEnded(peers_[i].pid, &how);
      dead[i] = true;
      // One line per node: the lowest surviving rank says it; the others give it 3 s.
      bool lower_alive = false;
      for (size_t k = 0; k < peers_.size(); ++k) {
        if (!dead[k] && peers_[k].rank < rank_ && !ProcessEnded(peers_[k].pid, nullptr)) lower_alive = true;
      }
      if (lower_alive) {
        std::vector<bool> all(peers_.size(), true);  // wait on the stop signal alone
        if (Wait(3000, all) == -2) return;
      }
      FatalError(absl::StrCat("rank ", peers_[i].rank, " (pid ", peers_[i].pid, ", same node) died: ", how,
                              "; ending the job"));
    }
  }

  int rank_;
  std::vector<Peer> peers_;
  int stop_fd_ = -1;
  std::thread thread_;
};

PeerWatchdog::PeerWatchdog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PeerWatchdog::~PeerWatchdog() = default;

std::unique_ptr<PeerWatchdog> PeerWatchdog::Start(MPI_Comm world) {
  int rank = 0, size = 1, len = 0;
  MS_MPI_CHECK(MPI_Comm_rank(world, &rank));
  MS_MPI_CHECK(MPI_Comm_size(world, &size));
  Identity me;
  me.pid = static_cast<int>(::getpid());
  MS_MPI_CHECK(MPI_Get_processor_name(me.host, &len));
  ReadIdentity(&me);
  std::vector<Identity> all(size);
  MS_MPI_CHECK(MPI_Allgather(&me, sizeof(Identity), MPI_BYTE, all.data(), sizeof(Identity), MPI_BYTE, world));
  std::vector<Peer> peers;
  for (int r = 0; r < size; ++r) {
    if (r == rank || !SamePidSpace(all[r], me)) continue;  // another node, kernel or container: the launcher's
    Peer p{r, all[r].pid, PidfdOpen(all[r].pid)};
    if (p.fd < 0 && ProcessEnded(p.pid, nullptr)) {
      std::fprintf(stderr, "multiscreen: warning: rank %d cannot see rank %d's process (pid %d): not watching it\n",
                   rank, r, p.pid);
      continue;
    }
    peers.push_back(p);
  }
  return std::unique_ptr<PeerWatchdog>(new PeerWatchdog(std::make_unique<Impl>(rank, std::move(peers))));
}

}  // namespace multiscreen
