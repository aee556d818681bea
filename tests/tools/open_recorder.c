// LD_PRELOAD shim for tests: records every file or directory a process opens for
// reading inside the source tree, so that tests/tools/gpu_tree_test.py can check that
// the tree a lent GPU machine receives (the tracked files and scripts/gpu_bundle's
// overlay, nothing else) holds each of them (issue 43: a cuda-label test read
// data_cache/gpt2, which is git-ignored and was not carried).
//
// Environment: MS_OPEN_ROOT, the source directory (absolute, as CMake spells it);
// MS_OPEN_LOG, a file to which one line per open is appended: the path relative to
// MS_OPEN_ROOT. Paths are made absolute (the working directory, or openat's
// directory descriptor) and normalized lexically ("." and ".." folded, symbolic links
// kept: a linked data_cache/ is recorded under its name in the tree). Recorded: opens
// that succeeded without O_CREAT (what must already exist), under MS_OPEN_ROOT,
// outside its build directories (build*/) and Python's __pycache__/. Unset
// variables make the shim record nothing. Each line is one write(2) with O_APPEND,
// so processes running at once do not interleave within a line.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { kPath = 4096 };

static __thread int in_recorder;  // opens made by the shim itself are not recorded

// Appends `path` (absolute after this call, lexically normalized) to out[kPath];
// `dir` is the directory a relative path starts from. Returns 0 when it fits.
static int normalize(const char* dir, const char* path, char* out) {
  char joined[kPath];
  int n = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                         : snprintf(joined, sizeof joined, "%s/%s", dir, path);
  if (n < 0 || n >= kPath) return -1;
  size_t len = 0;
  out[0] = '\0';
  for (char *save = NULL, *part = strtok_r(joined, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
    if (strcmp(part, ".") == 0) continue;
    if (strcmp(part, "..") == 0) {
      while (len > 0 && out[len - 1] != '/') --len;
      if (len > 0) --len;  // the '/' before the dropped name
      out[len] = '\0';
      continue;
    }
    size_t plen = strlen(part);
    if (len + 1 + plen + 1 > kPath) return -1;
    out[len++] = '/';
    memcpy(out + len, part, plen + 1);
    len += plen;
  }
  if (len == 0) strcpy(out, "/");
  return 0;
}

static void record(int dirfd, const char* path, int flags) {
  if (path == NULL || (flags & O_CREAT) || in_recorder) return;
  const char* root = getenv("MS_OPEN_ROOT");
  const char* log = getenv("MS_OPEN_LOG");
  if (root == NULL || log == NULL || root[0] != '/') return;
  int saved_errno = errno;
  in_recorder = 1;
  char dir[kPath], abs[kPath];
  int have_dir = 1;
  if (path[0] != '/') {
    if (dirfd == AT_FDCWD) {
      have_dir = getcwd(dir, sizeof dir) != NULL;
    } else {
      char link[64];
      snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
      ssize_t n = readlink(link, dir, sizeof dir - 1);
      have_dir = n > 0;
      if (have_dir) dir[n] = '\0';
    }
  }
  size_t rlen = strlen(root);
  while (rlen > 1 && root[rlen - 1] == '/') --rlen;
  if (have_dir && normalize(dir, path, abs) == 0 && strncmp(abs, root, rlen) == 0 && abs[rlen] == '/') {
    const char* rel = abs + rlen + 1;
    if (strncmp(rel, "build", 5) != 0 && strstr(rel, "__pycache__") == NULL) {
      char line[kPath + 1];
      int n = snprintf(line, sizeof line, "%s\n", rel);
      // The raw system call: the shim's own open must not come back through it.
      int fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        if (n > 0 && n < (int)sizeof line) (void)!write(fd, line, (size_t)n);
        close(fd);
      }
    }
  }
  in_recorder = 0;
  errno = saved_errno;
}

// The interposed entry points: each calls the C library's own, then records a success.
#define REAL(name, type)                                                  \
  typedef __typeof__(type) name##_fn;                                               \
  static name##_fn real_##name;                                           \
  if (!real_##name) real_##name = (name##_fn)dlsym(RTLD_NEXT, #name)

static mode_t mode_of(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_LIKE(name)                                                  \
  int name(const char* path, int flags, ...) {                           \
    va_list ap;                                                          \
    va_start(ap, flags);                                                 \
    mode_t mode = mode_of(flags, ap);                                    \
    va_end(ap);                                                          \
    REAL(name, int (*)(const char*, int, ...));                          \
    int fd = real_##name(path, flags, mode);                             \
    if (fd >= 0) record(AT_FDCWD, path, flags);                          \
    return fd;                                                           \
  }
#define OPENAT_LIKE(name)                                                \
  int name(int dirfd, const char* path, int flags, ...) {                \
    va_list ap;                                                          \
    va_start(ap, flags);                                                 \
    mode_t mode = mode_of(flags, ap);                                    \
    va_end(ap);                                                          \
    REAL(name, int (*)(int, const char*, int, ...));                     \
    int fd = real_##name(dirfd, path, flags, mode);                      \
    if (fd >= 0) record(dirfd, path, flags);                             \
    return fd;                                                           \
  }
// _FORTIFY_SOURCE's checked variants (no mode: they refuse O_CREAT without one).
#define OPEN_2_LIKE(name)                                                \
  int name(const char* path, int flags) {                                \
    REAL(name, int (*)(const char*, int));                               \
    int fd = real_##name(path, flags);                                   \
    if (fd >= 0) record(AT_FDCWD, path, flags);                          \
    return fd;                                                           \
  }
#define OPENAT_2_LIKE(name)                                              \
  int name(int dirfd, const char* path, int flags) {                     \
    REAL(name, int (*)(int, const char*, int));                          \
    int fd = real_##name(dirfd, path, flags);                            \
    if (fd >= 0) record(dirfd, path, flags);                             \
    return fd;                                                           \
  }
#define FOPEN_LIKE(name)                                                 \
  FILE* name(const char* path, const char* mode) {                       \
    REAL(name, FILE* (*)(const char*, const char*));                     \
    FILE* f = real_##name(path, mode);                                   \
    if (f != NULL && mode != NULL && mode[0] == 'r') record(AT_FDCWD, path, 0); \
    return f;                                                            \
  }

OPEN_LIKE(open)
OPEN_LIKE(open64)
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)
OPEN_2_LIKE(__open_2)
OPEN_2_LIKE(__open64_2)
OPENAT_2_LIKE(__openat_2)
OPENAT_2_LIKE(__openat64_2)
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

// Directories listed (std::filesystem::directory_iterator, Python's os.listdir).
#include <dirent.h>
DIR* opendir(const char* path) {
  REAL(opendir, DIR* (*)(const char*));
  DIR* d = real_opendir(path);
  if (d != NULL) record(AT_FDCWD, path, O_RDONLY | O_DIRECTORY);
  return d;
}
