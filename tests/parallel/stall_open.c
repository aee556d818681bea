// LD_PRELOAD shim for tests: opening the file named by $MS_STALL_OPEN (a path as the
// program passes it) never returns, as on a hung file system. $MS_STALL_HOW=stop makes
// the process SIGSTOP itself there instead of sleeping (a rank stopped before the start-up
// agreement, issue 43 §2). Every other open goes through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void StallIfNamed(const char* path) {
  const char* target = getenv("MS_STALL_OPEN");
  if (target == NULL || *target == '\0' || path == NULL || strcmp(path, target) != 0) return;
  const char* how = getenv("MS_STALL_HOW");
  for (;;) {
    if (how != NULL && strcmp(how, "stop") == 0) raise(SIGSTOP);
    sleep(3600);
  }
}

typedef int (*OpenFn)(const char*, int, ...);
typedef int (*OpenAtFn)(int, const char*, int, ...);

static int ForwardOpen(const char* name, const char* path, int flags, mode_t mode) {
  StallIfNamed(path);
  return ((OpenFn)dlsym(RTLD_NEXT, name))(path, flags, mode);
}

static int ForwardOpenAt(const char* name, int dirfd, const char* path, int flags, mode_t mode) {
  StallIfNamed(path);
  return ((OpenAtFn)dlsym(RTLD_NEXT, name))(dirfd, path, flags, mode);
}

static mode_t ModeOf(int flags, va_list args) {
  return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? va_arg(args, mode_t) : 0;
}

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return ForwardOpen("open", path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return ForwardOpen("open64", path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return ForwardOpenAt("openat", dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return ForwardOpenAt("openat64", dirfd, path, flags, mode);
}
