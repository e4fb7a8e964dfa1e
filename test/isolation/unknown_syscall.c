/* Unknown and out-of-ABI syscall numbers return -ENOSYS and the program goes
 * on; they must never be passed to the host kernel. */
#include "raw.h"

int main(void) {
  static const struct { long nr; const char *what; } cases[] = {
      {1000, "syscall 1000"},
      {400, "syscall 400 (unassigned gap)"},
      {423, "syscall 423 (unassigned gap)"},
      {100000, "syscall 100000"},
      {-1, "syscall -1"},
      {0x7fffffff, "syscall 0x7fffffff"},
      {0x40000000 + 39, "x32 ABI getpid (0x40000000|39)"},
      {0x40000000 + 110, "x32 ABI getppid"},
      {512, "syscall 512 (x32 range)"},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    long r = raw0(cases[i].nr);
    char what[128];
    snprintf(what, sizeof what, "%s returns -ENOSYS", cases[i].what);
    report(r == -E_NOSYS, what, r);
  }
  long r = raw0(NR_getpid);
  report(r > 0, "getpid still works afterwards", r);
  return done();
}
