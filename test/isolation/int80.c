/* The 32-bit syscall entry (int $0x80) from 64-bit code must not reach the
 * host kernel: i386 getppid (64) and getpid (20) must not return host pids.
 * The Sentry may return -ENOSYS, or kill the program (isolation.sh accepts
 * SIGSEGV/SIGSYS/SIGKILL deaths for this test). */
#include "raw.h"

static long int80(long nr) {
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory");
  return ret;
}

int main(void) {
  printf("trying int $0x80\n");
  fflush(stdout);
  long ppid = int80(64);
  report(ppid <= 0, "int $0x80 getppid does not return a host pid", ppid);
  long pid = int80(20);
  report(pid <= 1, "int $0x80 getpid does not return a host pid", pid);
  return done();
}
