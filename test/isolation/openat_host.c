/* Host files must be out of reach: run with --rootfs=<empty dir> holding only
 * this program, every attempt to reach /etc or a host file outside the rootfs
 * (path passed as secret=PATH by isolation.sh) must fail. */
#include "raw.h"

#define AT_FDCWD -100
#define O_RDONLY 0
#define O_PATH 010000000

static void must_fail(const char *what, long ret) {
  if (ret >= 0) {
    char buf[64] = {0};
    long n = raw3(NR_read, ret, buf, sizeof buf - 1);
    printf("  opened fd %ld, read %ld bytes: %.40s\n", ret, n, n > 0 ? buf : "");
  }
  report(ret < 0, what, ret);
}

int main(int argc, char **argv) {
  const char *secret = arg_value(argc, argv, "secret");
  if (!secret) {
    printf("FAIL: no secret=PATH argument (run through isolation.sh)\n");
    return 1;
  }
  char rel[4096];
  snprintf(rel, sizeof rel, "../../../../../../../..%s", secret);
  struct { unsigned long long flags, mode, resolve; } how = {O_RDONLY, 0, 0};
  struct { unsigned int bytes; int type; unsigned char h[128]; } handle = {8, 1, {2, 0, 0, 0, 0, 0, 0, 0}};
  char statbuf[256];

  must_fail("openat(AT_FDCWD, /etc/hostname)", raw4(NR_openat, AT_FDCWD, "/etc/hostname", O_RDONLY, 0));
  must_fail("openat(AT_FDCWD, /etc/passwd)", raw4(NR_openat, AT_FDCWD, "/etc/passwd", O_RDONLY, 0));
  must_fail("openat(AT_FDCWD, secret outside rootfs)", raw4(NR_openat, AT_FDCWD, secret, O_RDONLY, 0));
  must_fail("openat(AT_FDCWD, ../../..secret)", raw4(NR_openat, AT_FDCWD, rel, O_RDONLY, 0));
  must_fail("openat(O_PATH, secret)", raw4(NR_openat, AT_FDCWD, secret, O_PATH, 0));
  must_fail("open(secret)", raw3(NR_open, secret, O_RDONLY, 0));
  must_fail("openat2(secret)", raw4(NR_openat2, AT_FDCWD, secret, &how, sizeof how));
  must_fail("openat(/proc/1/root/etc/hostname)", raw4(NR_openat, AT_FDCWD, "/proc/1/root/etc/hostname", O_RDONLY, 0));
  must_fail("open_by_handle_at(root handle)", raw3(NR_open_by_handle_at, AT_FDCWD, &handle, O_RDONLY));
  long r = raw4(NR_newfstatat, AT_FDCWD, secret, statbuf, 0);
  report(r < 0, "newfstatat(secret) fails", r);
  r = raw4(NR_newfstatat, AT_FDCWD, "/etc/passwd", statbuf, 0);
  report(r < 0, "newfstatat(/etc/passwd) fails", r);
  return done();
}
