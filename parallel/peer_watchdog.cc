#include "parallel/peer_watchdog.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"
#include "parallel/process_identity.h"

namespace multiscreen {
namespace {

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
      // A peer that exited with a status (not killed) has almost always ended the job
      // itself (FatalError, MPI_Abort: its own line already said why): give the launcher
      // the time to end this process before a second line blames it.
      if (how.rfind("exited with status", 0) == 0) {
        std::vector<bool> all(peers_.size(), true);  // wait on the stop signal alone
        if (Wait(3000, all) == -2) return;
      }
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

std::unique_ptr<PeerWatchdog> PeerWatchdog::Start(int rank, const std::vector<ProcessIdentity>& all) {
  const int size = static_cast<int>(all.size());
  const ProcessIdentity& me = all[rank];
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
