/* ptrace and cross-process memory access must not work on anything outside
 * the sandbox; PTRACE_TRACEME must fail (ENOSYS or EPERM). */
#include "raw.h"

#define PTRACE_TRACEME 0
#define PTRACE_PEEKDATA 2
#define PTRACE_ATTACH 16
#define PTRACE_SEIZE 0x4206

int main(int argc, char **argv) {
  const char *c = arg_value(argc, argv, "canary");
  long canary = c ? atol(c) : 999999;
  long r = raw4(NR_ptrace, PTRACE_TRACEME, 0, 0, 0);
  report(r == -E_NOSYS || r == -E_PERM, "ptrace(PTRACE_TRACEME) fails with ENOSYS or EPERM", r);
  r = raw4(NR_ptrace, PTRACE_ATTACH, canary, 0, 0);
  report(r < 0, "ptrace(PTRACE_ATTACH, canary) fails", r);
  r = raw4(NR_ptrace, PTRACE_SEIZE, canary, 0, 0);
  report(r < 0, "ptrace(PTRACE_SEIZE, canary) fails", r);
  r = raw4(NR_ptrace, PTRACE_ATTACH, 1, 0, 0);
  report(r < 0, "ptrace(PTRACE_ATTACH, 1) fails", r);
  long word;
  r = raw4(NR_ptrace, PTRACE_PEEKDATA, canary, 0x400000, &word);
  report(r < 0, "ptrace(PTRACE_PEEKDATA, canary) fails", r);
  char buf[64];
  struct { void *base; unsigned long len; } local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
  r = raw6(NR_process_vm_readv, canary, (long)&local, 1, (long)&remote, 1, 0);
  report(r < 0, "process_vm_readv(canary) fails", r);
  r = raw6(NR_process_vm_writev, canary, (long)&local, 1, (long)&remote, 1, 0);
  report(r < 0, "process_vm_writev(canary) fails", r);
  return done();
}
