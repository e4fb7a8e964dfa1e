/* execve of a host binary must fail: the rootfs holds only this program. */
#include "raw.h"

int main(void) {
  const char *argv[] = {"/bin/sh", "-c", "echo 'FAIL: execve of host /bin/sh succeeded'; exit 3", NULL};
  const char *envp[] = {NULL};
  long r = raw3(NR_execve, "/bin/sh", argv, envp);
  report(r < 0, "execve(/bin/sh) fails", r);
  const char *argv2[] = {"/usr/bin/env", NULL};
  r = raw3(NR_execve, "/usr/bin/env", argv2, envp);
  report(r < 0, "execve(/usr/bin/env) fails", r);
  return done();
}
