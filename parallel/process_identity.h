// Which processes of an MPI job share this process's node, and what /proc says of them:
// shared by the peer watchdog (a rank that died) and the collective watchdog (a rank
// that is stopped or hung).
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

namespace multiscreen {

// What makes a pid meaningful to another process: the same kernel (boot id: hosts may
// share a name, containers often do) and the same pid namespace (ranks in separate
// containers on one host each have their own pid numbers). Plain bytes, exchanged
// between ranks as MPI_BYTE.
struct ProcessIdentity {
  int pid = 0;
  int beacon_fd = -1;       // the progress beacon's memfd (parallel/progress.h), −1: none
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  char boot_id[40] = {0};   // /proc/sys/kernel/random/boot_id ("" when unreadable)
  char pid_ns[40] = {0};    // readlink /proc/self/ns/pid, e.g. "pid:[4026531836]" ("" when unreadable)
};

// This process's identity.
ProcessIdentity SelfIdentity();
// Whether `a`'s pids name processes `b` can see: the same host, kernel and pid namespace
// (all three known).
bool SamePidSpace(const ProcessIdentity& a, const ProcessIdentity& b);

// Whether /proc says `pid` is gone or a zombie; *how* gets the zombie's exit status in
// words when it can still be read (before its parent reaps it).
bool ProcessEnded(int pid, std::string* how);
// What /proc says `pid` is doing, in words: "stopped (SIGSTOP or a debugger)",
// "in uninterruptible sleep in <wchan> (a file system or device call)", "running",
// "sleeping", or "gone".
std::string ProcessStateInWords(int pid);

}  // namespace multiscreen
