#include "trainer/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace multiscreen {
namespace {

std::atomic<int> g_signal{0};

void Handle(int sig) {
  if (sig == SIGINT && g_signal.load() == SIGINT) {
    const char msg[] = "\n[E] second SIGINT: exiting now without saving\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(130);
  }
  g_signal.store(sig);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = Handle;
  sigemptyset(&sa.sa_mask);
  // SIGHUP (a closed terminal or ssh session) stops the run like SIGTERM; SIGPIPE (a
  // closed `| tee` or `| head` on the progress output) is ignored, so that the write
  // fails instead of killing the run between checkpoints.
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaction(sig, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool StopRequested() { return g_signal.load() != 0; }
int StopSignal() { return g_signal.load(); }

}  // namespace multiscreen
