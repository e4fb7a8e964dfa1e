/* preadv2/pwritev2: an offset, -1 for the file position, the accepted
 * flags (RWF_HIPRI, RWF_DSYNC, RWF_SYNC), EOPNOTSUPP for unknown flags,
 * EINVAL for offsets below -1, ESPIPE on a pipe with an offset; and the
 * ioctls every file takes (FIONBIO, FIOCLEX, FIONCLEX). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

/* linux/fs.h's values (musl's headers do not have them). */
#ifndef RWF_HIPRI
#define RWF_HIPRI 0x1
#define RWF_DSYNC 0x2
#define RWF_SYNC 0x4
#endif

/* The raw calls: musl and glibc differ in whether they wrap these. */
static long pv2(int nr, int fd, struct iovec *iov, int n, long off, int flags) {
  return syscall(nr, fd, iov, n, off, 0L, flags);
}

int main(void) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/sbx_rw2.%d", (int)getpid());
  int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
  CHECK("open", fd >= 0);
  unlink(path);
  char a[] = "hello ", b[] = "world";
  struct iovec w[2] = {{a, 6}, {b, 5}};
  CHECK("pwritev2 at offset 0", pv2(SYS_pwritev2, fd, w, 2, 0, 0) == 11);
  CHECK("the position did not move", lseek(fd, 0, SEEK_CUR) == 0);
  CHECK("pwritev2 at -1 uses the position",
        pv2(SYS_pwritev2, fd, w, 1, -1, RWF_DSYNC) == 6 && lseek(fd, 0, SEEK_CUR) == 6);
  CHECK("RWF_SYNC and RWF_HIPRI are accepted",
        pv2(SYS_pwritev2, fd, w + 1, 1, 6, RWF_SYNC | RWF_HIPRI) == 5);
  char x[6] = {0}, y[6] = {0};
  struct iovec r[2] = {{x, 5}, {y, 5}};
  CHECK("preadv2 at offset 1", pv2(SYS_preadv2, fd, r, 2, 1, 0) == 10 &&
                                   memcmp(x, "ello ", 5) == 0 && memcmp(y, "world", 5) == 0);
  lseek(fd, 6, SEEK_SET);
  memset(x, 0, sizeof x);
  CHECK("preadv2 at -1 reads from the position",
        pv2(SYS_preadv2, fd, r, 1, -1, 0) == 5 && memcmp(x, "world", 5) == 0 &&
            lseek(fd, 0, SEEK_CUR) == 11);
  CHECK("preadv2 at the end: 0", pv2(SYS_preadv2, fd, r, 1, 100, 0) == 0);
  CHECK_ERRNO("unknown flag: EOPNOTSUPP", pv2(SYS_preadv2, fd, r, 1, 0, 0x4000), EOPNOTSUPP);
  CHECK_ERRNO("offset -2: EINVAL", pv2(SYS_preadv2, fd, r, 1, -2, 0), EINVAL);
  int p[2];
  CHECK("pipe", pipe(p) == 0);
  CHECK_ERRNO("pwritev2 on a pipe with an offset: ESPIPE", pv2(SYS_pwritev2, p[1], w, 1, 0, 0), ESPIPE);
  CHECK("pwritev2 on a pipe at -1", pv2(SYS_pwritev2, p[1], w, 1, -1, 0) == 6);
  CHECK("preadv2 on a pipe at -1", pv2(SYS_preadv2, p[0], r, 1, -1, 0) == 5);
  /* The ioctls every file takes. */
  int on = 1;
  CHECK("FIONBIO on a pipe", ioctl(p[0], FIONBIO, &on) == 0 && (fcntl(p[0], F_GETFL) & O_NONBLOCK));
  CHECK("the pipe's last byte", read(p[0], x, 1) == 1);
  CHECK_ERRNO("then an empty read: EAGAIN", read(p[0], x, 1), EAGAIN);
  on = 0;
  CHECK("FIONBIO off", ioctl(p[0], FIONBIO, &on) == 0 && !(fcntl(p[0], F_GETFL) & O_NONBLOCK));
  CHECK("FIOCLEX on a file", ioctl(fd, FIOCLEX) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC);
  CHECK("FIONCLEX", ioctl(fd, FIONCLEX) == 0 && fcntl(fd, F_GETFD) == 0);
  close(fd);
  return finish();
}
