// LD_PRELOAD shim for tests: flock() fails with ENOSYS, as it does on parallel
// file systems mounted without it (Lustre without -o flock, NFS with nolock),
// where HDF5 1.10's default file locking refuses to create or open a file.
#include <errno.h>

int flock(int fd, int operation) {
  (void)fd;
  (void)operation;
  errno = ENOSYS;
  return -1;
}
