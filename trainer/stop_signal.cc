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
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

bool StopRequested() { return g_signal.load() != 0; }
int StopSignal() { return g_signal.load(); }

}  // namespace multiscreen
