/* No host file descriptors leak into the sandbox: only 0, 1, 2 are open. */
#include "raw.h"

int main(void) {
  char st[256];
  int open_fds = 0;
  long first = -1;
  for (long fd = 3; fd < 65536; fd = fd < 4096 ? fd + 1 : fd + 61) {
    long r = raw2(NR_fstat, fd, st);
    if (r != -E_BADF) {
      open_fds++;
      if (first < 0) first = fd;
    }
  }
  printf("first open fd above 2: %ld\n", first);
  report(open_fds == 0, "fstat of fds 3..65535 gives EBADF", open_fds);
  for (long fd = 0; fd <= 2; fd++) {
    long r = raw2(NR_fstat, fd, st);
    char what[64];
    snprintf(what, sizeof what, "fd %ld (stdio) is open", fd);
    report(r == 0, what, r);
  }
  return done();
}
